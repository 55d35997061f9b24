"""The NeoX hooks' resume policy: a resume with another batch shape, the data fingerprint check, the
learning-rate schedule check, where the train loader starts, and the data position saved with each checkpoint."""

from __future__ import annotations

import itertools
import os
from dataclasses import asdict, replace
from typing import Any

from neox_epoch.errors import DataChangedError, NeoxEpochError, PlanError
from neox_epoch.formats import fingerprint as fingerprint_format
from neox_epoch.neox.hook_state import State, base_name, loader_shape
from neox_epoch.neox.planning import RunPlan
from neox_epoch.neox.resume_state import (
    ResumeDecision,
    ResumeState,
    checkpoint_tag_to_load,
    decide,
    fingerprint_changes,
    read_state,
    write_state,
)
from neox_epoch.semantics import TrainBuild
from neox_epoch.semantics.loader import neox_start
from neox_epoch.util.ranklog import is_rank_zero, rank_zero_logger

log = rank_zero_logger("neox_epoch.neox")


def resumed_plan(state: State, neox_args: Any, rp: RunPlan) -> RunPlan:
    """The plan for a run resuming a checkpoint the hooks saved with another batch shape: start at the consumed
    samples, stop when the run's samples are drawn (``enforce``: refuse what would still skip or repeat)."""
    tag = checkpoint_tag_to_load(neox_args)
    state.saved = read_state(tag) if tag else None
    saved = state.saved
    if saved is None:
        return rp
    state.run = rp
    check_fingerprint(state, neox_args, tag or "")
    if saved.seq_length and saved.seq_length != rp.plan.seq_length:
        msg = (
            f"seq_length {saved.seq_length} -> {rp.plan.seq_length} since the checkpoint: NeoX cuts the documents "
            "into other samples, so the positions drawn before and after the resume are other token spans "
            "(neox-epoch resume-check finding seq-length-changed)"
        )
        if state.block.enforce:
            raise PlanError(f"neox_epoch: this resume would not be exact: {msg} (enforce is on)")
        log.warning("neox_epoch: resume: %s", msg)
    shape = loader_shape(neox_args)
    if (shape.train_batch_size, shape.loader_batch) == (saved.train_batch_size, saved.loader_batch):
        if rp.staged is not None:  # later stages changed: the run's end moved, and NeoX's scheduler checks it
            check_lr_schedule(neox_args, saved, rp.plan.train_iters, "with the stages after the checkpoint's changed")
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
    check_lr_schedule(neox_args, saved, decision.train_iters)
    for finding in decision.findings:
        if state.block.enforce:
            raise PlanError(
                f"neox_epoch: this resume would not be exact: {finding} (neox-epoch resume-check "
                "finding; enforce is on)"
            )
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
        log.info("neox_epoch: no data fingerprint saved: %s", err)
        return None


def check_fingerprint(state: State, neox_args: Any, tag: str) -> None:
    """Stop before anything is built when the data differs from the checkpoint's (unless allow_data_change), staged
    or not; a state saved without a fingerprint resumes with a note."""
    saved = state.saved
    if saved is None:
        return
    if saved.fingerprint is None:
        log.warning(
            "neox_epoch: resume: the checkpoint's state (%s) holds no data fingerprint (saved before "
            "neox-epoch recorded one, or its sources were named alike): the data is not compared; the "
            "next checkpoint carries one",
            os.path.basename(tag),
        )
        return
    diffs, note = fingerprint_changes(saved, data_fingerprint(state, neox_args))
    if note:
        log.warning("neox_epoch: resume: %s", note)
    if not diffs:
        return
    line = f"neox_epoch: {fingerprint_format.message(diffs)} ({os.path.basename(tag)})"
    if state.block.allow_data_change:
        log.warning("%s; allow_data_change is set: resuming anyway", line)
        return
    raise DataChangedError(
        f'{line}; resume on the data the checkpoint was trained on, or set "allow_data_change": '
        "true in the neox_epoch block if the change is intended"
    )


def check_lr_schedule(neox_args: Any, saved: ResumeState, train_iters: int, why: str = "") -> None:
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


def resumed_train_iterator(resume: ResumeDecision, loader: Any, loop: bool) -> tuple[int, Any]:
    """(first loader batch, iterator) for a resume with another batch shape. NeoX would set the start to
    ``iteration * gas % len`` and wrap the loader at once (a loader with workers reads its start while
    ``itertools.cycle`` creates the iterator), so the start is set here before wrapping, as NeoX wraps."""
    first = resume.start // resume.shape.loader_batch
    loader.batch_sampler.start_iter = first
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


def save_state(state: State, neox_args: Any, iteration: int) -> None:
    """Rank 0: write the data position into the checkpoint NeoX just saved (``{save}/global_step{iteration}``)."""
    rp = state.run
    save = getattr(neox_args, "save", None)
    if rp is None or not save or not is_rank_zero():
        return
    tag_dir = os.path.join(save, f"global_step{int(iteration)}")
    if not os.path.isdir(tag_dir):
        return  # NeoX saved nothing there (e.g. a non-DeepSpeed checkpoint layout)
    shape = loader_shape(neox_args)
    saved = state.saved
    builds = {
        base_name(b.name): TrainBuild(b.num_samples, b.epochs, b.samples_built)
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
