"""What a resume-check is about, for every framework: the saved run (OLD), the resumed run (NEW), what the saved run
built, per source the samples skipped and repeated, and the findings shared by the NeoX, Megatron-LM and
megatron-core checkers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from neox_epoch.audit.exposure import ExposureReport
from neox_epoch.formats.checkpoint import Checkpoint
from neox_epoch.neox.resume_state import ResumeState
from neox_epoch.plan.model import Plan, SourcePlan
from neox_epoch.semantics import TrainBuild, blend
from neox_epoch.semantics.loader import (
    EndTest,
    LoaderShape,
    ResumeStart,
    Span,
    ValidSource,
    ValidStart,
)


@dataclass(frozen=True)
class SourceExposure:
    """One source's token exposure over the whole run, as resumed and as continued unchanged."""

    name: str
    index: str | None
    """The train index (NeoX's file stem) the resumed run draws from; None when not computed."""
    resumed: ExposureReport | None
    """The saved run's draws plus the resumed run's (the skip or repeat included)."""
    continued: ExposureReport | None
    """The saved run's draws plus as many more (as many input tokens) continuing exactly where it stopped."""
    note: str = ""
    """Why there are no counts, or what the audit said about the index."""

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "resumed": self.resumed.to_json() if self.resumed else None,
            "continued": self.continued.to_json() if self.continued else None,
            "note": self.note,
        }


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
    staged: Any = None
    """A staged run's :class:`~neox_epoch.plan.staged.StagedRun` (None without stages): its draw order replaces the
    greedy blend's."""


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


def _counts(weights: tuple[float, ...] | None, positions: list[int]) -> list[list[int]]:
    """Samples drawn from each source by the first ``p`` samples, for each ``p`` of ``positions`` (the blend's
    greedy, in one pass; or the one source)."""
    positions = [max(0, p) for p in positions]
    if weights is None:
        return [[p] for p in positions]
    return [list(c) for c in blend.greedy_draws(list(weights), positions).counts]


def deltas(
    new: NewRun, saved: SavedBuild | None, consumed: int, start: ResumeStart, iterations_left: int
) -> tuple[SourceDelta, ...]:
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
        rows.append(
            SourceDelta(
                name,
                None if reordered else max(0, first[k] - before[k]),
                None if reordered else repeated,
                last[k] - first[k],
                before[k],
                first[k],
            )
        )
    return tuple(rows)


def blend_findings(
    new: NewRun, saved: SavedBuild | None, consumed: int, start: ResumeStart, iterations_left: int
) -> list[str]:
    """With another blend the resume moves in each source's index: samples skipped, or drawn again by the
    resumed run's ``iterations_left`` iterations."""
    if saved is None or not blend_changed(saved, new) or len(saved.weights or ()) != len(new.weights or ()):
        return []
    out = []
    for d in deltas(new, saved, consumed, start, iterations_left):
        if d.skipped:
            out.append(
                f"skip: {d.name}: {d.skipped} of its samples the saved run had not reached are never drawn "
                "(the new blend starts further into it)"
            )
        if d.repeated:
            out.append(
                f"repeat: {d.name}: {d.repeated} of its samples the saved run drew are drawn again (the new "
                "blend starts earlier in it)"
            )
    return out


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
        out.append(
            f"seq-length-changed: seq_length {saved.seq_length} -> {new.plan.seq_length}: the documents "
            "are cut into other samples (new index files), so positions before and after the resume are "
            "other token spans (--exposure counts each token's times seen over the whole run)"
        )
    state = old.state
    if (
        new.hooks
        and state is not None
        and (new.shape.train_batch_size, new.shape.loader_batch) != (state.train_batch_size, state.loader_batch)
    ):
        return out  # the hooks rebuild the saved indices and blend
    if blend_changed(saved, new):
        old_w, new_w = saved.weights or (), new.weights or ()  # both given: blend_changed compared them
        out.append(
            f"blend-changed: the blend's weights {[round(w, 6) for w in new_w]} differ from the saved "
            f"run's {[round(w, 6) for w in old_w]}: from the resume on, positions draw other "
            "sources than the saved run's"
        )
    for name, built in new.builds.items():
        was = saved.builds.get(name)
        if was is not None and (
            was.epochs != built.epochs or saved.separation and was.separate_final_epoch != built.separate_final_epoch
        ):

            def epochs(b: TrainBuild) -> str:
                return f"{b.epochs} epochs" + (" (the last shuffled on its own)" if b.separate_final_epoch else "")

            out.append(
                f"orders-change: {name}: {epochs(built)} for num_samples {built.num_samples} now, "
                f"{epochs(was)} for {was.num_samples} in the saved run: a new index, shuffled anew, so "
                "positions before and after the resume name different samples"
            )
    return out


def train_builds(train: Sequence[SourcePlan], blended: bool, separation: bool = False) -> dict[str, TrainBuild]:
    """Per train dataset name (``train``, or ``train_0``, ``train_1``, ... in a blend), how the plan builds it;
    ``separation``: record whether the final epoch is shuffled on its own (megatron-core's builds say it)."""
    return {
        (f"train_{k}" if blended else "train"): TrainBuild(
            s.samples_requested, s.epochs_built, s.samples_built, s.separate_final_epoch and separation
        )
        for k, s in enumerate(train)
    }
