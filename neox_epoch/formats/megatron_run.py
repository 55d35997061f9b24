"""What Megatron-LM does with a parsed command line (:func:`megatron_run`), in its order: the LR scheduler
(update_train_iters for sample-based runs), get_train_valid_test_num_samples, the dataset config's and the
builder's checks.

Pure: stdlib only; no torch, no megatron import."""

from __future__ import annotations

from dataclasses import dataclass

from neox_epoch.formats.megatron_args import MegatronArgs
from neox_epoch.formats.megatron_validate import (
    batch_schedule,
)
from neox_epoch.semantics import megatron_batches, megatron_lr
from neox_epoch.semantics import megatron_lm as megatron_lm_sem
from neox_epoch.semantics.megatron_lm import MegatronRefusal, refuse


@dataclass(frozen=True)
class MegatronRun:
    """What Megatron-LM does with a command line: iterations, samples asked per split, the LR schedule."""

    train_iters: int
    """After update_train_iters (sample-based runs: derived from train_samples and the batch schedule)."""
    global_batch_size: int
    """The final global batch."""
    num_samples: tuple[int, int | None, int]
    """get_train_valid_test_num_samples(): train, valid (None: full validation), test."""
    scheduler: megatron_lr.SchedulerSteps
    """The LR schedule's lengths in samples."""
    schedule: megatron_batches.BatchSchedule
    """The batch-size calculator (constant or ramp)."""


def _dataset_config(args: MegatronArgs) -> None:
    """Mirror the GPTDatasetConfig checks core_gpt_dataset_config_from_args triggers."""
    if args.blend_per_split is not None and any(args.blend_per_split):
        if args.split is not None:
            raise refuse(
                "--split",
                args.split,
                "core_gpt_dataset_config_from_args",
                "AssertionError",
                "split and blend_per_split are incompatible",
                "per-split data paths are not split",
                "drop --split",
            )
        for b in args.blend_per_split:
            if b is not None and b[1] is not None and len(b[0]) != len(b[1]):
                raise refuse(
                    "--*-data-path",
                    b,
                    "core_gpt_dataset_config_from_args",
                    "AssertionError",
                    "blend per split prefixes and weights must be equal in number",
                    "",
                    "fix the blend",
                )
    elif args.blend is not None and args.split is None:
        raise refuse(
            "--split",
            "not given",
            "core_gpt_dataset_config_from_args",
            "AssertionError",
            "split must be provided when blend is not None",
            "--data-args-path gets no legacy default split",
            "give --split e.g. 969,30,1",
        )


def megatron_run(args: MegatronArgs) -> MegatronRun:
    """What Megatron-LM does with the command line, in its order: the LR scheduler (update_train_iters for
    sample-based runs), get_train_valid_test_num_samples, the dataset config's checks, under the rules of
    ``args.megatron_lm_version``."""
    with megatron_lm_sem.using(args.rules):
        return _run(args)


def _run(args: MegatronArgs) -> MegatronRun:
    """megatron_run under the rules in force."""
    known: dict[str, object] = {
        "data_parallel_size": args.data_parallel_size,
        "global_batch_size": args.global_batch_size,
    }
    try:
        schedule = batch_schedule(
            args.megatron_lm_version,
            args.global_batch_size,
            args.micro_batch_size,
            args.calculator_dp,
            args.decrease_batch_size_if_needed,
            tuple(args.rampup_batch_size) if args.rampup_batch_size is not None else None,
            args.step_batch_size_schedule,
            args.seq_length,
        )
        if not args.train_iters and args.train_samples:
            train_iters = megatron_batches.update_train_iters(args.train_iters, args.train_samples, schedule)
        else:
            train_iters = args.train_iters or 0
        steps = megatron_lr.get_optimizer_param_scheduler(
            args.train_iters,
            args.train_samples,
            args.global_batch_size,
            args.lr_decay_iters,
            args.lr_decay_samples,
            args.lr_warmup_iters,
            args.lr_warmup_samples,
            args.lr_warmup_fraction,
            args.lr_wsd_decay_iters,
            args.lr_wsd_decay_samples,
            args.lr_decay_style,
            args.lr,
            args.min_lr,
            args.lr_warmup_init,
        )
        known.update(
            train_iters=train_iters,
            scheduler=steps,
            train_consumed=megatron_batches.schedule_consumed(schedule, train_iters),
        )
        num = megatron_lm_sem.get_train_valid_test_num_samples(
            train_iters,
            args.train_samples,
            args.global_batch_size,
            args.eval_interval,
            args.eval_iters,
            args.full_validation,
            args.skip_train,
            args.phase_transition_iterations,
            eval_global_batch_size=args.eval_global_batch_size,
            start_eval_at_iter=args.start_eval_at_iter,
        )
        known.update(num_samples=num)
        _dataset_config(args)
        _builder_sizes(args, num)
        megatron_batches.train_batch_consistency(schedule, train_iters)
    except MegatronRefusal as err:
        err.known.update(known)
        raise
    return MegatronRun(train_iters, args.global_batch_size, num, steps, schedule)


def _builder_sizes(args: MegatronArgs, num: tuple[int, int | None, int]) -> None:
    """Mirror ``BlendedMegatronDatasetBuilder.__init__``'s check: a split asked for no size (the valid split
    with --full-validation) must have no weights."""
    if num[1] is not None:
        return
    if args.blend_per_split is not None:
        weighted = args.blend_per_split[1] is not None and args.blend_per_split[1][1] is not None
    else:
        weighted = args.blend is not None and args.blend[1] is not None
    if weighted:
        message = (
            "size_is_none => weights_are_none fails \n"
            + " " * 20
            + "for valid split\n"
            + " " * 20
            + "This can occur with multiple validation sets if datasets have weights"
        )
        raise refuse(
            "--full-validation",
            "set",
            "builder",
            "AssertionError",
            message,
            "the valid split is asked for no size, and a blend with weights needs one",
            "drop the weights (blend by length) or drop --full-validation",
        )
