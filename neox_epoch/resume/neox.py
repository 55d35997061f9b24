"""``neox-epoch resume-check CHECKPOINT NEW.yml...``: what a GPT-NeoX resume with a changed config will skip or
repeat, before launching it.

OLD is the checkpoint NeoX will load (read without torch or its weights: :mod:`neox_epoch.formats.checkpoint`): its
iteration, the batch shape DeepSpeed saved, neox-epoch's state when the hooks saved one (the consumed samples,
each train build, the blend), and the config files NeoX copied into it. NEW is the config the run resumes
with. The resumed train loader starts where NeoX (or, with a ``neox_epoch`` block and a saved state, the
hooks) start it (:mod:`neox_epoch.semantics.loader`); positions between that start and the consumed samples are
skipped or repeated, and are attributed to sources by replaying the new blend's draw order. A train index
built with another number of epochs, or a blend with other weights, changes which sample a position names:
that is a finding too. Exit 0: the resume continues exactly; 1: findings; 2: bad input.

A Megatron-LM checkpoint resumed with a Megatron-LM command line is checked by :mod:`neox_epoch.resume.megatron`
with the same report.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from neox_epoch.batch.neox import neox_batch
from neox_epoch.errors import ConfigError, NeoxEpochError
from neox_epoch.formats import fingerprint as fingerprint_format
from neox_epoch.formats.checkpoint import Checkpoint, read_checkpoint
from neox_epoch.formats.neox_config import NeoxConfig, get_int, load_neox_configs
from neox_epoch.formats.runlog import JSONL_NAME, checkpoint_records, log_file, recorded_at
from neox_epoch.neox.planning import make_run_plan, values_from_args
from neox_epoch.neox.resume_state import decide, fingerprint_changes, read_state, states_from_log
from neox_epoch.plan.planner import make_plan
from neox_epoch.resume.exposure import source_exposures
from neox_epoch.resume.model import (
    NewRun,
    OldRun,
    ResumeCheck,
    SavedBuild,
    SourceDelta,
    blend_findings,
    build_findings,
    deltas,
    split_samples,
    train_builds,
    valid_sources,
)
from neox_epoch.semantics.loader import (
    LoaderShape,
    ResumeStart,
    ValidStart,
    end_test,
    hooked_start,
    neox_start,
    neox_valid_start,
)
from neox_epoch.util.output import Output, write_output_text
from neox_epoch.util.values import is_whole


def _int(values: dict[str, Any], key: str, where: str) -> int:
    value = values.get(key)
    if not is_whole(value, 1):
        raise ConfigError(
            f"{where}: DeepSpeed's {key} is {value!r}, expected a whole number >= 1; not a DeepSpeed "
            "checkpoint of a training run"
        )
    return value


def old_run(ckpt: Checkpoint) -> OldRun:
    """The consumed samples: the hooks' state when saved, else iteration x the saved train_batch_size."""
    if ckpt.framework != "neox":
        raise ConfigError(
            f"{ckpt.directory}: a Megatron-LM checkpoint; give its Megatron-LM command line "
            "(--data-path ...) for the resumed run"
        )
    ds = ckpt.values.get("ds_config")
    if not isinstance(ds, dict):
        raise ConfigError(f"{ckpt.directory}: no ds_config saved with it; not a DeepSpeed checkpoint of NeoX")
    tbs = _int(ds, "train_batch_size", ckpt.directory)
    state = read_state(ckpt.directory)
    if state is not None:
        how = f"consumed = {state.consumed_samples} (neox_epoch_state.json, every batch size the run had)"
        return OldRun(ckpt, tbs, state.consumed_samples, how, state)
    how = (
        f"consumed = iteration * train_batch_size = {ckpt.iteration} * {tbs} = {ckpt.iteration * tbs} (no "
        "neox-epoch state in the checkpoint: assumes the batch never changed before it)"
    )
    return OldRun(ckpt, tbs, ckpt.iteration * tbs, how, None)


def is_run_log(path: str) -> bool:
    """A run's JSONL (or the directory holding it) rather than a checkpoint directory."""
    if os.path.isdir(path):
        return os.path.isfile(os.path.join(path, JSONL_NAME)) and not os.path.isfile(os.path.join(path, "latest"))
    return path.endswith(".jsonl") and os.path.isfile(path)


def old_from_log(path: str, iteration: int | None, records: list[tuple[int, dict[str, Any]]] | None = None) -> OldRun:
    """OLD from the ``checkpoint`` record the hooks wrote into the run's JSONL when NeoX saved the checkpoint the
    resume loads (``iteration``; default the last one recorded): the checkpoint itself is not needed. ``records``:
    the JSONL's checkpoint records when already read."""
    log = log_file(path)
    states = states_from_log(log, checkpoint_records(log) if records is None else records)
    if not states:
        raise ConfigError(
            f"{log}: no checkpoint record in it (the hooks write one each time NeoX saves a "
            "checkpoint); give the checkpoint directory instead"
        )
    at, (tag, state) = recorded_at(log, states, iteration)
    ckpt = Checkpoint("neox", f"{log} ({tag})", at, {"ds_config": {"train_batch_size": state.train_batch_size}})
    how = (
        f"consumed = {state.consumed_samples} (the checkpoint record for {tag} in the run's JSONL, every batch "
        "size the run had)"
    )
    return OldRun(ckpt, state.train_batch_size, state.consumed_samples, how, state)


def new_run(cfg: NeoxConfig, world_size: int | None) -> NewRun:
    """Plan the new config (its files loaded) as NeoX (with the hooks when it has a ``neox_epoch`` block) will build
    it."""
    batch = neox_batch(cfg, world_size)
    if batch.data_parallel_size is None or batch.micro_batch_size is None:
        raise ConfigError(
            f"{', '.join(cfg.files)}: the data-parallel size is needed for where the loader resumes; give "
            "--world-size N (GPUs the resumed run uses) or global_num_gpus"
        )
    shape = LoaderShape(batch.micro_batch_size, batch.data_parallel_size, batch.gradient_accumulation_steps or 1)
    values = {**cfg.values, "train_batch_size": batch.train_batch_size}
    if cfg.block is not None:
        rp = make_run_plan(values_from_args(argparse.Namespace(**values)), cfg.block)  # as the hooks plan it
        plan, weights = rp.plan, rp.weights
        total = rp.train_iters * rp.train_batch_size if rp.exact_targets is not None else None
    else:
        from neox_epoch.plan.from_neox import plan_input_from_neox

        plan = make_plan(plan_input_from_neox(cfg, world_size, batch=batch))
        blends = [b for b in plan.blends if b.split == "train"]
        weights = tuple(float(w) for w in (blends[0].weights or ())) if blends else None
        total = None
    train = [s for s in plan.sources if s.split == "train"]
    blended = len(train) > 1 or bool(weights)
    builds = train_builds(train, blended)
    dataset = total if total is not None else sum(s.length for s in train)
    lr = any(
        bool(cfg.values.get(k)) for k in ("override_lr_scheduler", "use_checkpoint_lr_scheduler", "lr_decay_iters")
    )
    evaluation = (get_int(cfg, "eval_interval", 1000) or 0, get_int(cfg, "eval_iters", 100, positive=False) or 0)
    return NewRun(
        shape,
        plan,
        tuple(s.name for s in train),
        weights if blended else None,
        builds,
        dataset,
        cfg.block is not None,
        lr,
        get_int(cfg, "seed", 1234, positive=False) or 0,
        evaluation,
        sum(s.length for s in plan.sources if s.split == "valid"),
        rp.staged if cfg.block is not None else None,
    )


def valid_samples_at(cfg: NeoxConfig, world_size: int | None, train_iters: int) -> int:
    """Samples of the validation dataset NeoX builds for the config at ``train_iters``: a resume the hooks make
    exact sets train_iters before NeoX builds its data, and validation keeps NeoX's own build (as stock NeoX plans
    it, with that train_iters)."""
    from neox_epoch.plan.from_neox import plan_input_from_neox

    cfg = replace(cfg, values={**cfg.values, "train_iters": train_iters, "train_epochs": None}, block=None)
    plan = make_plan(plan_input_from_neox(cfg, world_size, batch=neox_batch(cfg, world_size)))
    return sum(s.length for s in plan.sources if s.split == "valid")


@contextlib.contextmanager
def _config_files(ckpt: Checkpoint) -> Iterator[list[str]]:
    """The config files NeoX copied into the checkpoint, written out to a temporary directory."""
    with tempfile.TemporaryDirectory() as directory:
        paths = []
        for name, text in ckpt.config_files.items():
            paths.append(os.path.join(directory, os.path.basename(name)))
            write_output_text(Output(paths[-1], "the copy of a checkpoint config", example="config.yml"), text)
        yield paths


def saved_run(old: OldRun) -> tuple[NewRun | None, str | None]:
    """The config files NeoX copied into the checkpoint's ``configs/``, planned as NeoX built them with the world
    DeepSpeed saved (data parallel x its model-parallel group); (the run, or None and why not)."""
    ckpt = old.checkpoint
    if not ckpt.config_files:
        return None, (
            "no config files in the checkpoint (NeoX copies them into configs/): the saved run's blend and "
            "train indices are not compared with the new ones"
        )
    world = int(ckpt.values.get("dp_world_size") or 1) * int(ckpt.values.get("mp_world_size") or 1)
    with _config_files(ckpt) as paths:
        try:
            saved = new_run(load_neox_configs(paths), world)
        except NeoxEpochError as err:
            return None, f"the config files in the checkpoint do not plan ({err}): the saved build is not compared"
    if saved.shape.train_batch_size != old.train_batch_size:
        return None, (
            f"the config files in the checkpoint plan train_batch_size {saved.shape.train_batch_size}, "
            f"DeepSpeed saved {old.train_batch_size}: the saved build is not compared"
        )
    return saved, None


def saved_build(old: OldRun, saved: NewRun | None, why_not: str | None) -> tuple[SavedBuild | None, str | None]:
    """The saved run's build: the hooks' state, else its config files planned (:func:`saved_run`). (build, a note)."""
    state = old.state
    if state is not None:
        return SavedBuild(state.seq_length, tuple(state.greedy_weights) or None, state.builds, "neox-epoch state"), None
    if saved is None:
        return None, why_not
    return SavedBuild(
        saved.plan.seq_length, saved.weights, saved.builds, "the config files in the checkpoint", seed=saved.seed
    ), None


def valid_start(old: OldRun, new: NewRun, end: int, saved: NewRun | None) -> ValidStart | None:
    """Where NeoX's resumed validation loader starts against what the saved run's evaluations drew, and per source
    of the validation blend what each drew, will draw to the run's ``end`` and would draw continuing: the saved
    run's eval_interval and eval_iters from the config files in the checkpoint (its validation dataset: the hooks'
    state, else ``saved``, those files planned), its batch shape from DeepSpeed's saved config and data-parallel
    size; without them (a run's JSONL), from the hooks' state (None when neither has them, or without evaluation)."""
    ckpt, ds, state = old.checkpoint, old.checkpoint.values.get("ds_config"), old.state
    old_valid = (
        state.valid_samples
        if state is not None and state.valid_samples
        else (saved.valid_samples if saved is not None else None)
    )
    if not ckpt.config_files or not isinstance(ds, dict):
        if state is None or not state.eval_interval:
            return None
        shape = LoaderShape(state.loader_batch, 1, state.train_batch_size // state.loader_batch)
        evaluation = (state.eval_interval, state.eval_iters)
    else:
        try:
            micro, dp = ds["train_micro_batch_size_per_gpu"], ckpt.values["dp_world_size"]
            # DeepSpeed derives the accumulation when NeoX leaves it out: train_batch_size / (micro * dp)
            gas = ds.get("gradient_accumulation_steps") or ds["train_batch_size"] // (micro * dp)
            shape = LoaderShape(micro, dp, gas)
            with _config_files(ckpt) as paths:
                cfg = load_neox_configs(paths, check_keys=False)
            evaluation = (
                get_int(cfg, "eval_interval", 1000) or 0,
                get_int(cfg, "eval_iters", 100, positive=False) or 0,
            )
        except (KeyError, TypeError, ZeroDivisionError, NeoxEpochError):
            return None
    valid = neox_valid_start(
        ckpt.iteration, shape, evaluation, new.shape, new.evaluation, new.valid_samples, end, old_valid
    )
    return None if valid is None else replace(valid, sources=valid_sources(new.plan, valid.spans))


def _valid_notes(valid: ValidStart | None) -> list[str]:
    """What a NeoX resume changes in which validation samples are evaluated (nothing is trained on them)."""
    notes = []
    if valid is not None and valid.start != valid.continued:
        notes.append(
            f"valid: NeoX restarts the validation loader at sample {valid.start}; the saved run's "
            f"evaluations drew {valid.drawn} (the next at {valid.continued}): the validation "
            "loss after the resume is measured on other samples than continuing would (nothing is trained "
            "on them)"
        )
    if valid is not None and valid.replayed:
        lo, hi = valid.replayed
        notes.append(
            f"valid: the resumed evaluations reach the validation dataset's end and NeoX's loader "
            f"(itertools.cycle over the launch's first pass) evaluates samples {lo}..{hi - 1} again, not "
            f"0..{lo - 1}"
        )
    return notes


def staged_deltas(new: NewRun, consumed: int, start: ResumeStart, iterations_left: int) -> tuple[SourceDelta, ...]:
    """Per source of a staged run: the stages' draw order (each source drawn in its own order) before the saved
    run's consumed samples, and from the resumed run's start to its end."""
    import numpy as np

    from neox_epoch.semantics.stage_order import draw_order

    staged = new.staged
    counts = [[st.draw_of(s).draws if st.draw_of(s) else 0 for s in staged.labels] for st in staged.stages.stages]
    starts = [[st.draw_of(s).start if st.draw_of(s) else 0 for s in staged.labels] for st in staged.stages.stages]
    which, _ = draw_order(counts, starts)
    n = len(staged.labels)

    def upto(p: int) -> list[int]:
        return [int(x) for x in np.bincount(which[: max(0, p)].astype(np.int64), minlength=n)]

    before, first = upto(consumed), upto(start.start)
    last = upto(start.start + iterations_left * new.shape.train_batch_size)
    return tuple(
        SourceDelta(
            name,
            max(0, first[k] - before[k]),
            max(0, min(before[k], last[k]) - first[k]),
            last[k] - first[k],
            before[k],
            first[k],
        )
        for k, name in enumerate(staged.labels)
    )


def data_change(old: OldRun, cfg: NeoxConfig, new: NewRun) -> tuple[str, str]:
    """(finding, note) of the data fingerprint saved with the checkpoint against the new config's data; ("", "")
    when the checkpoint has no fingerprint. The hooks stop any run with the neox_epoch block on a difference, staged
    or not, unless the block allows the change."""
    state = old.state
    if state is None or state.fingerprint is None:
        return "", ""
    prefixes = [s.prefix for s in new.plan.sources if s.split == "train"]
    stages = cfg.block.stages_config() if cfg.block is not None and cfg.block.stages is not None else None
    try:
        current = fingerprint_format.fingerprint(
            prefixes,
            new.plan.seq_length,
            get_int(cfg, "seed", 1234, positive=False) or 0,
            stages.to_mapping() if stages is not None else None,
        )
    except NeoxEpochError as err:
        return "", f"data fingerprint: not compared ({err})"
    diffs, allowed = fingerprint_changes(state, current)
    if not diffs:
        return "", ("data fingerprint: unchanged since the checkpoint" + (f"; {allowed}" if allowed else ""))
    line = fingerprint_format.message(diffs)
    if cfg.block is not None and cfg.block.allow_data_change:
        return "", f"data fingerprint: {line} (allow_data_change: the hooks resume anyway)"
    if cfg.block is None:
        return "", f"data fingerprint: {line} (no neox_epoch block: no hooks, nothing stops the run)"
    return (
        f"data-changed: {line}; the hooks stop before the first step: resume on the data the checkpoint was "
        'trained on, or set "allow_data_change": true in the neox_epoch block'
    ), ""


def check(
    checkpoint: str,
    configs: list[str],
    world_size: int | None = None,
    exposure: bool = False,
    iteration: int | None = None,
    records: list[tuple[int, dict[str, Any]]] | None = None,
) -> ResumeCheck:
    """``checkpoint``: the checkpoint directory, or the run's JSONL (``iteration``: which checkpoint record;
    ``records``: its checkpoint records when already read)."""
    old = (
        old_from_log(checkpoint, iteration, records) if is_run_log(checkpoint) else old_run(read_checkpoint(checkpoint))
    )
    cfg = load_neox_configs(configs)
    new = new_run(cfg, world_size)
    it = old.checkpoint.iteration
    findings, notes = [], []
    if new.hooks and old.state is not None:
        same = (new.shape.train_batch_size, new.shape.loader_batch) == (
            old.state.train_batch_size,
            old.state.loader_batch,
        )
        start = hooked_start(old.consumed, new.shape)
        decision = decide(old.state, new.shape)
        if not same and old.state.greedy_weights:  # the hooks rebuild the saved run's blend
            new = replace(new, weights=tuple(old.state.greedy_weights))
        findings += [] if same else list(decision.findings)
        if not same and decision.train_iters != old.state.train_iters and not new.lr_follows:
            findings.append(
                f"lr-schedule: the run's end moves from iteration {old.state.train_iters} to "
                f"{decision.train_iters} and NeoX's learning-rate scheduler refuses the checkpoint (the "
                "hooks stop before training): set override_lr_scheduler or use_checkpoint_lr_scheduler"
            )
        who, counters = "hooks", old.consumed
    else:
        start = neox_start(it, old.consumed, new.shape, new.dataset_samples)
        who, counters = "NeoX", it * new.shape.train_batch_size
        if new.hooks:
            notes.append(
                "the config has a neox_epoch block but the checkpoint no neox-epoch state: the hooks resume "
                "where NeoX does"
            )
    if start.skipped:
        findings.append(
            f"skip: samples {start.skipped[0]}..{start.skipped[1] - 1} are never trained "
            f"({start.skipped[1] - start.skipped[0]} samples)"
        )
    if start.repeated and who == "NeoX":
        findings.append(
            f"repeat: samples {start.repeated[0]}..{start.repeated[1] - 1} are trained again "
            f"({start.repeated[1] - start.repeated[0]} samples)"
        )
    planned, why_not = saved_run(old)
    saved, note = saved_build(old, planned, why_not)
    end = decide(old.state, new.shape).train_iters if who == "hooks" and old.state else new.plan.train_iters
    if who == "hooks" and end != new.plan.train_iters and new.valid_samples:
        new = replace(new, valid_samples=valid_samples_at(cfg, world_size, end))
    valid = valid_start(old, new, end, planned)
    notes += _valid_notes(valid)
    findings += build_findings(old, saved, new) + blend_findings(new, saved, old.consumed, start, max(0, end - it))
    notes += [note] if note else [f"the saved run's build from {saved.source}"] if saved else []
    if new.hooks and counters != old.consumed:
        findings.append(
            f"counters: the counters will say {counters} samples consumed at iteration {it} "
            f"(iteration * new train_batch_size), {old.consumed} were"
        )
    finding, note = data_change(old, cfg, new)
    findings += [finding] if finding else []
    notes += [note] if note else []
    sources = (
        staged_deltas(new, old.consumed, start, max(0, end - it))
        if new.staged is not None
        else deltas(new, saved, old.consumed, start, max(0, end - it))
    )
    test = end_test(new.evaluation[1], new.shape.train_batch_size, split_samples(new.plan, "test"), "GPT-NeoX")
    return ResumeCheck(
        old,
        new,
        start,
        who,
        sources,
        tuple(findings),
        tuple(notes),
        counters,
        exposures=source_exposures(new, sources, saved) if exposure else (),
        valid=valid,
        test=test,
    )
