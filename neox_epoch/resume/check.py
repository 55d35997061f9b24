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
import glob
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from neox_epoch.batch.neox import neox_batch
from neox_epoch.errors import ConfigError, NeoxEpochError
from neox_epoch.formats.checkpoint import Checkpoint, read_checkpoint
from neox_epoch.formats.neox_config import NeoxConfig, get_int, load_neox_configs
from neox_epoch.formats.runlog import JSONL_NAME, checkpoint_records, log_file, recorded_at
from neox_epoch.neox.planning import make_run_plan, values_from_args
from neox_epoch.neox.resume_state import ResumeState, TrainBuild, decide, read_state, states_from_log
from neox_epoch.plan.planner import Plan, make_plan
from neox_epoch.resume.exposure import SourceExposure, source_exposures
from neox_epoch.semantics import blend
from neox_epoch.semantics.loader import (
    EndTest,
    LoaderShape,
    ResumeStart,
    Span,
    ValidSource,
    ValidStart,
    end_test,
    hooked_start,
    neox_start,
    neox_valid_start,
)
from neox_epoch.util.helptext import examples


@dataclass(frozen=True)
class OldRun:
    """What the checkpoint says about the run that saved it."""

    checkpoint: Checkpoint
    train_batch_size: int
    consumed: int
    consumed_how: str
    state: ResumeState | None


@dataclass(frozen=True)
class NewRun:
    """The run as the new config will build and draw it."""

    shape: LoaderShape
    plan: Plan
    names: tuple[str, ...]
    weights: tuple[float, ...] | None
    builds: dict[str, TrainBuild]
    dataset_samples: int
    """Samples of the train dataset NeoX's loader runs over (len(loader) = this // loader batch)."""
    hooks: bool
    lr_follows: bool
    """The config lets NeoX's LR scheduler take a checkpoint saved for other iterations (override_lr_scheduler,
    use_checkpoint_lr_scheduler or a fixed lr_decay_iters)."""
    seed: int = 1234
    """The shuffles' seed (NeoX names its index files with it)."""
    evaluation: tuple[int, int] = (0, 0)
    """(eval_interval, eval_iters): NeoX evaluates every eval_interval iterations (0: not known)."""
    valid_samples: int = 0
    """Samples of the validation dataset NeoX's validation loader runs over."""


@dataclass(frozen=True)
class SavedBuild:
    """What the saved run built: its seq_length, blend and train indices."""

    seq_length: int  # 0: not recorded.
    weights: tuple[float, ...] | None  # The weights its blend's greedy drew with (None: no blend).
    builds: dict[str, TrainBuild]  # Per train dataset name.
    source: str  # Where it comes from: the hooks' state, or the config files NeoX copied into the checkpoint.
    separation: bool = False  # Its builds say whether the final epoch was shuffled on its own (megatron-core).
    seed: int | None = None  # The shuffles' seed (None: not recorded; taken as the new run's).


@dataclass(frozen=True)
class SourceDelta:
    """One source's samples skipped and repeated at the resume (input tokens = samples x seq_length)."""

    name: str
    skipped: int | None
    """Its samples (in its own index's order) the saved run had not drawn yet and the resumed run never draws
    (None: its index is rebuilt in another order, so the positions name other samples)."""
    repeated: int | None
    """Its samples the saved run drew and the resumed run draws again (None: as for ``skipped``)."""
    drawn: int
    """Samples the resumed run draws from it, from its start to its last iteration."""
    drawn_before: int = 0
    """Its samples the saved run drew (items ``0 .. drawn_before - 1`` of its index)."""
    first: int = 0
    """The item of its index the resumed run draws first (it draws items ``first .. first + drawn - 1``)."""


@dataclass(frozen=True)
class ResumeCheck:
    old: OldRun
    new: NewRun
    start: ResumeStart
    who: str
    """"hooks" (the neox_epoch block and a saved state) or "NeoX" (its own start)."""
    sources: tuple[SourceDelta, ...]
    findings: tuple[str, ...] = field(default_factory=tuple)
    notes: tuple[str, ...] = field(default_factory=tuple)
    counters_at_resume: int = 0
    semantics: str = "GPT-NeoX"  # The framework whose resume is modelled.
    exposures: tuple[SourceExposure, ...] = ()  # Per source, the audit's token exposure (with --exposure).
    valid: ValidStart | None = None  # The validation loader at the resume.
    test: EndTest | None = None  # The test loader (evaluated after the last iteration).


def _int(values: dict[str, Any], key: str, where: str) -> int:
    value = values.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{where}: DeepSpeed's {key} is {value!r}, expected a whole number >= 1; not a DeepSpeed "
                          "checkpoint of a training run")
    return value


def old_run(ckpt: Checkpoint) -> OldRun:
    """The consumed samples: the hooks' state when saved, else iteration x the saved train_batch_size."""
    if ckpt.framework != "neox":
        raise ConfigError(f"{ckpt.directory}: a Megatron-LM checkpoint; give its Megatron-LM command line "
                          "(--data-path ...) for the resumed run")
    ds = ckpt.values.get("ds_config")
    if not isinstance(ds, dict):
        raise ConfigError(f"{ckpt.directory}: no ds_config saved with it; not a DeepSpeed checkpoint of NeoX")
    tbs = _int(ds, "train_batch_size", ckpt.directory)
    state = read_state(ckpt.directory)
    if state is not None:
        how = f"consumed = {state.consumed_samples} (neox_epoch_state.json, every batch size the run had)"
        return OldRun(ckpt, tbs, state.consumed_samples, how, state)
    how = (f"consumed = iteration * train_batch_size = {ckpt.iteration} * {tbs} = {ckpt.iteration * tbs} (no "
           "neox-epoch state in the checkpoint: assumes the batch never changed before it)")
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
        raise ConfigError(f"{log}: no checkpoint record in it (the hooks write one each time NeoX saves a "
                          "checkpoint); give the checkpoint directory instead")
    at, (tag, state) = recorded_at(log, states, iteration)
    ckpt = Checkpoint("neox", f"{log} ({tag})", at, {"ds_config": {"train_batch_size": state.train_batch_size}})
    how = (f"consumed = {state.consumed_samples} (the checkpoint record for {tag} in the run's JSONL, every batch "
           "size the run had)")
    return OldRun(ckpt, state.train_batch_size, state.consumed_samples, how, state)


def new_run(cfg: NeoxConfig, world_size: int | None) -> NewRun:
    """Plan the new config (its files loaded) as NeoX (with the hooks when it has a ``neox_epoch`` block) will build
    it."""
    batch = neox_batch(cfg, world_size)
    if batch.data_parallel_size is None or batch.micro_batch_size is None:
        raise ConfigError(f"{', '.join(cfg.files)}: the data-parallel size is needed for where the loader resumes; give "
                          "--world-size N (GPUs the resumed run uses) or global_num_gpus")
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
    builds = {(f"train_{k}" if blended else "train"): TrainBuild(s.samples_requested, s.epochs_built, s.samples_built)
              for k, s in enumerate(train)}
    dataset = total if total is not None else sum(s.length for s in train)
    lr = any(bool(cfg.values.get(k)) for k in ("override_lr_scheduler", "use_checkpoint_lr_scheduler", "lr_decay_iters"))
    evaluation = (get_int(cfg, "eval_interval", 1000) or 0, get_int(cfg, "eval_iters", 100, positive=False) or 0)
    return NewRun(shape, plan, tuple(s.name for s in train), weights if blended else None, builds, dataset,
                  cfg.block is not None, lr, get_int(cfg, "seed", 1234, positive=False) or 0, evaluation,
                  sum(s.length for s in plan.sources if s.split == "valid"))


def valid_samples_at(cfg: NeoxConfig, world_size: int | None, train_iters: int) -> int:
    """Samples of the validation dataset NeoX builds for the config at ``train_iters``: a resume the hooks make
    exact sets train_iters before NeoX builds its data, and validation keeps NeoX's own build (as stock NeoX plans
    it, with that train_iters)."""
    from neox_epoch.plan.from_neox import plan_input_from_neox

    cfg = replace(cfg, values={**cfg.values, "train_iters": train_iters, "train_epochs": None}, block=None)
    plan = make_plan(plan_input_from_neox(cfg, world_size, batch=neox_batch(cfg, world_size)))
    return sum(s.length for s in plan.sources if s.split == "valid")


def _counts(weights: tuple[float, ...] | None, positions: list[int]) -> list[list[int]]:
    """Samples drawn from each source by the first ``p`` samples, for each ``p`` of ``positions`` (the blend's
    greedy, in one pass; or the one source)."""
    positions = [max(0, p) for p in positions]
    if weights is None:
        return [[p] for p in positions]
    return [list(c) for c in blend.greedy_draws(list(weights), positions).counts]


def deltas(new: NewRun, saved: SavedBuild | None, consumed: int, start: ResumeStart,
            iterations_left: int) -> tuple[SourceDelta, ...]:
    """Per source: what the saved run drew (the saved blend's draws among the consumed samples) against where the
    resumed run starts drawing in its index (the new blend's among the positions before its start)."""
    weights = saved.weights if saved is not None and saved.weights is not None else new.weights
    if weights is None or new.weights is None or len(weights) != len(new.weights):
        weights = new.weights  # no saved blend to compare with: the same blend before and after
    (before,) = _counts(weights, [consumed])
    first, last = _counts(new.weights, [start.start, start.start + iterations_left * new.shape.train_batch_size])
    keys = list(new.builds)
    cut_anew = saved is not None and bool(saved.seq_length) and saved.seq_length != new.plan.seq_length
    rows = []
    for k, name in enumerate(new.names):
        was = saved.builds.get(keys[k]) if saved is not None and k < len(keys) else None
        reordered = cut_anew or (was is not None and was.epochs != new.builds[keys[k]].epochs)
        # repeated: the saved run's items 0 .. before-1 that the resumed run's first .. last-1 cover again
        repeated = max(0, min(before[k], last[k]) - first[k])
        rows.append(SourceDelta(name, None if reordered else max(0, first[k] - before[k]),
                                None if reordered else repeated, last[k] - first[k], before[k], first[k]))
    return tuple(rows)


def blend_findings(new: NewRun, saved: SavedBuild | None, consumed: int, start: ResumeStart,
                   iterations_left: int) -> list[str]:
    """With another blend the resume moves in each source's index: samples skipped, or drawn again by the
    resumed run's ``iterations_left`` iterations."""
    if saved is None or not blend_changed(saved, new) or len(saved.weights or ()) != len(new.weights or ()):
        return []
    out = []
    for d in deltas(new, saved, consumed, start, iterations_left):
        if d.skipped:
            out.append(f"skip: {d.name}: {d.skipped} of its samples the saved run had not reached are never drawn "
                       "(the new blend starts further into it)")
        if d.repeated:
            out.append(f"repeat: {d.name}: {d.repeated} of its samples the saved run drew are drawn again (the new "
                       "blend starts earlier in it)")
    return out


@contextlib.contextmanager
def _config_files(ckpt: Checkpoint) -> Iterator[list[str]]:
    """The config files NeoX copied into the checkpoint, written out to a temporary directory."""
    with tempfile.TemporaryDirectory() as directory:
        paths = []
        for name, text in ckpt.config_files.items():
            paths.append(os.path.join(directory, os.path.basename(name)))
            with open(paths[-1], "w", encoding="utf-8") as f:
                f.write(text)
        yield paths


def saved_run(old: OldRun) -> tuple[NewRun | None, str | None]:
    """The config files NeoX copied into the checkpoint's ``configs/``, planned as NeoX built them with the world
    DeepSpeed saved (data parallel x its model-parallel group); (the run, or None and why not)."""
    ckpt = old.checkpoint
    if not ckpt.config_files:
        return None, ("no config files in the checkpoint (NeoX copies them into configs/): the saved run's blend and "
                      "train indices are not compared with the new ones")
    world = int(ckpt.values.get("dp_world_size") or 1) * int(ckpt.values.get("mp_world_size") or 1)
    with _config_files(ckpt) as paths:
        try:
            saved = new_run(load_neox_configs(paths), world)
        except NeoxEpochError as err:
            return None, f"the config files in the checkpoint do not plan ({err}): the saved build is not compared"
    if saved.shape.train_batch_size != old.train_batch_size:
        return None, (f"the config files in the checkpoint plan train_batch_size {saved.shape.train_batch_size}, "
                      f"DeepSpeed saved {old.train_batch_size}: the saved build is not compared")
    return saved, None


def saved_build(old: OldRun, saved: NewRun | None, why_not: str | None) -> tuple[SavedBuild | None, str | None]:
    """The saved run's build: the hooks' state, else its config files planned (:func:`saved_run`). (build, a note)."""
    state = old.state
    if state is not None:
        return SavedBuild(state.seq_length, tuple(state.greedy_weights) or None, state.builds, "neox-epoch state"), None
    if saved is None:
        return None, why_not
    return SavedBuild(saved.plan.seq_length, saved.weights, saved.builds, "the config files in the checkpoint",
                      seed=saved.seed), None


def valid_start(old: OldRun, new: NewRun, end: int, saved: NewRun | None) -> ValidStart | None:
    """Where NeoX's resumed validation loader starts against what the saved run's evaluations drew, and per source
    of the validation blend what each drew, will draw to the run's ``end`` and would draw continuing: the saved
    run's eval_interval and eval_iters from the config files in the checkpoint (its validation dataset: the hooks'
    state, else ``saved``, those files planned), its batch shape from DeepSpeed's saved config and data-parallel size; without them (a
    run's JSONL), from the hooks' state (None when neither has them, or without evaluation)."""
    ckpt, ds, state = old.checkpoint, old.checkpoint.values.get("ds_config"), old.state
    old_valid = state.valid_samples if state is not None and state.valid_samples else (
        saved.valid_samples if saved is not None else None)
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
            evaluation = (get_int(cfg, "eval_interval", 1000) or 0,
                          get_int(cfg, "eval_iters", 100, positive=False) or 0)
        except (KeyError, TypeError, ZeroDivisionError, NeoxEpochError):
            return None
    valid = neox_valid_start(ckpt.iteration, shape, evaluation, new.shape, new.evaluation, new.valid_samples, end,
                             old_valid)
    return None if valid is None else replace(valid, sources=valid_sources(new.plan, valid.spans))


def split_samples(plan: Plan, split: str) -> int:
    """Samples of a split's dataset: its blend's size, or the len of its datasets."""
    blends = [b for b in plan.blends if b.split == split]
    if blends and blends[0].size is not None:
        return blends[0].size
    return sum(s.length for s in plan.sources if s.split == split)


def valid_sources(plan: Plan, windows: tuple[tuple[Span, ...], ...]) -> tuple[ValidSource, ...]:
    """Per source of the validation split, its samples among the blend positions of each of the three ``windows``
    (the saved run's evaluations, the resumed run's, continuing; each spans [lo, hi) drawn some times): the blend's
    greedy over its weights (one source: all of them); () for a blend without weights (megatron-core's exhaustive
    blend, not modelled here)."""
    names = [s.name for s in plan.sources if s.split == "valid"]
    weights = next((b.weights for b in plan.blends if b.split == "valid"), None)
    if not names or len(names) > 1 and not weights or len(windows) != 3:
        return ()
    at = dict(zip(positions := sorted({p for w in windows for s in w for p in s[:2]}), _counts(weights, positions)))
    counts = [[sum(t * (at[hi][k] - at[lo][k]) for lo, hi, t in w) for w in windows] for k in range(len(names))]
    return tuple(ValidSource(name, *counts[k]) for k, name in enumerate(names))


def blend_changed(saved: SavedBuild, new: NewRun) -> bool:
    """The new blend draws with other weights (or other sources) than the saved one."""
    if not saved.weights or new.weights is None:
        return False
    return len(saved.weights) != len(new.weights) or any(abs(a - b) > 1e-12 for a, b in zip(saved.weights, new.weights))


def build_findings(old: OldRun, saved: SavedBuild | None, new: NewRun) -> list[str]:
    """Train indices or a blend that would not be the saved run's: positions then name other samples."""
    if saved is None:
        return []  # no record to compare with
    out = []
    if saved.seq_length and saved.seq_length != new.plan.seq_length:
        out.append(f"seq-length-changed: seq_length {saved.seq_length} -> {new.plan.seq_length}: the documents "
                   "are cut into other samples (new index files), so positions before and after the resume are "
                   "other token spans (--exposure counts each token's times seen over the whole run)")
    state = old.state
    if new.hooks and state is not None and (new.shape.train_batch_size, new.shape.loader_batch) != (
            state.train_batch_size, state.loader_batch):
        return out  # the hooks rebuild the saved indices and blend
    if blend_changed(saved, new):
        out.append(f"blend-changed: the blend's weights {[round(w, 6) for w in new.weights]} differ from the saved "
                   f"run's {[round(w, 6) for w in saved.weights]}: from the resume on, positions draw other "
                   "sources than the saved run's")
    for name, built in new.builds.items():
        was = saved.builds.get(name)
        if was is not None and (was.epochs != built.epochs or saved.separation and
                                was.separate_final_epoch != built.separate_final_epoch):
            def epochs(b: TrainBuild) -> str:
                return f"{b.epochs} epochs" + (" (the last shuffled on its own)" if b.separate_final_epoch else "")

            out.append(f"orders-change: {name}: {epochs(built)} for num_samples {built.num_samples} now, "
                       f"{epochs(was)} for {was.num_samples} in the saved run: a new index, shuffled anew, so "
                       "positions before and after the resume name different samples")
    return out


def _valid_notes(valid: ValidStart | None) -> list[str]:
    """What a NeoX resume changes in which validation samples are evaluated (nothing is trained on them)."""
    notes = []
    if valid is not None and valid.start != valid.continued:
        notes.append(f"valid: NeoX restarts the validation loader at sample {valid.start}; the saved run's "
                     f"evaluations drew {valid.drawn} (the next at {valid.continued}): the validation "
                     "loss after the resume is measured on other samples than continuing would (nothing is trained "
                     "on them)")
    if valid is not None and valid.replayed:
        lo, hi = valid.replayed
        notes.append(f"valid: the resumed evaluations reach the validation dataset's end and NeoX's loader "
                     f"(itertools.cycle over the launch's first pass) evaluates samples {lo}..{hi - 1} again, not "
                     f"0..{lo - 1}")
    return notes


def check(checkpoint: str, configs: list[str], world_size: int | None = None, exposure: bool = False,
          iteration: int | None = None, records: list[tuple[int, dict[str, Any]]] | None = None) -> ResumeCheck:
    """``checkpoint``: the checkpoint directory, or the run's JSONL (``iteration``: which checkpoint record;
    ``records``: its checkpoint records when already read)."""
    old = (old_from_log(checkpoint, iteration, records) if is_run_log(checkpoint)
           else old_run(read_checkpoint(checkpoint)))
    cfg = load_neox_configs(configs)
    new = new_run(cfg, world_size)
    it = old.checkpoint.iteration
    findings, notes = [], []
    if new.hooks and old.state is not None:
        same = (new.shape.train_batch_size, new.shape.loader_batch) == (old.state.train_batch_size,
                                                                          old.state.loader_batch)
        start = hooked_start(old.consumed, new.shape)
        decision = decide(old.state, new.shape)
        if not same and old.state.greedy_weights:  # the hooks rebuild the saved run's blend
            new = replace(new, weights=tuple(old.state.greedy_weights))
        findings += [] if same else list(decision.findings)
        if not same and decision.train_iters != old.state.train_iters and not new.lr_follows:
            findings.append(f"lr-schedule: the run's end moves from iteration {old.state.train_iters} to "
                            f"{decision.train_iters} and NeoX's learning-rate scheduler refuses the checkpoint (the "
                            "hooks stop before training): set override_lr_scheduler or use_checkpoint_lr_scheduler")
        who, counters = "hooks", old.consumed
    else:
        start = neox_start(it, old.consumed, new.shape, new.dataset_samples)
        who, counters = "NeoX", it * new.shape.train_batch_size
        if new.hooks:
            notes.append("the config has a neox_epoch block but the checkpoint no neox-epoch state: the hooks resume "
                         "where NeoX does")
    if start.skipped:
        findings.append(f"skip: samples {start.skipped[0]}..{start.skipped[1] - 1} are never trained "
                        f"({start.skipped[1] - start.skipped[0]} samples)")
    if start.repeated and who == "NeoX":
        findings.append(f"repeat: samples {start.repeated[0]}..{start.repeated[1] - 1} are trained again "
                        f"({start.repeated[1] - start.repeated[0]} samples)")
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
        findings.append(f"counters: the counters will say {counters} samples consumed at iteration {it} "
                        f"(iteration * new train_batch_size), {old.consumed} were")
    sources = deltas(new, saved, old.consumed, start, max(0, end - it))
    test = end_test(new.evaluation[1], new.shape.train_batch_size, split_samples(new.plan, "test"), "GPT-NeoX")
    return ResumeCheck(old, new, start, who, sources, tuple(findings), tuple(notes), counters,
                       exposures=source_exposures(new, sources, saved) if exposure else (), valid=valid, test=test)


def to_json(rc: ResumeCheck) -> dict[str, Any]:
    """The machine-readable report (keys documented in the README)."""
    seq = rc.new.plan.seq_length
    return {
        "checkpoint": rc.old.checkpoint.directory, "iteration": rc.old.checkpoint.iteration,
        "consumed_samples": rc.old.consumed, "consumed_how": rc.old.consumed_how,
        "old_train_batch_size": rc.old.train_batch_size, "new_train_batch_size": rc.new.shape.train_batch_size,
        "resumed_by": rc.who, "start_sample": rc.start.start, "start_how": rc.start.how,
        "skipped": list(rc.start.skipped) if rc.start.skipped else None,
        "repeated": list(rc.start.repeated) if rc.start.repeated else None,
        "sources": [{"name": s.name, "skipped_samples": s.skipped, "repeated_samples": s.repeated,
                     "skipped_tokens": None if s.skipped is None else s.skipped * seq,
                     "repeated_tokens": None if s.repeated is None else s.repeated * seq,
                     "order_changed": s.skipped is None, "drawn_after_resume": s.drawn,
                     "drawn_before": s.drawn_before, "first_item": s.first} for s in rc.sources],
        "exposure": {e.name: e.to_json() for e in rc.exposures} if rc.exposures else None,
        "valid": None if rc.valid is None else {"drawn": rc.valid.drawn, "start_sample": rc.valid.start,
                                                "continued_sample": rc.valid.continued, "how": rc.valid.how,
                                                "sources": [asdict(v) for v in rc.valid.sources]},
        "test": None if rc.test is None else {"start_sample": 0, "samples": rc.test.samples, "how": rc.test.how},
        "counters_at_resume": rc.counters_at_resume, "findings": list(rc.findings), "notes": list(rc.notes),
        "clean": not rc.findings,
    }


def render(rc: ResumeCheck) -> str:
    j = to_json(rc)
    seq = rc.new.plan.seq_length
    lines = [f"resume-check: {j['checkpoint']} (iteration {j['iteration']}) resumed with train_batch_size "
             f"{j['old_train_batch_size']} -> {j['new_train_batch_size']} ({rc.semantics} semantics)",
             f"  {rc.old.consumed_how}",
             f"  resumed by {rc.who}: {rc.start.how}",
             ]
    if rc.valid is not None:
        lines.append(f"  validation loader: starts at sample {rc.valid.start} (the saved run's evaluations drew "
                     f"{rc.valid.drawn}): {rc.valid.how}")
        lines += [f"    {v.name:<22} drew {v.drawn_before}; the resumed evaluations draw {v.resumed} (continuing: "
                  f"{v.continued})" for v in rc.valid.sources]
    if rc.test is not None:
        lines.append(f"  test loader: {rc.test.how}")
    if rc.sources:
        lines.append(f"  {'source':<24} {'skipped':>10} {'repeated':>10} {'drawn after':>12}   (samples; input "
                     f"tokens = samples * seq_length {seq})")
    for s in rc.sources:
        if s.skipped is None or s.repeated is None:
            lines.append(f"  {s.name:<24} {'-':>10} {'-':>10} {s.drawn:>12}   (its index is rebuilt in another order)")
        else:
            lines.append(f"  {s.name:<24} {s.skipped:>10} {s.repeated:>10} {s.drawn:>12}   ({s.skipped * seq} / "
                         f"{s.repeated * seq} tokens)")
    lines += _exposure_lines(rc.exposures)
    lines += [f"  finding: {f}" for f in rc.findings] + [f"  note: {n}" for n in rc.notes]
    lines.append("  clean: the resume continues exactly" if not rc.findings else
                 f"  {len(rc.findings)} finding(s): exit 1")
    return "\n".join(lines)


def _exposure_lines(exposures: tuple[SourceExposure, ...]) -> list[str]:
    """Per source: tokens by times seen over the whole run, resumed against continued unchanged."""
    if not exposures:
        return []
    lines = ["  input tokens by times seen over the whole run (the audit's exposure of each train index): "
             "resumed | continued unchanged"]
    for e in exposures:
        if e.resumed is None or e.continued is None:
            lines.append(f"  {e.name:<24} not computed: {e.note}")
            continue
        top = max(max(e.resumed.tokens, default=0), max(e.continued.tokens, default=0))
        cells = ", ".join(f"{t}x {e.resumed.tokens.get(t, 0)} | {e.continued.tokens.get(t, 0)}" for t in range(top + 1))
        lines.append(f"  {e.name:<24} {cells}" + (f"  ({e.note})" if e.note else ""))
    return lines


def register(sub: Any) -> None:
    p = sub.add_parser(
        "resume-check", help="what a resume with a changed config skips or repeats (NeoX, Megatron-LM)",
        description="Before resuming from a checkpoint with another batch, blend, seq_length, train_iters or world: "
        "where the resumed run restarts in each source, which samples it skips or trains again, and how evaluation "
        "resumes. The checkpoint (or the run's neox_epoch.jsonl) comes first, then the new run: NeoX config files "
        "or a pasted Megatron-LM command line.",
        **examples("neox-epoch resume-check checkpoints/ new.yml local_setup.yml --world-size 8   # GPT-NeoX",
                   "neox-epoch resume-check logs/neox_epoch.jsonl new.yml --iteration 2000       # from the run log",
                   "neox-epoch resume-check checkpoints/ pretrain_gpt.py --data-path data/web "
                   "--micro-batch-size 2 ...   # Megatron-LM"))
    p.add_argument("checkpoint", help="the checkpoint the run will load: its save directory (with 'latest' or "
                   "latest_checkpointed_iteration.txt) or a tag; or, for a NeoX run with the plugin or a megatron-core run "
                   "with the live counters, its neox_epoch.jsonl (or the directory holding it): each checkpoint is "
                   "recorded there")
    p.add_argument("--iteration", type=int, help="with a JSONL: the iteration of the checkpoint the resume loads "
                   "(default: the last one recorded)")
    p.add_argument("configs", nargs="*", help="the NeoX config files the run resumes with, or its Megatron-LM "
                   "command line (pretrain_gpt.py --data-path ...)")
    p.add_argument("--world-size", type=int, help="GPUs the resumed run uses (else the config's global_num_gpus or "
                   "hostfile, as NeoX counts them; for Megatron-LM its own --world-size)")
    p.add_argument("--cache", help="megatron-core runs with the live counters (a DeepSpeed checkpoint resumed with "
                   "its DeepSpeed config): the run's path_to_cache, whose blend gives each source's draws")
    p.add_argument("--framework-version", help="Megatron-LM checkpoints: the megatron-core version to mirror")
    p.add_argument("--force-version", action="store_true", help="plan an unverified megatron-core version")
    p.add_argument("--exposure", action="store_true", help="count each source's input tokens by times seen over the "
                   "whole run, resumed and continued unchanged, with the audit's exposure computation (GPT-NeoX: its "
                   "train index files; Megatron-LM: the orders megatron-core builds; megatron-core: needs --cache)")
    p.add_argument("--json", action="store_true", help="one JSON object (keys in the README)")
    p.set_defaults(func=run, accepts_extra=True)


def _megatron_tokens(args: argparse.Namespace) -> list[str] | None:
    """The Megatron-LM command line after the checkpoint (neox-epoch's own options removed), if it is one."""
    from neox_epoch.plan.from_megatron import is_megatron_argv, megatron_argv

    raw = list(getattr(args, "raw_argv", []) or [])
    tokens = raw[raw.index("resume-check") + 1:] if "resume-check" in raw else raw
    if args.checkpoint in tokens:
        tokens.remove(args.checkpoint)
    return megatron_argv(tokens) if is_megatron_argv(tokens) else None


def run(args: argparse.Namespace) -> int:
    tokens = _megatron_tokens(args)
    if tokens is None:
        if args.extra or not args.configs:
            raise ConfigError(f"resume-check: {' '.join(args.extra) or 'no config'}: expected NeoX config files "
                              "(or a Megatron-LM command line with a Megatron-LM checkpoint)")
        for path in args.configs:
            if not glob.glob(path) and not os.path.exists(path):
                raise ConfigError(f"{path}: config file not found")
    if args.iteration is not None and not is_run_log(args.checkpoint):
        raise ConfigError(f"--iteration {args.iteration}: only with a run's neox_epoch.jsonl; a checkpoint "
                          "directory resumes from its 'latest' (or give the global_stepN tag itself)")
    records = checkpoint_records(log_file(args.checkpoint)) if is_run_log(args.checkpoint) else None
    if records is not None:  # a run's JSONL: the live counters' records make it a megatron-core run's
        from neox_epoch.resume.mcore import checkpoint_from_log

        ckpt = (checkpoint_from_log(log_file(args.checkpoint), records, args.iteration)
                or Checkpoint("neox", args.checkpoint, 0))
    else:
        ckpt = read_checkpoint(args.checkpoint)
    wanted = {"megatron": "a Megatron-LM checkpoint; give its Megatron-LM command line (--data-path ...)",
              "megatron-core": "a megatron-core run with neox-epoch's counters (DeepSpeed checkpoint); give the one "
                               "DeepSpeed config (JSON) it resumes with, and --cache for per-source draws",
              "neox": "a GPT-NeoX checkpoint; give NeoX config files"}[ckpt.framework]
    if (tokens is not None) != (ckpt.framework == "megatron") or (ckpt.framework == "megatron-core" and (
            len(args.configs) != 1 or args.exposure and args.cache is None)):
        raise ConfigError(f"{args.checkpoint}: {wanted} for the resumed run" + (
            " (--exposure needs --cache)" if args.exposure and ckpt.framework == "megatron-core" else ""))
    if args.cache is not None and ckpt.framework != "megatron-core":
        raise ConfigError(f"--cache {args.cache}: only for a megatron-core run's DeepSpeed checkpoint with the live "
                          f"counters; {args.checkpoint} is {wanted.split(';')[0]}")
    if ckpt.framework == "megatron-core":
        from neox_epoch.resume.mcore import check as mcore_check

        rc = mcore_check(ckpt, args.configs[0], args.world_size, args.cache, args.exposure)
    elif tokens is not None:
        from neox_epoch.plan.cli import mcore_version
        from neox_epoch.resume.megatron import check as megatron_check

        rc = megatron_check(ckpt, tokens, mcore_version(args), args.exposure)
    else:
        rc = check(args.checkpoint, list(args.configs), args.world_size, args.exposure, args.iteration, records)
    print(json.dumps(to_json(rc), indent=1) if args.json else render(rc))
    return 1 if rc.findings else 0
