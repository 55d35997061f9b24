"""Data stages: the blend changes at planned iterations and every source continues where it stopped.

A stage plan is an ordered list of stages. Each stage names per-source pass targets for that stage
(``{"a": 0.5, "b": 1}``, fractional allowed) or weights with a length (``weights`` and ``iterations`` or
``samples``). Given each source's samples per epoch (as the framework builds them) and the global batch
size, :func:`plan_stages` computes per stage and source how many samples are drawn and where they start
in that source's own order: stage k draws right after what stages 1..k-1 drew, and a source wraps to a
new pass only once every sample of the current pass was drawn. Stage boundaries fall on whole global
batches, rounded so that no source is drawn past its total target (a stage is rounded up only onto sources
a later stage draws again, else down: the shortfall is a named remainder in the stage's ``notes``).
``max_passes`` refuses targets above a cap before anything is built.

Pure: numpy-free arithmetic on integers and floats; no torch, no framework.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from neox_epoch.errors import ConfigError, PlanError, did_you_mean
from neox_epoch.formats.stage_config import Stage, StageDecay, StagesConfig, count

__all__ = [
    "SourceDraw",
    "Stage",
    "StageDecay",
    "StageResult",
    "StagesConfig",
    "StagesPlan",
    "plan_stages",
    "refuse_over_cap",
]


@dataclass(frozen=True, slots=True)
class SourceDraw:
    """What one stage draws from one source, in that source's own order."""

    source: str
    wanted: float
    """Samples the stage's target asks for (fractional; includes what earlier stages' rounding owes)."""
    draws: int
    """Samples drawn in this stage."""
    start: int
    """Draws of this source before the stage: the stage draws positions start .. start + draws - 1."""
    samples_per_epoch: int

    @property
    def start_pass(self) -> int:
        """0-based pass the stage's first draw belongs to."""
        return self.start // self.samples_per_epoch

    @property
    def start_offset(self) -> int:
        """Position of the stage's first draw in that pass's order."""
        return self.start % self.samples_per_epoch

    @property
    def cumulative_draws(self) -> int:
        return self.start + self.draws

    @property
    def cumulative_passes(self) -> float:
        return self.cumulative_draws / self.samples_per_epoch


@dataclass(frozen=True, slots=True)
class StageResult:
    """One planned stage: its boundary in iterations and per-source draws."""

    name: str
    first_iteration: int
    """Iterations trained before this stage starts (the stage's first iteration index, 0-based)."""
    iterations: int
    samples: int
    draws: tuple[SourceDraw, ...]
    notes: tuple[str, ...] = field(default=())
    """What could not be exact, one sentence each."""

    @property
    def end_iteration(self) -> int:
        return self.first_iteration + self.iterations

    def draw_of(self, source: str) -> SourceDraw | None:
        return next((d for d in self.draws if d.source == source), None)


@dataclass(frozen=True, slots=True)
class StagesPlan:
    """The whole plan: stages, one train_iters, cumulative passes per source."""

    stages: tuple[StageResult, ...]
    global_batch_size: int
    samples_per_epoch: Mapping[str, int]
    targets: Mapping[str, int] = field(default_factory=dict)
    """Each source's total target in whole samples: ``floor(sum of its stages' passes x samples per epoch)``."""

    @property
    def train_iters(self) -> int:
        return self.stages[-1].end_iteration

    @property
    def train_samples(self) -> int:
        return self.train_iters * self.global_batch_size

    @property
    def boundaries(self) -> tuple[int, ...]:
        """Iterations at which stage 2, 3, ... start."""
        return tuple(stage.first_iteration for stage in self.stages[1:])

    def total_draws(self) -> dict[str, int]:
        totals = dict.fromkeys(self.samples_per_epoch, 0)
        for stage in self.stages:
            for draw in stage.draws:
                totals[draw.source] += draw.draws
        return totals

    def cumulative_passes(self) -> dict[str, float]:
        return {s: n / self.samples_per_epoch[s] for s, n in self.total_draws().items()}

    def passes_built(self) -> dict[str, int]:
        """Passes to build per source: the passes its total target needs, ``ceil(target / samples per epoch)``
        (the target in whole samples), or more if its draws need more (a weights stage's split); a last stage
        rounded down to whole batches may leave the last pass short, never unbuilt."""
        spe, drawn = self.samples_per_epoch, self.total_draws()
        return {s: -(-max(self.targets.get(s, 0), drawn[s]) // spe[s]) for s in spe}

    def stage_at(self, iteration: int) -> StageResult:
        """The stage that trains iteration ``iteration`` (0-based); the last one past the end."""
        for stage in self.stages:
            if iteration < stage.end_iteration:
                return stage
        return self.stages[-1]


def _largest_remainder(total: int, wanted: dict[str, float]) -> dict[str, int]:
    """Split ``total`` into integers proportional to ``wanted``; leftovers to the largest fractions, then
    to the earliest source (deterministic)."""
    mass = sum(wanted.values())
    exact = {s: total * w / mass for s, w in wanted.items()}
    out = {s: math.floor(x + 1e-9) for s, x in exact.items()}
    order = sorted(wanted, key=lambda s: -(exact[s] - out[s]))
    for s in order[: total - sum(out.values())]:
        out[s] += 1
    return out


def _check_sources(config: StagesConfig, samples_per_epoch: Mapping[str, int]) -> None:
    for stage in config.stages:
        for source in stage.sources:
            if source not in samples_per_epoch:
                raise ConfigError(
                    f"stage {stage.name!r}: unknown source {source!r}{did_you_mean(source, list(samples_per_epoch))}; "
                    f"sources with samples: {', '.join(samples_per_epoch)}"
                )
    for source, n in samples_per_epoch.items():
        count(f"samples per epoch of source {source!r}", n)


def _check_cap(config: StagesConfig, targets: dict[str, list[tuple[str, float]]]) -> None:
    """Refuse a source whose summed pass targets exceed its cap."""
    for source, per_stage in targets.items():
        cap = config.cap_of(source)
        total = sum(p for _, p in per_stage)
        if cap is None or total <= cap + 1e-9:
            continue
        detail = ", ".join(f"{name}: {p:g}" for name, p in per_stage if p)
        raise PlanError(
            f"source {source!r}: the stages ask {total:g} passes ({detail}), over max_passes {cap:g}; "
            "lower its pass targets (or weights) or raise max_passes (for this source only: "
            f"max_passes: {{{source}: {total:g}}})"
        )


def refuse_over_cap(max_passes: float | Mapping[str, float] | None, targets: Mapping[str, float]) -> None:
    """``max_passes`` with plain ``epochs`` (no stages): refuse a source's target above its cap, before anything
    is built."""
    for source, passes in targets.items():
        cap = max_passes.get(source) if isinstance(max_passes, Mapping) else max_passes
        if cap is not None and passes > float(cap) + 1e-9:
            raise PlanError(
                f"source {source!r}: epochs asks {passes:g} passes, over max_passes {cap:g}; lower its "
                f"epochs or raise max_passes (for this source only: max_passes: {{{source}: {passes:g}}})"
            )


def _stage_wanted(
    stage: Stage, samples_per_epoch: Mapping[str, int], batch: int
) -> tuple[dict[str, float], int | None]:
    """Per-source wanted samples and, for a weights stage, its length in samples (whole batches)."""
    if stage.passes is not None:
        return {s: p * samples_per_epoch[s] for s, p in stage.passes.items()}, None
    assert stage.weights is not None
    length = stage.iterations * batch if stage.iterations is not None else math.ceil(stage.samples / batch) * batch  # type: ignore[operator]
    mass = sum(stage.weights.values())
    return {s: length * w / mass for s, w in stage.weights.items()}, length


def _caps(config: StagesConfig, samples_per_epoch: Mapping[str, int], batch: int) -> dict[str, int]:
    """Each source's total target in whole samples (the sum of what every stage wants of it, rounded down)."""
    total = dict.fromkeys(samples_per_epoch, 0.0)
    for stage in config.stages:
        for s, w in _stage_wanted(stage, samples_per_epoch, batch)[0].items():
            total[s] += w
    return {s: math.floor(t + 1e-9) for s, t in total.items()}


def _fit(length: int, due: dict[str, float], room: dict[str, int]) -> dict[str, int]:
    """``length`` samples split over ``due`` (largest remainder), none above its ``room``: a source's excess goes
    to the sources furthest below their share that still have room (the caller checks the room suffices)."""
    counts = _largest_remainder(length, due) if length else dict.fromkeys(due, 0)
    spare = 0
    for s in counts:
        if counts[s] > room[s]:
            spare += counts[s] - room[s]
            counts[s] = room[s]
    for s in sorted(due, key=lambda s: (-(due[s] - counts[s]), list(due).index(s))):
        give = min(spare, room[s] - counts[s])
        counts[s] += give
        spare -= give
    return counts


def _closest(length: int, due: dict[str, float], room: dict[str, int]) -> dict[str, int]:
    """``length`` samples split over ``due`` so that the largest ``|draws - due|`` is as small as it can be, none
    above its ``room`` (the caller checks ``sum(room) >= length``): from each source's whole part, one sample at a
    time to (or from) the source whose deviation grows least; ties to the larger share, then the earlier source."""
    order = {s: k for k, s in enumerate(due)}
    counts = {s: min(room[s], max(0, math.floor(due[s] + 1e-9))) for s in due}
    rest = length - sum(counts.values())
    step = 1 if rest > 0 else -1
    heap = [_closest_key(s, counts[s], due[s], order[s], step) for s in due if _movable(counts[s], room[s], step)]
    heapq.heapify(heap)
    while rest:
        *_, s = heapq.heappop(heap)
        counts[s] += step
        rest -= step
        if _movable(counts[s], room[s], step):
            heapq.heappush(heap, _closest_key(s, counts[s], due[s], order[s], step))
    return counts


def _movable(n: int, room: int, step: int) -> bool:
    return n < room if step > 0 else n > 0


def _closest_key(s: str, n: int, due: float, index: int, step: int) -> tuple[float, float, int, str]:
    """Heap key of moving one sample of ``s``: the deviation that move leaves (smallest first)."""
    return (abs(n + step - due), -due, index, s)


def _within(counts: dict[str, int], due: dict[str, float], batch: int) -> bool:
    return all(abs(counts[s] - due[s]) < batch for s in due)


def _split(length: int, due: dict[str, float], room: dict[str, int], batch: int) -> dict[str, int]:
    """The proportional split (largest remainder) when every source is within one batch of its due, else the
    closest split."""
    counts = _fit(length, due, room)
    return counts if _within(counts, due, batch) else _closest(length, due, room)


def _passes_stage(due: dict[str, float], room: dict[str, int], batch: int, last: bool) -> tuple[int, dict[str, int]]:
    """A passes stage's length (whole batches) and draws: rounded up when that pushes no source past its total
    target and keeps every source within one batch of its due (the extra goes to sources that draw again later;
    the later stage owes that much less), else down (each source from its whole part down to the length: under one
    batch below its due, so the carried shortfall stays under one batch too)."""
    want = sum(due.values())
    room = {s: room[s] if due[s] > 0 else 0 for s in due}
    up = math.ceil(round(want, 9) / batch) * batch
    if not last and up <= sum(room.values()):
        counts = _split(up, due, room, batch)
        if _within(counts, due, batch):
            return up, counts
    near = {s: min(room[s], math.ceil(due[s] - 1e-9)) for s in due}
    length = math.floor(round(min(want, sum(near.values())), 9) / batch) * batch
    return length, _split(length, due, near, batch)


def _rounding_notes(name: str, due: dict[str, float], counts: dict[str, int], batch: int) -> list[str]:
    want, length = sum(due.values()), sum(counts.values())
    notes: list[str] = []
    if length == 0 and want > 1e-9:
        notes.append(
            f"remainder: nothing drawn in stage {name!r}: its {want:g} samples are under one global batch "
            f"of {batch} that no source may exceed its passes for"
        )
    elif length == 0:
        notes.append("nothing due: earlier stages' rounding to whole batches already drew this stage's targets")
    elif length > want + 1e-9:
        notes.append(
            f"{want:g} samples wanted, {length} drawn ({length // batch} whole batches of {batch}; rounded up, "
            "the extra drawn from sources a later stage draws again)"
        )
    elif length < want - 1e-9:
        short = ", ".join(f"{s}: {due[s] - counts[s]:g}" for s in due if due[s] - counts[s] > 1e-9)
        notes.append(
            f"remainder: {want:g} samples wanted, {length} drawn ({length // batch} whole batches of {batch}; "
            f"rounded down, no source may exceed its passes): not drawn here {short}"
        )
    return notes


def plan_stages(config: StagesConfig, samples_per_epoch: Mapping[str, int], global_batch_size: int) -> StagesPlan:
    """Plan every stage: per-source draws and start offsets, boundaries in whole batches, one train_iters.

    Passes stages: each source is owed ``cumulative target x samples per epoch`` minus what it has drawn,
    so rounding never drifts over stages. A stage is rounded up to whole global batches only when the extra
    samples can go to sources that draw again in a later stage (which then owe that much less); otherwise,
    and always for the last stage, it is rounded down and the shortfall is a named remainder (the stage's
    notes). No source is drawn past its total target. Weights stages split their length by largest remainder.
    Raises :class:`ConfigError` on unknown sources and :class:`PlanError` when a source's targets exceed
    ``max_passes`` (checked before any rounding).
    """
    batch = count("global_batch_size", global_batch_size)
    _check_sources(config, samples_per_epoch)
    targets: dict[str, list[tuple[str, float]]] = {s: [] for s in samples_per_epoch}
    for stage in config.stages:
        wanted, _ = _stage_wanted(stage, samples_per_epoch, batch)
        for s, w in wanted.items():
            targets[s].append((stage.name, w / samples_per_epoch[s]))
    _check_cap(config, targets)
    caps = _caps(config, samples_per_epoch, batch)

    drawn = dict.fromkeys(samples_per_epoch, 0)
    owed = dict.fromkeys(samples_per_epoch, 0.0)  # cumulative wanted samples so far
    results: list[StageResult] = []
    first = 0
    for k, stage in enumerate(config.stages):
        wanted, length = _stage_wanted(stage, samples_per_epoch, batch)
        notes: list[str] = []
        if stage.passes is not None:
            for s, w in wanted.items():
                owed[s] += w
            due = {s: max(0.0, owed[s] - drawn[s]) for s in wanted}
            room = {s: max(0, caps[s] - drawn[s]) for s in wanted}
            length, counts = _passes_stage(due, room, batch, k == len(config.stages) - 1)
            notes += _rounding_notes(stage.name, due, counts, batch)
        else:
            assert length is not None
            due = wanted
            counts = _largest_remainder(length, wanted)
            if stage.samples is not None and stage.samples != length:
                notes.append(
                    f"{stage.samples} samples asked, {length} drawn ({length // batch} whole batches of {batch})"
                )
            for s in wanted:
                owed[s] += counts[s]
        for s, n in counts.items():
            if abs(n - due[s]) > 1e-9:
                notes.append(f"{s}: {due[s]:g} samples due, {n} drawn")
        draws = tuple(
            SourceDraw(source=s, wanted=due[s], draws=counts[s], start=drawn[s], samples_per_epoch=samples_per_epoch[s])
            for s in wanted
        )
        for s, n in counts.items():
            drawn[s] += n
        results.append(StageResult(stage.name, first, length // batch, length, draws, tuple(notes)))
        first += length // batch
    return StagesPlan(tuple(results), batch, dict(samples_per_epoch), caps)
