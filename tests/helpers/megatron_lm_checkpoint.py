"""A Megatron-LM checkpoint's ``args`` as Megatron-LM's own code makes them (not a pytest file).

Usage (the Megatron-LM tree first on PYTHONPATH, or today's stack's environment, as tests/helpers/megatron_lm_env.py
runs
scripts)::

    python tests/helpers/megatron_lm_checkpoint.py SAVE_DIR ITERATION WORLD_SIZE pretrain_gpt.py-arguments...
    python tests/helpers/megatron_lm_checkpoint.py --jobs JOBS.json   # [[SAVE_DIR, ITERATION, WORLD_SIZE, args...]...]

With ``--jobs`` Megatron-LM is imported once and each checkpoint is made in a forked child (as
megatron_lm_truth.py runs its cases): the same files, without an interpreter start and an import per checkpoint.

Runs what ``pretrain()`` runs before training on the arguments (with tests/helpers/megatron_lm_truth.py's GPU
stand-ins): ``parse_args``, ``validate_args``, the microbatch calculator, ``get_optimizer_param_scheduler``
(``update_train_iters`` for sample-based runs); then leaves ``iteration``, ``consumed_train_samples`` and
``consumed_valid_samples`` as ITERATION steps of ``train()`` leave them (each step adds the global batch, each
evaluation at a multiple of eval_interval eval_iters global batches, before the checkpoint) and saves them the way
``save_checkpoint``'s ``torch`` format does: ``torch.save`` of ``{"args", "iteration", "checkpoint_version"}``
to ``SAVE_DIR/iter_{N:07d}/mp_rank_00/model_optim_rng.pt``, and ``latest_checkpointed_iteration.txt``.
Test-side stand-in: no model or optimizer is built or saved (no GPU here), only what Megatron-LM saves
about the run; the reader (neox_epoch.formats.checkpoint) never loads weights anyway.
"""

from __future__ import annotations

import os
import sys
import types

import megatron_lm_truth as truth


def main(argv: list[str]) -> int:
    save, iteration, world = argv[0], int(argv[1]), int(argv[2])
    truth._import_megatron()
    args = truth._parse(argv[3:], world)
    truth.M["arguments"].validate_args(args, {})
    truth.M["global_vars"].set_args(args)
    truth._init_calculator(args)
    truth.M["training"].get_optimizer_param_scheduler(types.SimpleNamespace(param_groups=[]))
    args.iteration = iteration
    args.consumed_train_samples = iteration * args.global_batch_size
    if args.eval_interval and args.eval_iters and not args.skip_train:  # each evaluation of train() adds a batch
        # (0.19.2: of --eval-global-batch-size, at the multiples of eval_interval from --start-eval-at-iter on)
        start = max(getattr(args, "start_eval_at_iter", None) or 0, 1)
        evaluations = max(0, iteration // args.eval_interval - (start - 1) // args.eval_interval)
        args.consumed_valid_samples = (
            evaluations * args.eval_iters * getattr(args, "eval_global_batch_size", args.global_batch_size)
        )
    import torch

    tag = os.path.join(save, f"iter_{iteration:07d}", "mp_rank_00")
    os.makedirs(tag, exist_ok=True)
    torch.save(
        {"args": args, "iteration": iteration, "checkpoint_version": 3.0}, os.path.join(tag, "model_optim_rng.pt")
    )
    with open(os.path.join(save, "latest_checkpointed_iteration.txt"), "w", encoding="ascii") as f:
        f.write(str(iteration))
    print(
        f"saved iteration {iteration}: consumed_train_samples {args.consumed_train_samples}, train_iters "
        f"{args.train_iters}, global_batch_size {args.global_batch_size}"
    )
    return 0


def jobs(path: str) -> int:
    """Each job of the JSON list at ``path`` as :func:`main`, in a forked child; 1 at the first that fails."""
    import json
    import multiprocessing

    with open(path, encoding="utf-8") as f:
        todo = json.load(f)
    truth._import_megatron()
    import torch  # noqa: F401  (imported before forking, as Megatron-LM is)

    fork = multiprocessing.get_context("fork")
    for job in todo:
        sys.stdout.flush()
        child = fork.Process(target=lambda argv=[str(a) for a in job]: sys.exit(main(argv)))
        child.start()
        child.join()
        if child.exitcode != 0:
            print(f"job {job[:3]} failed: exit {child.exitcode}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(jobs(sys.argv[2]) if sys.argv[1:2] == ["--jobs"] else main(sys.argv[1:]))
