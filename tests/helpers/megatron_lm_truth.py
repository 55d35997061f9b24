"""Ground truth from REAL Megatron-LM (megatron/training + pretrain_gpt.py), not a pytest file.

Usage (the Megatron-LM tree first on PYTHONPATH, or on Python >= 3.12 the megatron-core 0.19.2 wheel with
MEGATRON_LM_APPEND_PATH naming core_v0.19.0's tree, appended after it; see tests/helpers/megatron_lm_env.py)::

    python tests/helpers/megatron_lm_truth.py CASES.json OUT.json [--timeout 120]

CASES.json: ``[{"id", "argv": [pretrain_gpt.py arguments], "world_size": N, "cache_dir": DIR}, ...]``.
Each case runs in a forked worker (Megatron-LM is imported once, before forking) that does what
``pretrain()`` does before training, in its order, and records the first refusal:

1. ``parse_args()`` with ``sys.argv`` set and ``WORLD_SIZE`` = world_size (where Megatron-LM reads it);
2. ``validate_args(args, {})``;
3. ``init_num_microbatches_calculator(...)`` as ``set_global_variables`` calls it (0.19.2: with the step schedule,
   the sequence length and dp x gtp_weight_remat_size);
4. ``get_optimizer_param_scheduler(optimizer)`` (it calls ``update_train_iters`` for sample-based runs);
5. ``get_train_valid_test_num_samples()`` with ``args.iteration = 0`` (a new run);
6. pretrain_gpt.py's ``core_gpt_dataset_config_from_args(args)`` and the real
   ``BlendedMegatronDatasetBuilder(GPTDataset, sizes, is_built_on_rank, config).build()``;
7. with a batch-size ramp or a step schedule, the training loop's ``update_num_microbatches(consumed,
   consistency_check=True)`` (and, for the schedule, its check that microbatches never decrease);
(5. with ``"iteration": I``: the launch that resumes at iteration I, e.g. a phase's at its transition; with
``"draws_at": N`` the per-source draws among the train split's first N positions are recorded as ``draws_at``.)
8. with ``"resume_at": C, "resume_iteration": I`` in the case, a resume of this build at C consumed samples
   after iteration I: Megatron-LM's own ``MegatronPretrainingSampler`` from C for every data-parallel rank,
   its micro batches taken for the iterations up to ``train_iters`` (or until it runs out), and the blend's
   ``dataset_index`` read at the positions drawn; with ``"resume_valid_at": V`` (the checkpoint's
   ``consumed_valid_samples``) too, the validation loader: ``V``, or when 0 at an iteration > 0 the value
   ``build_train_valid_test_data_loaders`` recomputes from the args, fed to its ``MegatronPretrainingSampler``.

Stand-ins, test side only (each says why at its definition): CUDA_DEVICE_MAX_CONNECTIONS=1, the GPU
architecture query answered as an H100 would, a one-rank gloo group, a parameter-less optimizer for the
scheduler, ``is_built_on_rank`` always True. A build that would never return (a split with no document
asked for samples) is detected before building and recorded as the refusal "builder would never return";
a worker that still hangs is killed after ``--timeout`` seconds.

OUT.json: ``{"megatron_lm_version", "megatron_lm_dir", "import_s", "cases": [CASE, ...]}`` with
CASE = ``{"id", "refusal": null | {"stage", "error", "message"}, "world_size", "data_parallel_size",
"global_batch_size", "train_iters", "train_consumed" (the calculator's running batch summed over train_iters
steps, up to 2,000,000 of them, when the training loop's checks pass), "num_samples": [train, valid, test],
"scheduler": {...},
"splits": {"train"|"valid"|"test": SPLIT | [SPLIT, ...] | null}}``; SPLIT is a GPTDataset record
(``dataset_path, num_samples, len, num_documents, tokens, epochs, order``: a digest of its document, sample
and shuffle index) or a BlendedDataset record (``size, len, weights, draws, datasets: [GPT record, ...]``);
``resume`` (step 8): ``{"refusal": the sampler's assertion | null, "before": per-source draws among the first C
positions, "iterations": iterations the sampler feeds, "after": per-source draws of those iterations}`` (with
``"tokens": true`` in the case also ``tokens_before``/``tokens_after``: per source, an .npy of each token's count as
an input token of those positions, walked through the real GPTDataset's arrays);
``resume_valid``: ``{"start": the consumed samples the sampler got, "refusal": its assertion | null, "batches":
the micro batches it yields to rank 0}``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import sys
import tempfile
import time
import traceback
import types
import warnings
from typing import Any

import numpy as np

SPLITS = ("train", "valid", "test")
MESSAGE_CHARS = 400
M: dict[str, Any] = {}


class Refused(Exception):
    """A stage of Megatron-LM raised: carries the stage, the exception type and message."""

    def __init__(self, stage: str, error: str, message: str) -> None:
        super().__init__(f"{stage}: {error}: {message}")
        self.record = {"stage": stage, "error": error, "message": message[:MESSAGE_CHARS]}


def _stand_ins() -> None:
    """Test-side stand-ins for what a GPU cluster gives Megatron-LM; nothing of Megatron-LM is changed."""
    import torch

    # validate_args asserts CUDA_DEVICE_MAX_CONNECTIONS=1 with tensor/context parallelism (the examples export it).
    os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    # validate_args asks the GPU generation (get_device_arch_version -> get_device_properties(...).major, and
    # get_device_capability for MoE grouped GEMM); this machine has no GPU, so answer as an H100 (sm_90) would.
    torch.cuda.get_device_properties = lambda *a, **k: types.SimpleNamespace(major=9, minor=0, name="H100 stand-in")
    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)


def _import_megatron() -> None:
    """Import Megatron-LM's training side and pretrain_gpt.py once, before forking."""
    warnings.filterwarnings("ignore")
    if os.environ.get("MEGATRON_LM_APPEND_PATH"):  # today's stack: the wheel's megatron first, the tree's scripts
        sys.path.append(os.environ["MEGATRON_LM_APPEND_PATH"])
    _stand_ins()
    import megatron.training.global_vars as global_vars
    import pretrain_gpt
    from megatron.core.datasets import blended_megatron_dataset_builder as builder_module
    from megatron.core.datasets.gpt_dataset import GPTDataset
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    from megatron.core.datasets.utils import normalize
    from megatron.core.num_microbatches_calculator import (
        get_current_global_batch_size,
        get_num_microbatches,
        init_num_microbatches_calculator,
        update_num_microbatches,
    )
    from megatron.core.package_info import __version__
    from megatron.training import arguments, training

    M.update(
        arguments=arguments,
        training=training,
        global_vars=global_vars,
        pretrain_gpt=pretrain_gpt,
        builder_module=builder_module,
        GPTDataset=GPTDataset,
        IndexedDataset=IndexedDataset,
        normalize=normalize,
        init_calc=init_num_microbatches_calculator,
        update_calc=update_num_microbatches,
        num_micro=get_num_microbatches,
        current_gbs=get_current_global_batch_size,
        # the public version: megatron-core 0.19.x's package_info appends "+<commit>" when a git checkout
        # is around (seen in a fresh clone of this repository: "0.19.2+080f03f")
        version=str(__version__).split("+")[0],
    )


def _stage(name: str, fn: Any, *args: Any) -> Any:
    """Run one Megatron-LM step; any exception (SystemExit included) becomes a Refused of that stage."""
    try:
        return fn(*args)
    except Refused:
        raise
    except BaseException as err:  # noqa: BLE001 - every refusal of the real code is a fact to record
        message = str(err.code) if isinstance(err, SystemExit) else str(err)
        raise Refused(name, type(err).__name__, message) from err


# ------------------------------------------------------------------------------------------- stages


def _parse(argv: list[str], world_size: int) -> Any:
    """parse_args() as pretrain() calls it: sys.argv and the WORLD_SIZE torchrun sets."""
    os.environ["WORLD_SIZE"] = str(world_size)
    os.environ["RANK"] = "0"
    sys.argv = ["pretrain_gpt.py", *argv]
    return M["arguments"].parse_args()


def _scheduler(args: Any, lr_at: list[int] | None = None) -> dict[str, Any]:
    """get_optimizer_param_scheduler with a one-group optimizer of no parameters (test-side: the scheduler only
    sets lr on optimizer.param_groups; no model is built). ``lr_at``: the iterations (0-based) at which to record
    the learning rate the group holds, stepping the scheduler by the global batch per iteration as train_step
    does (``opt_param_scheduler.step(increment=global_batch_size)``)."""
    group: dict[str, Any] = {"params": []}
    sched = M["training"].get_optimizer_param_scheduler(types.SimpleNamespace(param_groups=[group]))
    out = {
        "lr_warmup_steps": sched.lr_warmup_steps,
        "lr_decay_steps": sched.lr_decay_steps,
        "wd_incr_steps": sched.wd_incr_steps,
        "wsd_decay_steps": sched.wsd_decay_steps,
    }
    if lr_at:
        lrs, done = {}, 0
        for it in sorted(set(lr_at)):
            for _ in range(it - done):
                sched.step(increment=args.global_batch_size)
            done = it
            lrs[str(it)] = float(group["lr"])
        out["lr_at"] = lrs
    return out


def _train_consistency(args: Any) -> None:
    """The training loop's per-step update_num_microbatches(consumed, consistency_check=True) through the ramp
    (0.16.1) or the step schedule (0.19.2: train first updates without the check and asserts the number of
    microbatches does not decrease from the second iteration on, then checks)."""
    if getattr(args, "step_batch_size_schedule", None) is not None:
        from megatron.core import num_microbatches_calculator as calculators

        last = calculators._GLOBAL_NUM_MICROBATCHES_CALCULATOR.schedule[-1][0]
        consumed, num = 0, M["num_micro"]()
        for iteration in range(args.train_iters):
            M["update_calc"](consumed, consistency_check=False)
            if M["num_micro"]() != num and iteration != 0:
                assert M["num_micro"]() > num, (
                    f"Number of microbatches should not decrease; going from {num} to {M['num_micro']()}"
                )
            num = M["num_micro"]()
            M["update_calc"](consumed, consistency_check=True)
            if consumed >= last:
                break
            consumed += _dp(args) * args.micro_batch_size * M["num_micro"]()
        M["update_calc"](0, consistency_check=False)
        return
    if args.rampup_batch_size is None:
        return
    consumed = 0
    for _ in range(args.train_iters):
        M["update_calc"](consumed, consistency_check=True)
        if consumed > int(args.rampup_batch_size[2]):
            break
        consumed += args.data_parallel_size * args.micro_batch_size * M["num_micro"]()
    M["update_calc"](0, consistency_check=False)


def _dp(args: Any) -> int:
    """The data-parallel size the num-microbatches calculator gets (set_global_variables: 0.19.2 multiplies by
    gtp_weight_remat_size)."""
    return int(args.data_parallel_size) * int(getattr(args, "gtp_weight_remat_size", 1))


def _train_consumed(args: Any) -> int:
    """Samples train_iters iterations consume from a new run: the calculator's running global batch summed step by
    step (update_num_microbatches without the check, as update_train_iters walks it)."""
    consumed = 0
    for _ in range(args.train_iters):
        M["update_calc"](consumed, consistency_check=False)
        consumed += _dp(args) * args.micro_batch_size * M["num_micro"]()
    M["update_calc"](0, consistency_check=False)
    return consumed


def _record_consumed(args: Any, out: dict[str, Any]) -> None:
    """``train_consumed`` for a run the training loop's checks let start (up to 2,000,000 iterations walked)."""
    if args.train_iters <= 2_000_000:
        out["train_consumed"] = _train_consumed(args)


def _init_calculator(args: Any) -> None:
    """init_num_microbatches_calculator as set_global_variables calls it (0.19.2 adds the step schedule, the
    sequence length and dp x gtp_weight_remat_size)."""
    import inspect

    if "step_batch_size_schedule" in inspect.signature(M["init_calc"]).parameters:
        M["init_calc"](
            args.rank,
            args.rampup_batch_size,
            args.global_batch_size,
            args.micro_batch_size,
            _dp(args),
            args.decrease_batch_size_if_needed,
            step_batch_size_schedule=args.step_batch_size_schedule,
            seq_length=args.seq_length,
        )
    else:
        M["init_calc"](
            args.rank,
            args.rampup_batch_size,
            args.global_batch_size,
            args.micro_batch_size,
            args.data_parallel_size,
            args.decrease_batch_size_if_needed,
        )


def _num_sequences(prefix: str) -> int:
    """Sequences in a prefix's .idx, read with Megatron's IndexedDataset (held while read)."""
    ds = M["IndexedDataset"](prefix)
    return int(ds.sequence_lengths.shape[0])


def _requests(config: Any, sizes: list[int | None]) -> list[tuple[str, int, tuple[float, float]]]:
    """(prefix, num_samples, bookends) of every GPTDataset the builder will ask for samples (not None)."""
    surplus = config.mid_level_dataset_surplus
    out: list[tuple[str, int, tuple[float, float]]] = []

    def add(
        prefixes: list[str], weights: list[float] | None, matrix: list[Any], sz: list[int | None], single_direct: bool
    ) -> None:
        if weights is None:
            if single_direct and len(prefixes) == 1:
                out.extend((prefixes[0], s, b) for s, b in zip(sz, matrix) if b is not None and s is not None)
            return
        buffers = M["builder_module"]._get_size_per_split_per_dataset(M["normalize"](weights), sz, surplus=surplus)
        for prefix, per_split in zip(prefixes, buffers):
            out.extend((prefix, s, b) for s, b in zip(per_split, matrix) if b is not None and s is not None)

    if config.blend is not None:
        add(list(config.blend[0]), config.blend[1], list(config.split_matrix), sizes, True)
    elif config.blend_per_split is not None:
        for i, blend in enumerate(config.blend_per_split):
            if blend is None:
                continue
            matrix = [None, None, None]
            matrix[i] = (0.0, 1.0)
            spoof: list[int | None] = [0, 0, 0]
            spoof[i] = sizes[i]
            if len(blend[0]) == 1:  # one prefix: the GPTDataset directly, over the whole file
                if sizes[i] is not None:
                    out.append((blend[0][0], sizes[i], (0.0, 1.0)))
                continue
            multi_valid = config.multiple_validation_sets and i == 1 and len(blend[0]) > 1
            add(list(blend[0]), None if multi_valid else blend[1], matrix, spoof, True)
            if multi_valid and sizes[i] is not None:
                out.extend((p, sizes[i], (0.0, 1.0)) for p in blend[0])
    return out


def _never_returns(config: Any, sizes: list[int | None]) -> str | None:
    """The first dataset asked for samples whose split has no sequence (the builder would loop forever)."""
    for prefix, num_samples, (lo, hi) in _requests(config, sizes):
        n = _num_sequences(prefix)
        if int(round(hi * float(n))) - int(round(lo * float(n))) <= 0:
            return (
                f"{os.path.basename(prefix)}: split ({lo:g}, {hi:g}) of {n} sequences is empty and "
                f"{num_samples} samples are requested"
            )
    return None


def _gpt_record(ds: Any) -> dict[str, Any]:
    """What one GPTDataset built."""
    indices = np.asarray(ds.indices)
    docs = int(indices.shape[0])
    tokens = int(np.sum(ds.dataset.sequence_lengths[indices], dtype=np.int64)) if docs else 0
    order = hashlib.md5(usedforsecurity=False)
    for array in (ds.document_index, ds.sample_index, ds.shuffle_index):
        order.update(np.ascontiguousarray(array).tobytes())
    return {
        "type": "GPTDataset",
        "dataset_path": ds.dataset_path,
        "num_samples": ds.num_samples,
        "len": len(ds),
        "num_documents": docs,
        "tokens": tokens,
        "order": order.hexdigest(),
        "epochs": int(np.asarray(ds.document_index).shape[0] // docs) if docs else None,
    }


def _token_counts(train: Any, positions: np.ndarray, seq_length: int, where: str) -> list[str]:
    """Per source, each token's count as an input token of the samples the blend (or the one dataset) gives at
    ``positions``, walked through the real GPTDataset's own arrays (tests/helpers/exposure_util.py); saved as .npy files
    (one per token of the source's split documents, in .idx order), their paths returned."""
    from exposure_util import count_gpt_exposure

    blended = type(train).__name__ == "BlendedDataset"
    parts = train.datasets if blended else [train]
    index = np.asarray(train.dataset_index)[positions] if blended else np.zeros(len(positions), np.int64)
    items = np.asarray(train.dataset_sample_index)[positions] if blended else positions
    paths = []
    for k, ds in enumerate(parts):
        counts = count_gpt_exposure(ds, items[index == k], seq_length)
        paths.append(f"{where}-{k}.npy")
        np.save(paths[-1], np.concatenate([counts[d] for d in sorted(counts)]))
    return paths


def _resume(args: Any, train: Any, consumed: int, iteration: int, where: str = "") -> dict[str, Any]:
    """Megatron-LM's train loader resumed at ``consumed`` (build_pretraining_data_loader's single sampler, one per
    data-parallel rank), fed to the iterations left until ``train_iters``; with ``where``, each source's token
    counts of the positions before ``consumed`` and of those the iterations draw (:func:`_token_counts`)."""
    from megatron.training.datasets.data_samplers import MegatronPretrainingSampler

    dp, micro = args.data_parallel_size, args.micro_batch_size
    index = np.asarray(train.dataset_index) if type(train).__name__ == "BlendedDataset" else None
    sources = len(train.datasets) if index is not None else 1
    which = (lambda ids: index[ids]) if index is not None else (lambda ids: np.zeros(len(ids), np.int64))
    before = np.bincount(which(np.arange(min(consumed, len(train)))), minlength=sources).tolist()
    try:
        ranks = [list(MegatronPretrainingSampler(len(train), consumed, micro, r, dp)) for r in range(dp)]
    except AssertionError as err:
        return {"refusal": str(err), "before": before, "iterations": 0, "after": [0] * sources}
    per_iteration = args.global_batch_size // (micro * dp)
    iterations = min(len(ranks[0]) // per_iteration, args.train_iters - iteration)
    ids = [i for rank in ranks for batch in rank[: iterations * per_iteration] for i in batch]
    after = np.bincount(which(np.asarray(ids, dtype=np.int64)), minlength=sources).tolist()
    out = {"refusal": None, "before": before, "iterations": iterations, "after": after}
    if where:
        drawn = np.arange(min(consumed, len(train)), dtype=np.int64)
        out["tokens_before"] = _token_counts(train, drawn, args.seq_length, where + "-before")
        out["tokens_after"] = _token_counts(train, np.asarray(ids, dtype=np.int64), args.seq_length, where + "-after")
    return out


def _resume_valid(args: Any, valid: Any, saved: int, iteration: int) -> dict[str, Any]:
    """Megatron-LM's validation loader resumed: ``build_train_valid_test_data_loaders``' start (the checkpoint's
    consumed_valid_samples, recomputed from the args when 0; 0 with --full-validation) fed to its own sampler."""
    from megatron.training.datasets.data_samplers import MegatronPretrainingSampler

    start = saved
    skipped = (getattr(args, "start_eval_at_iter", None) or 0) // args.eval_interval  # 0.19.2 only
    if iteration > 0 and start == 0 and args.train_samples is None:  # its backward-compatibility branch
        start = (
            max(0, iteration // args.eval_interval - skipped)
            * args.eval_iters
            * getattr(args, "eval_global_batch_size", args.global_batch_size)
        )
    if args.full_validation:
        start = 0
    try:
        batches = len(
            list(
                MegatronPretrainingSampler(
                    len(valid),
                    start,
                    getattr(args, "eval_micro_batch_size", args.micro_batch_size),
                    0,
                    args.data_parallel_size,
                )
            )
        )
    except AssertionError as err:
        return {"start": start, "refusal": str(err), "batches": 0, "index": None}
    index = np.asarray(valid.dataset_index).tolist() if type(valid).__name__ == "BlendedDataset" else None
    return {"start": start, "refusal": None, "batches": batches, "index": index}  # index: each sample's source


def _record(ds: Any) -> Any:
    """A split's dataset (GPT, blended, a list for multiple validation sets, or None)."""
    if ds is None:
        return None
    if isinstance(ds, list):
        return [_record(d) for d in ds]
    if type(ds).__name__ == "BlendedDataset":
        index = np.asarray(ds.dataset_index)
        draws = np.bincount(index, minlength=len(ds.datasets)).tolist() if index.size else [0] * len(ds.datasets)
        weights = [float(w) for w in ds.weights] if ds.weights is not None else None
        return {
            "type": "BlendedDataset",
            "size": ds.size,
            "len": len(ds),
            "weights": weights,
            "draws": draws,
            "datasets": [_gpt_record(d) for d in ds.datasets],
        }
    return _gpt_record(ds)


def _draws_at(train: Any, n: int) -> list[int]:
    """Per source, the samples among the train dataset's first ``n`` positions (what a phase trains from sample 0)."""
    if type(train).__name__ != "BlendedDataset":
        return [min(n, len(train))]
    index = np.asarray(train.dataset_index[:n], dtype=np.int64)
    return np.bincount(index, minlength=len(train.datasets)).tolist()


def _run_case(case: dict[str, Any]) -> dict[str, Any]:
    """All stages of one case; the first refusal ends it."""
    import torch.distributed as dist

    cache = tempfile.mkdtemp(prefix="mlm-truth-", dir=case["cache_dir"])
    if not dist.is_initialized():
        # the blend builder calls torch.distributed.get_rank(): a one-rank gloo group (test-side stand-in)
        dist.init_process_group("gloo", init_method=f"file://{os.path.join(cache, 'gloo')}", rank=0, world_size=1)
    out: dict[str, Any] = {"id": case["id"], "refusal": None}
    try:
        args = _stage("parse_args", _parse, list(case["argv"]), int(case["world_size"]))
        _stage("validate_args", M["arguments"].validate_args, args, {})
        out.update(
            world_size=args.world_size,
            data_parallel_size=args.data_parallel_size,
            global_batch_size=args.global_batch_size,
        )
        M["global_vars"].set_args(args)
        _stage("num_microbatches_calculator", _init_calculator, args)
        out["scheduler"] = _stage("get_optimizer_param_scheduler", _scheduler, args, case.get("lr_at"))
        out["train_iters"] = args.train_iters
        # a new run: pretrain() sets it to 0 when no checkpoint is loaded; "iteration": I is a launch resumed at I (a
        # phase's launch at its transition: load_checkpoint sets args.iteration)
        args.iteration = int(case.get("iteration", 0))
        sizes = _stage("get_train_valid_test_num_samples", M["training"].get_train_valid_test_num_samples)
        out["num_samples"] = list(sizes)
        config = _stage("core_gpt_dataset_config_from_args", M["pretrain_gpt"].core_gpt_dataset_config_from_args, args)
        builder = _stage(
            "builder",
            M["builder_module"].BlendedMegatronDatasetBuilder,
            M["GPTDataset"],
            list(sizes),
            lambda: True,
            config,
        )  # built on this rank (stand-in)
        try:
            hang = _never_returns(config, list(sizes))
        except Exception:  # noqa: BLE001 - sizes the builder itself cannot handle: let the real build say so
            hang = None
        if hang:
            raise Refused("builder", "builder would never return", hang)
        if not case.get("build", True):
            out["splits"] = "not built (the case asks not to)"
            _stage("train", _train_consistency, args)
            _record_consumed(args, out)
            return out
        datasets = _stage("builder", builder.build)
        out["splits"] = {name: _record(ds) for name, ds in zip(SPLITS, datasets)}
        _stage("train", _train_consistency, args)
        _record_consumed(args, out)
        if "draws_at" in case:
            out["draws_at"] = _draws_at(datasets[0], int(case["draws_at"]))
        if "resume_at" in case:
            out["resume"] = _resume(
                args,
                datasets[0],
                int(case["resume_at"]),
                int(case["resume_iteration"]),
                os.path.join(case["cache_dir"], f"tokens-{case['id']}") if case.get("tokens") else "",
            )
        if "resume_valid_at" in case and datasets[1] is not None:
            out["resume_valid"] = _resume_valid(
                args, datasets[1], int(case["resume_valid_at"]), int(case["resume_iteration"])
            )
    except Refused as refused:
        out["refusal"] = refused.record
    return out


def _worker(case: dict[str, Any], conn: Any) -> None:
    """Forked worker: run one case, send its JSON, leave without exit handlers."""
    code = 0
    try:
        sys.stdout = open(os.devnull, "w")  # Megatron-LM prints every argument; keep the pipe quiet
        conn.send(json.dumps(_run_case(case)))
    except BaseException as err:  # noqa: BLE001
        code = 1
        conn.send(
            json.dumps(
                {
                    "id": case.get("id"),
                    "refusal": {
                        "stage": "harness",
                        "error": type(err).__name__,
                        "message": traceback.format_exc()[-MESSAGE_CHARS:],
                    },
                }
            )
        )
    finally:
        conn.close()
        os._exit(code)


def run_case(case: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One case in a forked worker; a hang is killed after ``timeout`` seconds and recorded."""
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_worker, args=(case, send), daemon=True)
    proc.start()
    send.close()
    if recv.poll(timeout):
        try:
            result = json.loads(recv.recv())
        except EOFError:
            result = {"id": case["id"], "refusal": {"stage": "harness", "error": "Crash", "message": "no result"}}
        proc.join()
        return result
    proc.kill()
    proc.join()
    return {
        "id": case["id"],
        "refusal": {"stage": "builder", "error": "Timeout", "message": f"no result within {timeout:g} s (killed)"},
    }


def main(argv: list[str] | None = None) -> int:
    """Command line: CASES.json OUT.json [--timeout S]."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("cases")
    parser.add_argument("out")
    parser.add_argument("--timeout", type=float, default=120.0)
    opts = parser.parse_args(argv)
    with open(opts.cases, encoding="utf-8") as f:
        cases = json.load(f)
    t0 = time.perf_counter()
    _import_megatron()
    import megatron

    import_s = time.perf_counter() - t0
    results = [run_case(case, opts.timeout) for case in cases]
    out = {
        "megatron_lm_version": M["version"],
        "megatron_lm_dir": os.path.dirname(list(megatron.__path__)[0]),
        "import_s": round(import_s, 2),
        "elapsed_s": round(time.perf_counter() - t0, 2),
        "cases": results,
    }
    tmp = opts.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    os.replace(tmp, opts.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
