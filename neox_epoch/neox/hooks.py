"""The hooks: wrappers set on NeoX's module globals, looked up by NeoX at call time.

=====================================================  =================================================
NeoX name (patched where NeoX looks it up)             what the wrapper does
=====================================================  =================================================
``megatron.training.build_train_valid_test_data_loaders``  plans the run (train_iters and the schedule keys
(and ``megatron.data.data_utils``'s)                   that follow it set before NeoX reads them, train_iters
                                                       checked equal on all ranks), runs NeoX's, then
                                                       logs the per-source table and the JSON record,
                                                       verifies the blend's draws, sets up the counters
``data_utils.get_normalized_weights_and_num_samples``  train split: 1.005 -> the block's buffer, or the
                                                       exact integer targets and their verified weights
``gpt2_dataset._build_index_mappings``                 records each build; ``separate_epochs``: builds an
                                                       epoch-separated index first (see ``index``)
``megatron.training.update_iterations``                keeps train_iters the planned value
``megatron.training.save_checkpoint``                  writes the data position into the checkpoint
                                                       (``resume_state``): a resume with another global
                                                       batch starts at the consumed samples
``megatron.training.training_log``                     live counters (O(1) per step)
``megatron.training.train``                            start/resume counters; final report (also when NeoX
                                                       stops early: ``exit_interval``, an error)
``megatron.training.shift_and_wrap_data_loaders``      the train iterator is guarded: NeoX's
                                                       ``itertools.cycle`` would replay the loader's first
                                                       batches once it is used up; the guard names the
                                                       iteration (``enforce``: :class:`WrapError`)
``GPT2Dataset.__getitem__`` / ``BlendableDataset``     ``enforce`` only: the silent ``idx % len`` wrap
``.__getitem__``                                       becomes :class:`WrapError`
=====================================================  =================================================
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import logging
import math
import os
from dataclasses import asdict, dataclass, field, replace
from types import ModuleType
from typing import Any

import numpy as np

from neox_epoch.errors import DataChangedError, NeoxEpochError, PlanError
from neox_epoch.formats import fingerprint as fingerprint_format
from neox_epoch.neox import run_table
from neox_epoch.neox.block import HookBlock
from neox_epoch.neox.counters import JsonlSink, PassCounters, SourceCounter
from neox_epoch.neox.planning import RunPlan, make_run_plan, values_from_args
from neox_epoch.neox.resume_state import (
    ResumeDecision,
    ResumeState,
    checkpoint_tag_to_load,
    decide,
    fingerprint_changes,
    read_state,
    write_state,
)
from neox_epoch.plan.schedule import CODES as SCHEDULE_CODES
from neox_epoch.plan.staged import StagedRun, stages_json
from neox_epoch.semantics import TrainBuild, neox_index, stage_order
from neox_epoch.semantics import neox as neox_sem
from neox_epoch.semantics.loader import LoaderShape, neox_start
from neox_epoch.util.sink import guarded

log = logging.getLogger("neox_epoch.neox")


#: why valid and test keep NeoX's own build (its 1.005 buffer, epochs shuffled jointly)
EVAL_NOTE = (
    "built as NeoX builds them (x1.005, epochs shuffled jointly): evaluation does not train, so how often it "
    "sees a token changes no weight; only the train split is made exact"
)


class WrapError(NeoxEpochError):
    """``enforce``: NeoX would have wrapped an index past a dataset's end (``idx % len``)."""


def rank() -> int:
    """Global rank: torch.distributed's when initialized, else $RANK, else 0."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except ImportError:  # pragma: no cover - NeoX always has torch
        pass
    return int(os.environ.get("RANK", "0") or 0)


@dataclass
class DatasetRecord:
    """One ``_build_index_mappings`` call NeoX made."""

    name: str
    prefix: str
    documents: int
    tokens: int
    num_samples: int | None
    epochs: int
    samples_built: int
    separated: bool


@dataclass
class State:
    """Everything one installation holds (one per process)."""

    hook: HookBlock
    modules: dict[str, ModuleType]
    originals: dict[tuple[str, str], Any] = field(default_factory=dict)
    run: RunPlan | None = None
    counters: PassCounters | None = None
    builds: list[DatasetRecord] = field(default_factory=list)
    in_build: bool = False
    normalize_calls: int = 0
    table: list[dict[str, Any]] = field(default_factory=list)
    sink: JsonlSink = field(default_factory=lambda: JsonlSink(None))
    blend_request: tuple[list[float], list[int]] | None = None
    """The train blend's (weights, num_samples) as handed to NeoX."""
    saved: ResumeState | None = None
    """What the checkpoint being resumed recorded (None: a new run, or saved without the hooks)."""
    resume: ResumeDecision | None = None
    """Set when the batch shape changed since ``saved``: where to start drawing and when to stop."""
    consumed_base: int = 0
    """Samples consumed at ``iteration_base`` (the iteration training started or resumed at)."""
    iteration_base: int = 0
    valid_samples: int = 0
    """len of the validation dataset NeoX built (0: none), recorded with each checkpoint's state."""
    fingerprint: fingerprint_format.DataFingerprint | None = None
    """The run's data fingerprint (computed once, saved with every checkpoint state)."""

    @property
    def block(self) -> Any:
        return self.hook.block

    def original(self, module: str, name: str) -> Any:
        return self.originals[(module, name)]


# ----------------------------------------------------------------------------------------------------------
# planning and train_iters


def plan_for(state: State, neox_args: Any) -> RunPlan:
    """Plan once per process from NeoX's parsed args; set train_iters and the schedule keys that follow it on
    ``neox_args`` (before NeoX builds its learning-rate scheduler), logging every change."""
    if state.run is None:
        state.run = _resumed(
            state, neox_args, make_run_plan(values_from_args(neox_args), state.block, state.hook.settings)
        )
    rp = state.run
    apply_overwrite(neox_args, rp)
    tbs = getattr(neox_args, "train_batch_size", None)
    if tbs is not None and int(tbs) != rp.train_batch_size:
        raise PlanError(
            f"train_batch_size: NeoX uses {tbs} but the plan used {rp.train_batch_size}; relaunch with "
            "neox-epoch launch (or check-batch) so both see the same world"
        )
    _same_on_all_ranks(rp.train_iters)
    return rp


def loader_shape(neox_args: Any) -> LoaderShape:
    """The run's train loader shape from NeoX's args (dp = train_batch_size / (micro x grad-accum))."""
    micro = int(getattr(neox_args, "train_micro_batch_size_per_gpu", 1) or 1)
    gas = _gas(neox_args)
    return LoaderShape(micro, int(neox_args.train_batch_size) // (micro * gas), gas)


def _resumed(state: State, neox_args: Any, rp: RunPlan) -> RunPlan:
    """The plan for a run resuming a checkpoint the hooks saved with another batch shape: start at the consumed
    samples, stop when the run's samples are drawn (``enforce``: refuse what would still skip or repeat)."""
    tag = checkpoint_tag_to_load(neox_args)
    state.saved = read_state(tag) if tag else None
    saved = state.saved
    if saved is None:
        return rp
    state.run = rp
    _check_fingerprint(state, neox_args, tag or "")
    if saved.seq_length and saved.seq_length != rp.plan.seq_length:
        msg = (
            f"seq_length {saved.seq_length} -> {rp.plan.seq_length} since the checkpoint: NeoX cuts the documents "
            "into other samples, so the positions drawn before and after the resume are other token spans "
            "(neox-epoch resume-check finding seq-length-changed)"
        )
        if state.block.enforce:
            raise PlanError(f"neox_epoch: this resume would not be exact: {msg} (enforce is on)")
        if rank() == 0:
            log.warning("neox_epoch: resume: %s", msg)
    shape = loader_shape(neox_args)
    if (shape.train_batch_size, shape.loader_batch) == (saved.train_batch_size, saved.loader_batch):
        if rp.staged is not None:  # later stages changed: the run's end moved, and NeoX's scheduler checks it
            _check_lr_schedule(neox_args, saved, rp.plan.train_iters, "with the stages after the checkpoint's changed")
        return rp
    if rp.staged is not None:
        raise PlanError(
            f"neox_epoch.stages: resuming iteration {saved.iteration} with train_batch_size "
            f"{saved.train_batch_size} -> {shape.train_batch_size} (loader batch {saved.loader_batch} -> "
            f"{shape.loader_batch}): stage boundaries are whole global batches of the saved run; resume "
            "with its batch (micro batch x data parallel x gradient accumulation)"
        )
    decision = decide(saved, shape)
    state.resume = decision
    if rank() == 0:
        log.warning(
            "neox_epoch: resuming iteration %d with %s changed: the train loader starts at sample %d "
            "(the %d consumed) and train_iters is %d (%d samples in all)",
            saved.iteration,
            decision.changed,
            decision.start,
            saved.consumed_samples,
            decision.train_iters,
            saved.samples_total,
        )
    _check_lr_schedule(neox_args, saved, decision.train_iters)
    for finding in decision.findings:
        if state.block.enforce:
            raise PlanError(
                f"neox_epoch: this resume would not be exact: {finding} (neox-epoch resume-check "
                "finding; enforce is on)"
            )
        if rank() == 0:
            log.warning("neox_epoch: resume: %s", finding)
    weights = tuple(saved.greedy_weights) if saved.greedy_weights else rp.weights
    return replace(rp, plan=replace(rp.plan, train_iters=decision.train_iters), weights=weights)


def data_fingerprint(state: State, neox_args: Any) -> fingerprint_format.DataFingerprint:
    """The run's data fingerprint (computed once per process): its train sources, seq_length, seed, stage plan."""
    if state.fingerprint is None:
        rp = state.run
        assert rp is not None
        stages = rp.staged.config.to_mapping() if rp.staged is not None else None
        state.fingerprint = fingerprint_format.fingerprint(
            [s.prefix for s in rp.train], rp.plan.seq_length, int(getattr(neox_args, "seed", 1234) or 0), stages
        )
    return state.fingerprint


def _fingerprint_or_none(state: State, neox_args: Any) -> dict[str, Any] | None:
    """The fingerprint to save; None (logged) when the sources cannot be told apart by name (a prefix listed twice)."""
    try:
        return data_fingerprint(state, neox_args).to_dict()
    except NeoxEpochError as err:
        if state.run is not None and state.run.staged is not None:
            raise
        if rank() == 0:
            log.info("neox_epoch: no data fingerprint saved: %s", err)
        return None


def _check_fingerprint(state: State, neox_args: Any, tag: str) -> None:
    """Stop before anything is built when the data differs from the checkpoint's (unless allow_data_change), staged
    or not; a state saved without a fingerprint resumes with a note."""
    saved = state.saved
    if saved is None:
        return
    if saved.fingerprint is None:
        if rank() == 0:
            log.warning(
                "neox_epoch: resume: the checkpoint's state (%s) holds no data fingerprint (saved before "
                "neox-epoch recorded one, or its sources were named alike): the data is not compared; the "
                "next checkpoint carries one",
                os.path.basename(tag),
            )
        return
    diffs, note = fingerprint_changes(saved, data_fingerprint(state, neox_args))
    if note and rank() == 0:
        log.warning("neox_epoch: resume: %s", note)
    if not diffs:
        return
    line = f"neox_epoch: {fingerprint_format.message(diffs)} ({os.path.basename(tag)})"
    if state.block.allow_data_change:
        if rank() == 0:
            log.warning("%s; allow_data_change is set: resuming anyway", line)
        return
    raise DataChangedError(
        f'{line}; resume on the data the checkpoint was trained on, or set "allow_data_change": '
        "true in the neox_epoch block if the change is intended"
    )


def _check_lr_schedule(neox_args: Any, saved: ResumeState, train_iters: int, why: str = "") -> None:
    """NeoX's AnnealingLR refuses (an assertion) a checkpoint saved for other total or warmup iterations unless
    told which schedule to keep: say so in one line before NeoX builds anything. ``why``: what moved the end (default:
    the changed batch)."""
    if train_iters == saved.train_iters or getattr(neox_args, "lr_decay_iters", None):
        return
    if getattr(neox_args, "use_checkpoint_lr_scheduler", False) or getattr(neox_args, "override_lr_scheduler", False):
        return
    detail = "" if why else " (the same samples in other batches)"
    why = why or f"with train_batch_size {saved.train_batch_size} -> {neox_args.train_batch_size}"
    raise PlanError(
        f"neox_epoch: resuming iteration {saved.iteration} {why} moves the end of the run from iteration "
        f"{saved.train_iters} to {train_iters}{detail}, and NeoX's learning-rate scheduler refuses a checkpoint saved "
        "for other "
        "total/warmup iterations; set override_lr_scheduler: true (the schedule ends with the data at "
        f"{train_iters}), use_checkpoint_lr_scheduler: true (keep the saved one, ending at {saved.train_iters}), or "
        "lr_decay_iters: N"
    )


def apply_overwrite(neox_args: Any, rp: RunPlan) -> None:
    """Set each value of ``rp.overwrite()`` that differs on ``neox_args``; rank 0 logs ``key old -> new: why``."""
    why = {c.key: c.why for c in rp.schedule.changes}
    for key, value in rp.overwrite().items():
        current = getattr(neox_args, key, None)
        if current == value:
            continue
        _set(neox_args, key, value)
        if rank() == 0:
            log.warning("neox_epoch: %s %s -> %s: %s", key, current, value, why.get(key, "planned by neox_epoch"))


def _set(neox_args: Any, key: str, value: Any) -> None:
    if hasattr(neox_args, "update_value"):
        neox_args.update_value(key, value)
    else:
        setattr(neox_args, key, value)


def _same_on_all_ranks(value: int) -> None:
    try:
        import torch
        import torch.distributed as dist
    except ImportError:  # pragma: no cover
        return
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    lo = torch.tensor([value], dtype=torch.long, device=device)
    hi = torch.tensor([value], dtype=torch.long, device=device)
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    if int(lo.item()) != int(hi.item()):
        raise PlanError(
            f"train_iters differs across ranks ({int(lo.item())}..{int(hi.item())}): the ranks see "
            "different data files or configs; make them identical"
        )


# ----------------------------------------------------------------------------------------------------------
# the wrappers


def make_wrappers(state: State) -> dict[tuple[str, str], Any]:
    """The replacement objects, keyed by (module, attribute)."""
    wrappers = {**_build_wrappers(state), **_loop_wrappers(state), **_checkpoint_wrappers(state)}
    if state.block.enforce:
        wrappers.update(_enforce_wrappers(state))
    return wrappers


def _build_wrappers(state: State) -> dict[tuple[str, str], Any]:
    """The data build: planning before it, the 1.005 replaced, separated indices, the table after it."""
    du, gd = state.modules["data_utils"], state.modules["gpt2_dataset"]
    real_build_loaders = du.build_train_valid_test_data_loaders
    real_normalize = du.get_normalized_weights_and_num_samples
    real_index = gd._build_index_mappings
    index_sig = inspect.signature(real_index)

    def build_train_valid_test_data_loaders(neox_args: Any, *args: Any, **kwargs: Any) -> Any:
        rp = plan_for(state, neox_args)
        state.in_build, state.normalize_calls, state.builds = True, 0, []
        try:
            loaders = real_build_loaders(neox_args, *args, **kwargs)
        finally:
            state.in_build = False
        after_build(state, rp, neox_args, loaders)
        return loaders

    def get_normalized_weights_and_num_samples(weights: Any, num_samples: Any) -> Any:
        role = ("train", "valid", "test")[state.normalize_calls % 3] if state.in_build else None
        if state.in_build:
            state.normalize_calls += 1
        rp = state.run
        if role != "train" or rp is None or num_samples is None:
            return real_normalize(weights, num_samples)
        state.blend_request = _blend_request(state, rp, weights, num_samples)
        return list(state.blend_request[0]), list(state.blend_request[1])

    def _build_index_mappings(*args: Any, **kwargs: Any) -> Any:
        call = index_sig.bind(*args, **kwargs)
        call.apply_defaults()
        a = call.arguments
        documents = np.asarray(a["documents"])
        sizes = a["sizes"]
        tokens = int(np.sum(sizes[documents], dtype=np.int64))
        if state.resume is not None and str(a["name"]) in state.resume.state.builds:
            a["num_samples"] = state.resume.state.builds[str(a["name"])].num_samples  # the saved run's indices
        staged = state.run.staged if state.run is not None else None
        if staged is not None and str(a["name"]).startswith("train_"):
            return _staged_index(state, staged, a, documents, sizes, tokens, real_index)
        epochs = a["num_epochs"] or neox_sem.num_epochs(tokens, a["seq_length"], a["num_samples"])
        separated = bool(
            state.block.separate_epochs
            and a["packing_impl"] == "packed"
            and str(a["name"]).startswith("train")
            and epochs > 1
        )
        if separated:
            a["name"] = str(a["name"]) + neox_index.NAME_SUFFIX
            _prebuild_separated(state, a, documents, sizes, epochs)
        out = real_index(**a)
        state.builds.append(
            DatasetRecord(
                name=str(a["name"]),
                prefix=str(a["data_prefix"]),
                documents=int(documents.shape[0]),
                tokens=tokens,
                num_samples=a["num_samples"],
                epochs=int(epochs),
                samples_built=int(out[1].shape[0]) - 1,
                separated=separated,
            )
        )
        return out

    return {
        ("training", "build_train_valid_test_data_loaders"): build_train_valid_test_data_loaders,
        ("data_utils", "build_train_valid_test_data_loaders"): build_train_valid_test_data_loaders,
        ("data_utils", "get_normalized_weights_and_num_samples"): get_normalized_weights_and_num_samples,
        ("gpt2_dataset", "_build_index_mappings"): _build_index_mappings,
    }


def _loop_wrappers(state: State) -> dict[tuple[str, str], Any]:
    """The training loop: train_iters kept, counters stepped, the train iterator guarded."""
    tr = state.modules["training"]
    log_sig = inspect.signature(tr.training_log)
    shift_sig = inspect.signature(tr.shift_and_wrap_data_loaders)

    def update_iterations(neox_args: Any, data_loaders: Any) -> Any:
        out = state.original("training", "update_iterations")(neox_args, data_loaders)
        if state.run is not None and getattr(neox_args, "train_iters", None) != state.run.train_iters:
            _set(neox_args, "train_iters", state.run.train_iters)
        return out

    def training_log(*args: Any, **kwargs: Any) -> Any:
        out = state.original("training", "training_log")(*args, **kwargs)
        c = state.counters
        if c is not None:
            c.step(int(log_sig.bind(*args, **kwargs).arguments["iteration"]))
        return out

    def train(*args: Any, **kwargs: Any) -> Any:
        neox_args = kwargs.get("neox_args", args[0] if args else None)
        start_position(state, neox_args, int(getattr(neox_args, "iteration", 0) or 0))
        c = state.counters
        if c is not None:
            c.start(int(getattr(neox_args, "iteration", 0) or 0), state.resume.changed if state.resume else None)
        try:
            return state.original("training", "train")(*args, **kwargs)
        finally:  # also when NeoX stops at exit_interval (sys.exit inside its loop); NeoX keeps neox_args.iteration
            if c is not None:
                c.final(int(getattr(neox_args, "iteration", 0) or 0))
            state.sink.close()  # the log never stops training; what it could not write is named here

    def shift_and_wrap_data_loaders(*args: Any, **kwargs: Any) -> Any:
        call = shift_sig.bind(*args, **kwargs)
        call.apply_defaults()
        neox_args, loaders = call.arguments["neox_args"], call.arguments["data_loaders"]
        loader = loaders.get("train") if isinstance(loaders, dict) else None
        first = None
        if state.resume is not None and loader is not None:
            # NeoX shifts valid/test; the train loader starts at the consumed samples
            call.arguments["data_loaders"] = {**loaders, "train": None}
            _, valid_it, test_it = state.original("training", "shift_and_wrap_data_loaders")(*call.args, **call.kwargs)
            first, train_it = _resumed_train_iterator(state.resume, loader, bool(call.arguments.get("loop", True)))
        else:
            train_it, valid_it, test_it = state.original("training", "shift_and_wrap_data_loaders")(*args, **kwargs)
        if train_it is not None and loader is not None:
            train_it = ReplayGuard(train_it, neox_args, len(loader), bool(state.block.enforce), first)
        return train_it, valid_it, test_it

    return {
        ("training", "update_iterations"): update_iterations,
        ("training", "training_log"): training_log,
        ("training", "train"): train,
        ("training", "shift_and_wrap_data_loaders"): shift_and_wrap_data_loaders,
    }


def _checkpoint_wrappers(state: State) -> dict[tuple[str, str], Any]:
    """NeoX's save_checkpoint, followed by the data position written into the checkpoint (``save_state``)."""
    save_sig = inspect.signature(state.modules["training"].save_checkpoint)

    def save_checkpoint(*args: Any, **kwargs: Any) -> Any:
        out = state.original("training", "save_checkpoint")(*args, **kwargs)
        call = save_sig.bind(*args, **kwargs)
        save_state(state, call.arguments["neox_args"], int(call.arguments["iteration"]))
        return out

    return {("training", "save_checkpoint"): save_checkpoint}


def _resumed_train_iterator(resume: ResumeDecision, loader: Any, loop: bool) -> tuple[int, Any]:
    """(first loader batch, iterator) for a resume with another batch shape. NeoX would set the start to
    ``iteration * gas % len`` and wrap the loader at once (a loader with workers reads its start while
    ``itertools.cycle`` creates the iterator), so the start is set here before wrapping, as NeoX wraps."""
    first = resume.start // resume.shape.loader_batch
    loader.batch_sampler.start_iter = first
    if rank() == 0:
        stock = neox_start(
            resume.state.iteration, resume.state.consumed_samples, resume.shape, len(loader) * resume.shape.loader_batch
        )
        log.warning(
            "neox_epoch: train loader starts at batch %d (sample %d, the consumed samples); stock NeoX: %s",
            first,
            resume.start,
            stock.how,
        )
    return first, itertools.cycle(loader) if loop else iter(loader)


def start_position(state: State, neox_args: Any, iteration: int) -> None:
    """Where training starts: the saved consumed samples when the checkpoint has them, else NeoX's own count
    (``iteration x train_batch_size``: right unless the batch changed before the hooks saved a state)."""
    saved = state.saved
    if saved is not None and saved.iteration != iteration:
        raise PlanError(
            f"neox_epoch: NeoX resumed iteration {iteration} but the checkpoint state read before the build "
            f"is of iteration {saved.iteration}; the checkpoint's 'latest' changed during start-up, relaunch"
        )
    if saved is not None:
        state.consumed_base, state.iteration_base = saved.consumed_samples, saved.iteration
    else:
        state.consumed_base, state.iteration_base = iteration * loader_shape(neox_args).train_batch_size, iteration


def _blend_request(state: State, rp: RunPlan, weights: Any, num_samples: Any) -> tuple[list[float], list[int]]:
    """The train blend's (weights, per-source num_samples) for NeoX: the saved run's when resuming with another
    batch shape, the exact targets, or the block's buffer in place of 1.005."""
    if state.resume is not None and state.resume.state.blend_weights:  # the saved run's blend, drawn the same
        return list(state.resume.state.blend_weights), list(state.resume.state.blend_samples)
    if len(weights) != len(rp.train):
        raise PlanError(
            f"train_data_weights: NeoX passes {len(weights)} weights, the plan has {len(rp.train)} "
            "train sources; the hooks and the config disagree"
        )
    if rp.exact_targets is not None:
        raw = [float(w) for w in rp.plan.settings["weights"]]  # type: ignore[union-attr]
        total = sum(raw)
        return [w / total for w in raw], list(rp.exact_targets)
    total = sum(weights)
    norm = [w / total for w in weights]
    buf = rp.buffer if rp.buffer is not None else neox_sem.BLEND_BUFFER
    return norm, [int(math.ceil(num_samples * w * buf)) for w in norm]


def _prebuild_separated(state: State, a: dict[str, Any], documents: np.ndarray, sizes: np.ndarray, epochs: int) -> None:
    """Write the epoch-separated index files NeoX will load (on the rank NeoX builds on)."""
    stem = neox_index.cache_prefix(
        a["data_prefix"], a["name"], a["num_samples"], a["seq_length"], a["seed"], a["packing_impl"], a["allow_chopped"]
    )
    files = [stem + f"_{k}_idx.npy" for k in ("doc", "sample", "shuffle")]
    builder = int(os.environ.get("LOCAL_RANK", "0")) == 0 if not a["use_shared_fs"] else rank() == 0
    if not builder or all(os.path.isfile(f) for f in files):
        return
    helpers = importlib.import_module("megatron.data.helpers")
    tokens = int(np.sum(sizes[documents], dtype=np.int64))
    big = 2 * ((epochs * tokens - 1) / a["seq_length"] + 1) >= np.iinfo(np.int32).max
    build = helpers.build_sample_idx_int64 if big else helpers.build_sample_idx_int32
    doc_idx, sample_idx, shuffle_idx = neox_index.build_separated(
        documents, sizes, epochs, a["seq_length"], a["seed"], build
    )
    for f, arr in zip(files, (doc_idx, sample_idx, shuffle_idx)):
        neox_index.save_atomic(f, arr)
    log.info(
        "neox_epoch: built an epoch-separated index for %s (%d epochs, each shuffled on its own)", a["name"], epochs
    )


def _staged_index(
    state: State,
    staged: StagedRun,
    a: dict[str, Any],
    documents: np.ndarray,
    sizes: np.ndarray,
    tokens: int,
    real_index: Any,
) -> Any:
    """A staged run's train source: its own order, pass by pass (:mod:`neox_epoch.semantics.stage_order`), written
    as NeoX's three index files (named ``train_k-stages``) and loaded by NeoX's own ``_build_index_mappings``."""
    k = int(str(a["name"]).split("_")[1])
    label = staged.labels[k]
    passes = staged.passes_built()[label]
    per_pass = stage_order.samples_per_pass(tokens, a["seq_length"])
    if per_pass != staged.stages.samples_per_epoch[label]:
        raise PlanError(
            f"neox_epoch.stages: {label}: NeoX's train documents give {per_pass} samples per pass, the "
            f"plan {staged.stages.samples_per_epoch[label]}; the data changed since the plan: replan"
        )
    a["name"] = str(a["name"]) + stage_order.STAGES_SUFFIX
    stem = neox_index.cache_prefix(
        a["data_prefix"], a["name"], a["num_samples"], a["seq_length"], a["seed"], a["packing_impl"], a["allow_chopped"]
    )
    files = [stem + f"_{kind}_idx.npy" for kind in ("doc", "sample", "shuffle")]
    builder = int(os.environ.get("LOCAL_RANK", "0")) == 0 if not a["use_shared_fs"] else rank() == 0
    if builder and not all(os.path.isfile(f) for f in files):
        arrays = stage_order.build_passes(documents, sizes, passes, a["seq_length"], a["seed"])
        for f, arr in zip(files, arrays):
            neox_index.save_atomic(f, arr)
        log.info(
            "neox_epoch: built %s's own order: %d passes of %d samples, each pass on its own", label, passes, per_pass
        )
    out = real_index(**a)
    state.builds.append(
        DatasetRecord(
            name=str(a["name"]),
            prefix=str(a["data_prefix"]),
            documents=int(documents.shape[0]),
            tokens=tokens,
            num_samples=a["num_samples"],
            epochs=passes,
            samples_built=passes * per_pass,
            separated=True,
        )
    )
    return out


def _staged_draws(state: State, staged: StagedRun, ds: Any, problems: list[str]) -> None:
    """Replace the train blend's draw order with the stages': stage k draws each source from where stages 1..k-1
    left it, its batches from its planned first iteration on."""
    index = {s: k for k, s in enumerate(staged.labels)}
    counts, starts = [], []
    for st in staged.stages.stages:
        c, f = [0] * len(index), [0] * len(index)
        for d in st.draws:
            c[index[d.source]], f[index[d.source]] = d.draws, d.start
        counts.append(c)
        starts.append(f)
    which, position = stage_order.draw_order(counts, starts)
    for k, (label, total) in enumerate(zip(staged.labels, staged.totals)):
        if len(ds.datasets[k]) < total:
            problems.append(f"{label}: NeoX's dataset has {len(ds.datasets[k])} samples, the stages draw {total}")
    ds.dataset_index, ds.dataset_sample_index, ds.size = which, position, int(which.shape[0])
    if rank() == 0:  # what a stage boundary could not make exact (a remainder, a stage rounded up), as the plan says
        for st in staged.stages.stages:
            for note in st.notes:
                log.info("neox_epoch: stage %s: note: %s", st.name, note)


def _gas(neox_args: Any) -> int:
    """NeoX's gradient_accumulation_steps: loader batches per iteration."""
    return int(getattr(neox_args, "gradient_accumulation_steps", 1) or 1)


def replay_message(iteration: int, batches: int, gas: int) -> str:
    """The one line for a train loader used up at ``iteration`` (1-based) after ``batches`` batches."""
    return (
        f"iteration {iteration}: the train loader's {batches} batches are used up after iteration {batches // gas}"
        f" and NeoX's itertools.cycle would replay them from its first batch (the same samples again); the run "
        "draws more than was built: replan it (neox-epoch plan), or lower train_iters"
    )


class ReplayGuard:
    """NeoX's train iterator, counting the batches taken: past the loader's end (where ``itertools.cycle``
    starts replaying its first batches) it raises :class:`WrapError` (``enforce``) or logs one warning
    naming the iteration. The position is ``iteration * gradient_accumulation_steps`` plus the batches
    taken since (``first``: the loader batch a resume with another batch shape starts at), so it also holds
    after a resume (NeoX's own start offset is taken modulo the loader)."""

    def __init__(self, inner: Any, neox_args: Any, batches: int, enforce: bool, first: int | None = None) -> None:
        self.inner, self.neox_args, self.batches, self.enforce = inner, neox_args, int(batches), enforce
        self.gas = _gas(neox_args)
        self.position = int(getattr(neox_args, "iteration", 0) or 0) * self.gas if first is None else first
        self.warned = False

    def __iter__(self) -> ReplayGuard:
        return self

    def __next__(self) -> Any:
        if self.position >= self.batches:
            iteration = int(getattr(self.neox_args, "iteration", 0) or 0) + 1
            msg = replay_message(iteration, self.batches, self.gas)
            if self.enforce:
                raise WrapError(msg + " (enforce is on)")
            if not self.warned and rank() == 0:
                log.warning("neox_epoch: %s", msg)
            self.warned = True
        self.position += 1
        return next(self.inner)


def _enforce_wrappers(state: State) -> dict[tuple[str, str], Any]:
    gd, bd = state.modules["gpt2_dataset"], state.modules["blendable_dataset"]
    real_gpt = gd.GPT2Dataset.__getitem__
    real_blend = bd.BlendableDataset.__getitem__

    def gpt_getitem(self: Any, idx: Any) -> Any:
        i = int(idx)
        shuffle = getattr(self, "shuffle_idx", None)
        if shuffle is not None and (i >= shuffle.shape[0] or int(shuffle[i]) + 1 >= self.sample_idx.shape[0]):
            raise WrapError(
                f"{self.name}: sample {i} is past the end of its index ({len(self)} samples): NeoX would "
                "wrap it to idx % len (enforce is on); the run draws more than was built, replan it"
            )
        return real_gpt(self, idx)

    def blend_getitem(self: Any, idx: Any) -> Any:
        if int(idx) >= self.size:
            raise WrapError(
                f"blend: sample {int(idx)} is past the blend's end ({self.size} samples): NeoX would "
                "wrap it (enforce is on); the run draws more than was built, replan it"
            )
        return real_blend(self, idx)

    return {
        ("gpt2_dataset.GPT2Dataset", "__getitem__"): gpt_getitem,
        ("blendable_dataset.BlendableDataset", "__getitem__"): blend_getitem,
    }


# ----------------------------------------------------------------------------------------------------------
# after the build: table, JSON record, verification, counters


def _rows(state: State, rp: RunPlan, problems: list[str]) -> list[dict[str, Any]]:
    """The per-source table rows; a build that differs from the plan (or the saved run) is added to ``problems``."""
    builds = {_base_name(b.name): b for b in state.builds}
    rows = []
    for k, s in enumerate(rp.train):
        name = f"train_{k}" if rp.blended else "train"
        b = builds.get(name)
        want = _expected_build(state, name, s)
        if b is not None and (b.epochs, b.samples_built) != (want.epochs, want.samples_built):
            problems.append(
                f"{s.name}: NeoX built {b.epochs} epochs / {b.samples_built} samples, the "
                f"{'saved run' if state.resume else 'plan'} {want.epochs} / {want.samples_built}"
            )
        target = rp.targets.get(s.name, rp.targets.get(s.prefix)) if rp.targets else None
        rows.append(
            {
                "name": s.name,
                "prefix": s.prefix,
                "dataset": name,
                "documents": s.documents,
                "tokens": s.tokens,
                "samples_per_epoch": s.samples_per_epoch,
                "samples_requested": want.num_samples,
                "epochs_built": want.epochs,
                "samples_built": want.samples_built,
                "length": s.length,
                "samples_drawn": s.samples_drawn,
                "passes": s.passes,
                "target_passes": target,
                "tokens_unseen": s.tokens_unseen,
                "separate_epochs": bool(b.separated) if b else rp.separate_epochs,
            }
        )
    return rows


def _base_name(name: str) -> str:
    """NeoX's dataset name without the suffix of an epoch-separated or staged index."""
    return name.replace(neox_index.NAME_SUFFIX, "").replace(stage_order.STAGES_SUFFIX, "")


def _log_plan(rp: RunPlan, rows: Any) -> None:
    """The per-source table and the plan's warnings that concern training, on the logging rank."""
    log.info("%s", render_table(rp, rows))
    for w in rp.plan.warnings:
        if rp.separate_epochs and w.code == "spillover":
            continue  # the separated index has no cross-epoch spillover
        if w.split == "train" or w.code in ("exact-remainder", "without-plugin", *SCHEDULE_CODES):
            log.warning("neox_epoch: %s", w)
    for name in rp.spillover:
        log.warning(
            "neox_epoch: %s: fractional passes over jointly shuffled epochs (spillover); set separate_epochs: true",
            name,
        )


def after_build(state: State, rp: RunPlan, neox_args: Any, loaders: Any) -> None:
    problems: list[str] = []
    rows = _rows(state, rp, problems)
    train_loader, valid_loader = (
        (loaders.get("train"), loaders.get("valid")) if isinstance(loaders, dict) else (None,) * 2
    )
    ds, state.valid_samples = getattr(train_loader, "dataset", None), len(getattr(valid_loader, "dataset", None) or ())
    gas = _gas(neox_args)
    resume = state.resume
    first = resume.start // resume.shape.loader_batch if resume else 0
    if train_loader is not None and first + (rp.train_iters - (resume.state.iteration if resume else 0)) * gas > len(
        train_loader
    ):
        msg = replay_message(len(train_loader) // gas + 1, len(train_loader), gas)
        if state.block.enforce:
            raise WrapError(f"neox_epoch: train_iters {rp.train_iters}: at {msg} (enforce is on)")
        if rank() == 0:
            log.warning("neox_epoch: train_iters %d: at %s", rp.train_iters, msg)
    if ds is not None and hasattr(ds, "dataset_index") and rp.staged is not None:
        _staged_draws(state, rp.staged, ds, problems)
    elif ds is not None and hasattr(ds, "dataset_index") and rp.blended:
        n = resume.state.samples_total if resume else rp.train_iters * rp.train_batch_size
        got = np.bincount(np.asarray(ds.dataset_index[:n]), minlength=len(rp.train)).tolist()
        want = list(resume.state.drawn) if resume and resume.state.drawn else [s.samples_drawn for s in rp.train]
        if got != want:
            problems.append(f"blend draws {got} in the first {n} samples, planned {want}")
        elif rp.exact_targets is not None and n < int(ds.size):
            # the greedy blend goes on drawing past the targets; NeoX's loader would prefetch those samples after
            # the last iteration (printing "index out of bounds ... taking modulo"); they are never trained
            if rank() == 0:
                log.info(
                    "neox_epoch: train blend ends at the %d samples the run draws (NeoX built %d; the rest "
                    "would only be prefetched after the last iteration)",
                    n,
                    int(ds.size),
                )
            ds.size = n
    state.table = rows
    top = rank() == 0
    sink = JsonlSink(state.block.log_dir) if top else JsonlSink(None)
    state.sink = sink
    if problems:
        msg = "neox_epoch: NeoX's build differs from the plan: " + "; ".join(problems)
        if state.block.enforce:
            raise PlanError(msg + " (enforce is on)")
        log.warning(msg) if top else None
    if top:
        _log_plan(rp, rows)
    sink.write(
        {
            "event": "plan",
            "iteration": int(getattr(neox_args, "iteration", 0) or 0),
            "train_iters": rp.train_iters,
            "train_batch_size": rp.train_batch_size,
            "seq_length": rp.plan.seq_length,
            "mode": "exact" if rp.targets is not None else "observe",
            "blended": rp.blended,
            "separate_epochs": rp.separate_epochs,
            "settings": rp.settings(),
            "sources": rows,
            "remainder": {"samples": rp.plan.remainder_samples, "tokens": rp.plan.remainder_tokens},
            "eval_splits": EVAL_NOTE,
            **({"stages": stages_json(rp.staged)} if rp.staged is not None else {}),
            "warnings": [w.to_json() for w in rp.plan.warnings],
            "problems": problems,
            **(
                {
                    "resume": {
                        "changed": resume.changed,
                        "start_sample": resume.start,
                        "findings": list(resume.findings),
                        "consumed_samples": resume.state.consumed_samples,
                    }
                }
                if resume
                else {}
            ),
        }
    )
    state.counters = build_counters(state, rp, neox_args, active=top)


def _expected_build(state: State, name: str, s: Any) -> TrainBuild:
    """What NeoX should have built for train dataset ``name``: the saved run's build when resuming with another
    batch shape (the same indices), else the plan's."""
    if state.resume is not None and name in state.resume.state.builds:
        return state.resume.state.builds[name]
    staged = state.run.staged if state.run is not None else None
    if staged is not None:
        label = staged.labels[int(name.split("_")[1])]
        passes = staged.passes_built()[label]
        return TrainBuild(s.samples_requested, passes, passes * staged.stages.samples_per_epoch[label])
    return TrainBuild(s.samples_requested, s.epochs_built, s.samples_built)


def save_state(state: State, neox_args: Any, iteration: int) -> None:
    """Rank 0: write the data position into the checkpoint NeoX just saved (``{save}/global_step{iteration}``)."""
    rp = state.run
    save = getattr(neox_args, "save", None)
    if rp is None or not save or rank() != 0:
        return
    tag_dir = os.path.join(save, f"global_step{int(iteration)}")
    if not os.path.isdir(tag_dir):
        return  # NeoX saved nothing there (e.g. a non-DeepSpeed checkpoint layout)
    shape = loader_shape(neox_args)
    saved = state.saved
    builds = {
        _base_name(b.name): TrainBuild(b.num_samples, b.epochs, b.samples_built)
        for b in state.builds
        if b.name.startswith("train")
    }
    saved_state = ResumeState(
        iteration=int(iteration),
        consumed_samples=state.consumed_base + (int(iteration) - state.iteration_base) * shape.train_batch_size,
        train_batch_size=shape.train_batch_size,
        loader_batch=shape.loader_batch,
        samples_total=saved.samples_total if saved else rp.train_iters * rp.train_batch_size,
        train_iters=rp.train_iters,
        builds=builds,
        drawn=list(saved.drawn) if saved else ([s.samples_drawn for s in rp.train] if rp.blended else []),
        blend_weights=list(state.blend_request[0]) if state.blend_request else [],
        blend_samples=list(state.blend_request[1]) if state.blend_request else [],
        greedy_weights=list(rp.weights or []),
        seq_length=rp.plan.seq_length,
        eval_interval=int(getattr(neox_args, "eval_interval", 0) or 0),
        eval_iters=int(getattr(neox_args, "eval_iters", 0) or 0),
        valid_samples=state.valid_samples,
        fingerprint=_fingerprint_or_none(state, neox_args),
        stage_boundaries=[st.first_iteration for st in rp.staged.stages.stages] if rp.staged else [],
    )
    write_state(tag_dir, saved_state)
    # the same record in the run's JSONL: resume-check can plan a resume from the log alone
    state.sink.write(
        {
            "event": "checkpoint",
            "iteration": int(iteration),
            "tag": os.path.basename(tag_dir),
            "state": asdict(saved_state),
        }
    )


def build_counters(state: State, rp: RunPlan, neox_args: Any, active: bool) -> PassCounters:
    srcs = []
    for s, row in zip(rp.train, state.table or [{}] * len(rp.train)):
        bounds = neox_index.pass_boundaries(
            s.tokens, rp.plan.seq_length, s.epochs_built, rp.separate_epochs, s.samples_per_epoch
        )
        planned = row.get("target_passes") or s.passes
        srcs.append(SourceCounter(s.name, s.samples_per_epoch, tuple(bounds), float(planned)))
    scalar = _scalar_writer(state, neox_args) if active else None
    resume = state.resume
    offset = resume.state.consumed_samples - resume.state.iteration * rp.train_batch_size if resume else 0
    if rp.staged is not None:
        return _staged_counters(state, rp, rp.staged, neox_args, scalar, active)
    return PassCounters(
        tuple(srcs),
        rp.weights if rp.blended else None,
        rp.train_batch_size,
        rp.train_iters,
        int(getattr(neox_args, "log_interval", None) or 100),
        sink=state.sink,
        scalar=scalar,
        active=active,
        sample_offset=offset,
    )


def _staged_counters(
    state: State, rp: RunPlan, staged: StagedRun, neox_args: Any, scalar: Any, active: bool
) -> PassCounters:
    """Counters of a staged run: the stages' draw order, passes of exactly samples-per-pass draws, the stages."""
    spe = staged.stages.samples_per_epoch
    srcs = [
        SourceCounter(
            label,
            spe[label],
            tuple(k * spe[label] for k in range(1, staged.passes_built()[label])),
            float(staged.passes()[label]),
        )
        for label in staged.labels
    ]
    counts = [[st.draw_of(s).draws if st.draw_of(s) else 0 for s in staged.labels] for st in staged.stages.stages]
    starts = [[st.draw_of(s).start if st.draw_of(s) else 0 for s in staged.labels] for st in staged.stages.stages]
    which, _ = stage_order.draw_order(counts, starts)
    stages = tuple((st.name, st.first_iteration, st.end_iteration) for st in staged.stages.stages)
    return PassCounters(
        tuple(srcs),
        None,
        rp.train_batch_size,
        rp.train_iters,
        int(getattr(neox_args, "log_interval", None) or 100),
        sink=state.sink,
        scalar=scalar,
        active=active,
        draw_index=which,
        stages=stages,
    )


def _scalar_writer(state: State, neox_args: Any) -> Any:
    tb = getattr(neox_args, "tensorboard_writer", None)
    wandb_on = bool(getattr(neox_args, "use_wandb", False))
    comet = getattr(neox_args, "comet_experiment", None)
    if tb is None and not wandb_on and comet is None:
        return None
    try:
        tb_wandb_log = importlib.import_module("megatron.logging").tb_wandb_log
    except (ImportError, AttributeError):  # pragma: no cover - older NeoX
        return None

    def scalar(key: str, value: float, iteration: int) -> None:
        tb_wandb_log(key, value, iteration, use_wandb=wandb_on, tensorboard_writer=tb, comet_experiment=comet)

    return guarded(scalar, "TensorBoard/W&B")


def render_table(rp: RunPlan, rows: list[dict[str, Any]]) -> str:
    """The per-source table logged at build time (:mod:`neox_epoch.neox.run_table`)."""
    return run_table.render_table(rp, rows, EVAL_NOTE)
