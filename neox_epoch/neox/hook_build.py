"""The NeoX hooks around the data build: the train blend handed to NeoX, the epoch-separated and staged indices,
then after the build the per-source table, the JSON record, the draws verified and the live counters."""

from __future__ import annotations

import importlib
import math
import os
from typing import Any, cast

import numpy as np

from neox_epoch.errors import PlanError
from neox_epoch.neox import run_table
from neox_epoch.neox.counters import JsonlSink, PassCounters, SourceCounter
from neox_epoch.neox.hook_state import (
    EVAL_NOTE,
    DatasetRecord,
    State,
    WrapError,
    accumulation_steps,
    base_name,
    replay_message,
)
from neox_epoch.neox.planning import RunPlan
from neox_epoch.plan.schedule import CODES as SCHEDULE_CODES
from neox_epoch.plan.staged import StagedRun, stages_json
from neox_epoch.semantics import TrainBuild, neox_index, stage_order
from neox_epoch.semantics import neox as neox_sem
from neox_epoch.util.ranklog import EVERY_RANK, is_rank_zero, rank_zero_logger
from neox_epoch.util.sink import guarded

log = rank_zero_logger("neox_epoch.neox")


def train_blend_request(state: State, rp: RunPlan, weights: Any, num_samples: Any) -> tuple[list[float], list[int]]:
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
        raw = [float(w) for w in cast("list[float]", rp.plan.settings["weights"])]
        total = sum(raw)
        return [w / total for w in raw], list(rp.exact_targets)
    total = sum(weights)
    norm = [w / total for w in weights]
    buf = rp.buffer if rp.buffer is not None else neox_sem.BLEND_BUFFER
    return norm, [int(math.ceil(num_samples * w * buf)) for w in norm]


def prebuild_separated(state: State, a: dict[str, Any], documents: np.ndarray, sizes: np.ndarray, epochs: int) -> None:
    """Write the epoch-separated index files NeoX will load (on the rank NeoX builds on)."""
    stem = neox_index.cache_prefix(
        a["data_prefix"], a["name"], a["num_samples"], a["seq_length"], a["seed"], a["packing_impl"], a["allow_chopped"]
    )
    files = [stem + f"_{k}_idx.npy" for k in ("doc", "sample", "shuffle")]
    builder = int(os.environ.get("LOCAL_RANK", "0")) == 0 if not a["use_shared_fs"] else is_rank_zero()
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
        "neox_epoch: built an epoch-separated index for %s (%d epochs, each shuffled on its own)",
        a["name"],
        epochs,
        extra=EVERY_RANK,  # each node's builder says what it wrote
    )


def staged_index(
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
    builder = int(os.environ.get("LOCAL_RANK", "0")) == 0 if not a["use_shared_fs"] else is_rank_zero()
    if builder and not all(os.path.isfile(f) for f in files):
        arrays = stage_order.build_passes(documents, sizes, passes, a["seq_length"], a["seed"])
        for f, arr in zip(files, arrays):
            neox_index.save_atomic(f, arr)
        log.info(
            "neox_epoch: built %s's own order: %d passes of %d samples, each pass on its own",
            label,
            passes,
            per_pass,
            extra=EVERY_RANK,  # each node's builder says what it wrote
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
    # what a stage boundary could not make exact (a remainder, a stage rounded up), as the plan says
    for st in staged.stages.stages:
        for note in st.notes:
            log.info("neox_epoch: stage %s: note: %s", st.name, note)


# ----------------------------------------------------------------------------------------------------------
# after the build: table, JSON record, verification, counters


def _rows(state: State, rp: RunPlan, problems: list[str]) -> list[dict[str, Any]]:
    """The per-source table rows; a build that differs from the plan (or the saved run) is added to ``problems``."""
    builds = {base_name(b.name): b for b in state.builds}
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
    gas = accumulation_steps(neox_args)
    resume = state.resume
    first = resume.start // resume.shape.loader_batch if resume else 0
    if train_loader is not None and first + (rp.train_iters - (resume.state.iteration if resume else 0)) * gas > len(
        train_loader
    ):
        msg = replay_message(len(train_loader) // gas + 1, len(train_loader), gas)
        if state.block.enforce:
            raise WrapError(f"neox_epoch: train_iters {rp.train_iters}: at {msg} (enforce is on)")
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
            log.info(
                "neox_epoch: train blend ends at the %d samples the run draws (NeoX built %d; the rest "
                "would only be prefetched after the last iteration)",
                n,
                int(ds.size),
            )
            ds.size = n
    state.table = rows
    top = is_rank_zero()
    sink = JsonlSink(state.block.log_dir) if top else JsonlSink(None)
    state.sink = sink
    if problems:
        msg = "neox_epoch: NeoX's build differs from the plan: " + "; ".join(problems)
        if state.block.enforce:
            raise PlanError(msg + " (enforce is on)")
        log.warning(msg)
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
    draws = [[st.draw_of(s) for s in staged.labels] for st in staged.stages.stages]
    counts = [[d.draws if d else 0 for d in row] for row in draws]
    starts = [[d.start if d else 0 for d in row] for row in draws]
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
