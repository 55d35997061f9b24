"""What the page shows, computed from the launches: per-source pass curves, pass boundaries, resumes with what
changed, early stops, and the numbers with their arithmetic. Pure functions over :class:`RunLog`."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from neox_epoch.errors import ConfigError
from neox_epoch.run_report.log import Launch, Missing, RunLog, Snapshot
from neox_epoch.semantics.passes import how as passes_how
from neox_epoch.semantics.passes import passes as passes_of

#: plan values compared between two launches when the resume event does not say what changed
PLAN_KEYS = ("train_batch_size", "train_iters", "seq_length", "mode", "separate_epochs", "weights")
#: per-source plan values compared between two launches
SOURCE_KEYS = ("samples_per_epoch", "tokens", "target_passes")


@dataclass(frozen=True)
class Point:
    launch: int
    """1-based launch number."""
    iteration: int
    samples: int
    passes: float
    pass_number: int


@dataclass(frozen=True)
class Boundary:
    launch: int
    iteration: int
    pass_number: int
    sample: int
    """Blend position (0-based) of the pass's first sample."""


@dataclass(frozen=True)
class SourceSeries:
    name: str
    prefix: str | None
    samples_per_epoch: int
    """The last launch's (the unit of passes)."""
    tokens: int | None
    planned_passes: float | None
    """What the last launch planned (target passes in exact mode, else the planned passes)."""
    points: tuple[Point, ...]
    boundaries: tuple[Boundary, ...]

    @property
    def last(self) -> Point | None:
        return self.points[-1] if self.points else None


@dataclass(frozen=True)
class Change:
    key: str
    old: Any
    new: Any

    def label(self) -> str:
        return f"{self.key} {_show(self.old)} \u2192 {_show(self.new)}"


@dataclass(frozen=True)
class Jump:
    """Samples of a source just before and just after a resume, at the same iteration, that differ."""

    source: str
    before: int
    after: int
    pass_before: int
    pass_after: int


@dataclass(frozen=True)
class ResumeMark:
    launch: int
    iteration: int
    changes: tuple[Change, ...]
    changes_from: str
    """"record": the resume event's "changed"; "plans": the two launches' plan events compared."""
    previous_iteration: int | None
    """Where the previous launch's record ends (None: no earlier launch in the log)."""
    jumps: tuple[Jump, ...]
    consumed_samples: int | None
    restart: bool = False
    """A later launch without a resume record: it started again from iteration 0."""

    def label(self) -> str:
        what = ", ".join(c.label() for c in self.changes) if self.changes else "nothing changed"
        return f"{'restart from' if self.restart else 'resume @'} {self.iteration}: {what}"

    def notes(self) -> list[str]:
        out = []
        if self.previous_iteration is not None and self.previous_iteration > self.iteration:
            out.append(
                f"the previous launch reached iteration {self.previous_iteration}; this one resumes at "
                f"{self.iteration}: iterations {self.iteration + 1}..{self.previous_iteration} are trained "
                "again (their samples repeated)"
            )
        if self.previous_iteration is not None and self.previous_iteration < self.iteration:
            out.append(
                f"the previous launch's record ends at iteration {self.previous_iteration}; this one resumes "
                f"at {self.iteration} (records of iterations in between are missing)"
            )
        for j in self.jumps:
            out.append(
                f"{j.source}: the counters say {j.before} samples before the resume and {j.after} after it, "
                f"at the same iteration {self.iteration} (the resumed counters assume this launch's batch "
                "from iteration 0)"
            )
            if j.pass_after > j.pass_before:
                out.append(
                    f"{j.source}: {_passes(j.pass_before + 1, j.pass_after)} began inside that jump (pass "
                    f"{j.pass_before} before, {j.pass_after} after): no pass_start record marks it"
                )
        return out


@dataclass(frozen=True)
class StopMark:
    launch: int
    iteration: int
    train_iters: int
    kind: str
    """"stopped early" (final complete=false) or "no final record" (crash, kill, or still running)."""

    def label(self) -> str:
        if self.kind == "stopped early":
            return f"stopped early @ {self.iteration} of {self.train_iters}"
        return f"no final record after {self.iteration} (of {self.train_iters})"


@dataclass(frozen=True)
class LaunchRow:
    number: int
    file: str
    line: int
    start: int
    end: int | None
    train_iters: int
    train_batch_size: int
    seq_length: int | None
    mode: str | None
    status: str
    """"complete", "stopped early" or "no final record"."""
    stamp: tuple[int, str | None] = (0, None)
    """(schema, neox-epoch version) of the launch's plan record (:attr:`log.Launch.stamp`)."""


@dataclass(frozen=True)
class Series:
    files: tuple[str, ...]
    launches: tuple[LaunchRow, ...]
    sources: tuple[SourceSeries, ...]
    resumes: tuple[ResumeMark, ...]
    stops: tuple[StopMark, ...]
    seq_length: int | None
    train_iters: int
    """The last launch's train_iters."""
    last_iteration: int
    complete: bool
    stages: dict[str, Any] | None = None
    """The last launch's stage plan (None without stages)."""
    stage_starts: tuple[tuple[int, int, str], ...] = ()
    """(iteration, stage, name) of every stage_start record, launches in order."""
    missing: tuple[Missing, ...] = ()
    """Where the log lacks records (log_gap records, torn lines)."""


def _show(v: Any) -> str:
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_show(x) for x in v) + "]"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _passes(first: int, last: int) -> str:
    return f"pass {first}" if first == last else f"passes {first}-{last}"


def _snapshots(launch: Launch) -> list[Snapshot]:
    """The launch's records in order: resume, counters, final (one per iteration: the last wins)."""
    snaps = ([launch.resume.state] if launch.resume else []) + list(launch.counters)
    if launch.final is not None:
        snaps.append(launch.final.state)
    by_iter: dict[int, Snapshot] = {}
    for s in snaps:
        by_iter[s.iteration] = s
    return [by_iter[k] for k in sorted(by_iter)]


def last_snapshot(launch: Launch) -> Snapshot | None:
    snaps = _snapshots(launch)
    return snaps[-1] if snaps else None


def plan_changes(old: Launch, new: Launch) -> list[Change]:
    """What differs between two launches' plans (run keys, the source list, per-source keys)."""
    out = [Change(k, getattr(old, k), getattr(new, k)) for k in PLAN_KEYS if getattr(old, k) != getattr(new, k)]
    old_names, new_names = [s.name for s in old.sources], [s.name for s in new.sources]
    if old_names != new_names:
        out.append(Change("sources", old_names, new_names))
    for s in new.sources:
        o = old.source(s.name)
        if o is None:
            continue
        for k in SOURCE_KEYS:
            if getattr(o, k) != getattr(s, k):
                out.append(Change(f"{s.name}.{k}", getattr(o, k), getattr(s, k)))
    return out


def _resume(number: int, launch: Launch, previous: Launch | None) -> ResumeMark | None:
    r = launch.resume
    if r is None:
        if previous is None:
            return None
        # a later launch that did not resume: a restart from scratch (iteration 0) - marked like a resume
        changes = tuple(plan_changes(previous, launch))
        prev = last_snapshot(previous)
        return ResumeMark(number, 0, changes, "plans", prev.iteration if prev else None, (), None, restart=True)
    if r.changed is not None:
        changes, origin = tuple(Change(k, o, n) for k, o, n in r.changed), "record"
    else:
        changes, origin = (tuple(plan_changes(previous, launch)) if previous else ()), "plans"
    prev = last_snapshot(previous) if previous else None
    jumps: list[Jump] = []
    if prev is not None and prev.iteration == r.iteration:
        for name, st in r.state.sources:
            before = prev.get(name)
            if before is not None and before.samples != st.samples:
                jumps.append(Jump(name, before.samples, st.samples, before.pass_number, st.pass_number))
    return ResumeMark(
        number, r.iteration, changes, origin, prev.iteration if prev else None, tuple(jumps), r.consumed_samples
    )


def compute(run: RunLog) -> Series:
    """Curves, boundaries, resumes and stops of the whole run (every launch, in order)."""
    launches = run.launches
    last = launches[-1]
    names: list[str] = []
    for la in launches:
        names += [s.name for s in la.sources if s.name not in names]
    points: dict[str, list[Point]] = {n: [] for n in names}
    bounds: dict[str, list[Boundary]] = {n: [] for n in names}
    rows, resumes, stops = [], [], []
    for k, la in enumerate(launches, start=1):
        prev = launches[k - 2] if k > 1 else None
        mark = _resume(k, la, prev)
        if mark is not None:
            resumes.append(mark)
        snaps = _snapshots(la)
        start = la.resume.iteration if la.resume else 0
        if la.resume is None:  # from scratch: the curve starts at 0 samples
            for s in la.sources:
                points[s.name].append(Point(k, 0, 0, 0.0, 1))
        for snap in snaps:
            for name, st in snap.sources:
                points[name].append(Point(k, snap.iteration, st.samples, st.passes, st.pass_number))
        for ps in la.pass_starts:
            bounds[ps.source].append(Boundary(k, ps.iteration, ps.pass_number, ps.sample))
        end = snaps[-1].iteration if snaps else None
        if la.final is not None:
            status = "complete" if la.final.complete else "stopped early"
        else:
            status = "no final record"
        if status != "complete":
            stops.append(StopMark(k, end if end is not None else start, la.train_iters, status))
        rows.append(
            LaunchRow(
                k,
                la.file,
                la.line,
                start,
                end,
                la.train_iters,
                la.train_batch_size,
                la.seq_length,
                la.mode,
                status,
                la.stamp,
            )
        )
    sources = []
    for n in names:
        plan_src = next(s for la in reversed(launches) for s in la.sources if s.name == n)
        planned = plan_src.target_passes if plan_src.target_passes is not None else plan_src.passes
        if last.final is not None:
            fs = last.final.state.get(n)
            if fs is not None and fs.planned_passes is not None:
                planned = fs.planned_passes
        sources.append(
            SourceSeries(
                n,
                plan_src.prefix,
                plan_src.samples_per_epoch,
                plan_src.tokens,
                planned,
                tuple(points[n]),
                tuple(bounds[n]),
            )
        )
    end_snap = last_snapshot(last)
    last_iteration = end_snap.iteration if end_snap else 0
    return Series(
        run.files,
        tuple(rows),
        tuple(sources),
        tuple(resumes),
        tuple(stops),
        last.seq_length,
        last.train_iters,
        last_iteration,
        bool(last.final and last.final.complete),
        last.stages,
        tuple(x for launch in run.launches for x in launch.stage_starts),
        run.missing,
    )


# ---------------------------------------------------------------------------------------------------------
# the numbers with their arithmetic


@dataclass(frozen=True)
class NumberRow:
    """One source at the end of the record: every number with where it comes from."""

    source: str
    iteration: int
    samples: int
    samples_per_epoch: int
    passes: float
    passes_logged: float
    planned_passes: float | None
    tokens: int | None
    input_tokens: int | None
    boundaries: tuple[Boundary, ...]
    unmarked: tuple[tuple[int, int, int], ...] = ()
    """``(first pass, last pass, resume iteration)``: passes that began inside a resume's jump (no pass_start)."""
    seq_length: int | None = None

    def boundary_text(self) -> str:
        parts = [f"pass {b.pass_number} @ {b.iteration:,d}" for b in self.boundaries]
        parts += [f"{_passes(a, b)} inside the jump at the resume @ {it:,d}" for a, b, it in self.unmarked]
        return ", ".join(parts) or "-"

    def arithmetic(self) -> str:
        text = f"{passes_how(self.samples, self.samples_per_epoch, self.tokens, self.seq_length)} = {self.passes:.6f}"
        if abs(round(self.passes, 6) - self.passes_logged) > 5e-7:
            text += f" (the log says {self.passes_logged:.6f}: it was counted with another samples_per_epoch)"
        return text


def numbers(series: Series) -> list[NumberRow]:
    out = []
    for s in series.sources:
        p = s.last
        if p is None:
            continue
        passes = passes_of(p.samples, s.samples_per_epoch, s.tokens, series.seq_length)
        if passes is None:
            raise ConfigError(
                f"{s.name}: samples_per_epoch is 0 (shorter than one sample) and the run log records no "
                "tokens or seq_length for it: its passes cannot be counted; expected the plan's tokens "
                "in the log: rerun with this neox-epoch's hooks"
            )
        inputs = p.samples * series.seq_length if series.seq_length else None
        unmarked = tuple(
            (j.pass_before + 1, j.pass_after, r.iteration)
            for r in series.resumes
            for j in r.jumps
            if j.source == s.name and j.pass_after > j.pass_before
        )
        out.append(
            NumberRow(
                s.name,
                p.iteration,
                p.samples,
                s.samples_per_epoch,
                passes,
                p.passes,
                s.planned_passes,
                s.tokens,
                inputs,
                s.boundaries,
                unmarked,
                series.seq_length,
            )
        )
    return out


def short_path(path: str) -> str:
    """A file named by its directory's name and its own (the page does not carry machine paths)."""
    return os.path.join(os.path.basename(os.path.dirname(path)), os.path.basename(path))
