"""Live per-source pass counters: O(1) work per training step.

Which source each of the first ``train_iters * train_batch_size`` samples comes from is fixed before
training starts: NeoX's blend is the greedy rule replayed exactly by :mod:`neox_epoch.semantics.blend`, and a
direct dataset (one source, or data_path + split) is drawn in order. So the per-source draw counts at
every logging iteration, and the iteration at which each source starts each pass, are computed once
(the greedy replay in C, about 6 ns per sample) and training only looks them up: a modulo and an
integer comparison per step, a table row per log interval.

After a checkpoint resume the counters start at the resumed iteration; records before it are not
repeated and markers already passed are not fired again.

The JSONL sink, the source and marker types, the record shapes and the scalar tags are framework-neutral
(:mod:`neox_epoch.formats.runlog`, shared with megatron-core's counters); the names stay importable from here.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from neox_epoch.formats.runlog import JSONL_NAME, JsonlSink, Marker, SourceCounter
from neox_epoch.semantics import blend

__all__ = ["JSONL_NAME", "JsonlSink", "Marker", "PassCounters", "SourceCounter", "counters_for"]

log = logging.getLogger("neox_epoch.neox")


@dataclass
class PassCounters:
    """Precomputed per-source draw counts at logging iterations, and pass-boundary markers."""

    sources: tuple[SourceCounter, ...]
    weights: tuple[float, ...] | None
    """Greedy blend weights (float64-normalized as NeoX's BlendableDataset); None: one direct dataset."""
    train_batch_size: int
    train_iters: int
    log_interval: int
    sink: JsonlSink = field(default_factory=lambda: JsonlSink(None))
    scalar: Callable[[str, float, int], None] | None = None
    """Writes one scalar (key, value, iteration) to TensorBoard/W&B, when NeoX has writers."""
    active: bool = True
    """False on ranks that do not log (everything becomes a no-op)."""
    sample_offset: int = 0
    """Samples drawn after iteration ``k`` are ``k * train_batch_size + sample_offset``: 0 unless the run resumed
    with another global batch (then the consumed samples at the resume minus resume iteration x new batch)."""
    draw_index: np.ndarray | None = None
    """A staged run: the source of every train sample, in draw order (replaces the greedy replay)."""
    stages: tuple[tuple[str, int, int], ...] = ()
    """A staged run: (name, first iteration, end iteration) of each stage."""
    _iters: np.ndarray = field(init=False, repr=False)
    _counts: np.ndarray = field(init=False, repr=False)
    markers: list[Marker] = field(init=False)
    _next: int = field(init=False, default=0)
    _next_stage: int = field(init=False, default=0)
    start_iteration: int = field(init=False, default=0)
    setup_seconds: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        t0 = time.perf_counter()
        if self.weights is not None and len(self.weights) != len(self.sources):
            raise ValueError(f"{len(self.weights)} weights for {len(self.sources)} sources")
        if self.weights is None and len(self.sources) != 1 and self.draw_index is None:
            raise ValueError("a direct dataset has exactly one source")
        li = max(1, int(self.log_interval))
        iters = sorted({*range(li, self.train_iters + 1, li), self.train_iters, 0})
        self._iters = np.asarray(iters, dtype=np.int64)
        marks = [(i, b + 1) for i, s in enumerate(self.sources) for b in s.boundaries]
        n = len(self.sources)
        tbs = self.train_batch_size
        off = int(self.sample_offset)
        if self.draw_index is not None:
            di = np.asarray(self.draw_index, dtype=np.int64)
            self._counts = np.asarray(
                [np.bincount(di[: max(0, int(k) * tbs + off)], minlength=n) for k in iters], dtype=np.int64
            ).reshape(len(iters), n)
            where = [np.flatnonzero(di == i) for i in range(n)]
            positions = [int(where[i][k - 1]) if k - 1 < where[i].shape[0] else -1 for i, k in marks]
        elif self.weights is None:
            self._counts = np.maximum(self._iters * tbs + off, 0).reshape(-1, 1)
            positions = [k - 1 for _, k in marks]
        else:
            draws = blend.greedy_draws(list(self.weights), [max(0, int(k) * tbs + off) for k in iters], marks)
            self._counts = np.asarray(draws.counts, dtype=np.int64).reshape(len(iters), n)
            positions = list(draws.mark_positions)
        self.markers = sorted(
            (
                Marker((pos - off) // tbs + 1, self.sources[i].name, 2 + self.sources[i].boundaries.index(k - 1), pos)
                for (i, k), pos in zip(marks, positions)
                if 0 <= pos < self.train_iters * tbs + off
            ),
            key=lambda m: (m.iteration, m.sample),
        )
        self.setup_seconds = time.perf_counter() - t0

    # ------------------------------------------------------------------------------------------------
    def counts_at(self, iteration: int) -> list[int]:
        """Samples drawn from each source after ``iteration`` iterations (exact)."""
        iteration = max(0, min(int(iteration), self.train_iters))
        k = int(np.searchsorted(self._iters, iteration, side="right")) - 1
        base = [int(x) for x in self._counts[k]]
        it0 = int(self._iters[k])
        if it0 == iteration:
            return base
        tbs, off = self.train_batch_size, self.sample_offset
        if self.draw_index is not None:
            di = np.asarray(self.draw_index[: max(0, iteration * tbs + off)], dtype=np.int64)
            return [int(x) for x in np.bincount(di, minlength=len(self.sources))]
        if self.weights is None:
            return [max(0, iteration * tbs + off)]
        return blend.advance(list(self.weights), max(0, it0 * tbs + off), base, max(0, iteration * tbs + off))[0]

    def stage_at(self, iteration: int) -> tuple[int, str] | None:
        """(1-based index, name) of the stage that trains iteration ``iteration`` (1-based); None without stages."""
        for k, (name, _, end) in enumerate(self.stages):
            if iteration <= end or k == len(self.stages) - 1:
                return k + 1, name
        return None

    def passes_at(self, iteration: int) -> dict[str, dict[str, float | int]]:
        """Per source: samples drawn, fractional passes, and the pass in progress (1-based)."""
        out: dict[str, dict[str, float | int]] = {}
        for s, c in zip(self.sources, self.counts_at(iteration)):
            out[s.name] = {
                "samples": c,
                "passes": round(c / s.samples_per_epoch, 6) if s.samples_per_epoch else 0.0,
                "pass": 1 + bisect.bisect_right(s.boundaries, c - 1) if c else 1,
            }
        return out

    # ------------------------------------------------------------------------------------------------
    def start(self, iteration: int, changed: dict[str, list[int]] | None = None) -> None:
        """Begin (or resume) at ``iteration``: skip markers already passed. ``changed``: what differs from the
        run that saved the checkpoint (key -> [old, new]), written into the resume record."""
        self.start_iteration = int(iteration)
        self._next = bisect.bisect_right([m.iteration for m in self.markers], self.start_iteration)
        self._next_stage = sum(1 for _, first, _ in self.stages if first + 1 <= self.start_iteration)
        if not self.active:
            return
        if iteration > 0:
            state = self.passes_at(iteration)
            log.info("neox_epoch: resumed at iteration %d: %s", iteration, _fmt(state))
            self.sink.write(
                {
                    "event": "resume",
                    "iteration": int(iteration),
                    "sources": state,
                    "consumed_samples": int(iteration) * self.train_batch_size + self.sample_offset,
                    **({"changed": changed} if changed else {}),
                }
            )

    def step(self, iteration: int) -> None:
        """Call once per iteration (after it finished); O(1) unless a record is due."""
        if not self.active:
            return
        while self._next_stage < len(self.stages) and self.stages[self._next_stage][1] + 1 <= iteration:
            self._stage_start(self._next_stage)
        if self._next < len(self.markers) and self.markers[self._next].iteration <= iteration:
            self._fire(iteration)
        if iteration % self.log_interval == 0 or iteration == self.train_iters:
            self._record(iteration)

    def _stage_start(self, k: int) -> None:
        name, first, end = self.stages[k]
        self._next_stage = k + 1
        state = self.passes_at(first)
        log.info(
            "neox_epoch: stage %d %r starts at iteration %d (iterations %d..%d): %s",
            k + 1,
            name,
            first + 1,
            first + 1,
            end,
            _fmt(state),
        )
        self.sink.write(
            {
                "event": "stage_start",
                "iteration": first + 1,
                "stage": k + 1,
                "name": name,
                "first_iteration": first,
                "end_iteration": end,
                "sources": state,
            }
        )
        if self.scalar is not None:
            self.scalar("neox_epoch/stage_start", float(k + 1), first + 1)

    def _fire(self, iteration: int) -> None:
        while self._next < len(self.markers) and self.markers[self._next].iteration <= iteration:
            m = self.markers[self._next]
            self._next += 1
            log.info(
                "neox_epoch: source %s starts pass %d at iteration %d (blend sample %d)",
                m.source,
                m.pass_number,
                m.iteration,
                m.sample,
            )
            self.sink.write(
                {
                    "event": "pass_start",
                    "iteration": m.iteration,
                    "source": m.source,
                    "pass": m.pass_number,
                    "sample": m.sample,
                }
            )
            if self.scalar is not None:
                self.scalar(f"neox_epoch/pass_start/{m.source}", float(m.pass_number), m.iteration)

    def _record(self, iteration: int) -> None:
        state = self.passes_at(iteration)
        stage = self.stage_at(int(iteration))
        self.sink.write(
            {
                "event": "counters",
                "iteration": int(iteration),
                "consumed_samples": int(iteration) * self.train_batch_size + self.sample_offset,
                "sources": state,
                **({"stage": stage[0], "stage_name": stage[1]} if stage else {}),
            }
        )
        if self.scalar is not None and stage:
            self.scalar("neox_epoch/stage", float(stage[0]), int(iteration))
        if self.scalar is not None:
            for name, v in state.items():
                self.scalar(f"neox_epoch/passes/{name}", float(v["passes"]), int(iteration))
                self.scalar(f"neox_epoch/samples/{name}", float(v["samples"]), int(iteration))
                self.scalar(f"neox_epoch/pass/{name}", float(v["pass"]), int(iteration))

    def final(self, iteration: int) -> dict[str, Any]:
        """The final report (logged and written on the logging rank); returned on every rank."""
        state = self.passes_at(iteration)
        complete = int(iteration) >= self.train_iters
        report = {
            "event": "final",
            "iteration": int(iteration),
            "train_iters": self.train_iters,
            "complete": complete,
            "sources": {s.name: {**state[s.name], "planned_passes": s.planned_passes} for s in self.sources},
        }
        if self.active:
            log.info(
                "neox_epoch: final report at iteration %d of %d%s",
                iteration,
                self.train_iters,
                "" if complete else " (stopped early)",
            )
            for s in self.sources:
                v = state[s.name]
                log.info(
                    "neox_epoch:   %-24s %12d samples  %10.6f passes (planned %.6f)",
                    s.name,
                    v["samples"],
                    v["passes"],
                    s.planned_passes,
                )
            self.sink.write(report)
        return report


def _fmt(state: dict[str, dict[str, float | int]]) -> str:
    return ", ".join(f"{k} {v['passes']:.4f} passes" for k, v in state.items())


def counters_for(
    names: Sequence[str],
    samples_per_epoch: Sequence[int],
    boundaries: Sequence[Sequence[int]],
    planned: Sequence[float],
    weights: Sequence[float] | None,
    train_batch_size: int,
    train_iters: int,
    log_interval: int,
    **kw: Any,
) -> PassCounters:
    """Convenience constructor from plain lists."""
    sources = tuple(
        SourceCounter(n, int(s), tuple(int(x) for x in b), float(p))
        for n, s, b, p in zip(names, samples_per_epoch, boundaries, planned)
    )
    return PassCounters(
        sources,
        tuple(float(w) for w in weights) if weights is not None else None,
        int(train_batch_size),
        int(train_iters),
        int(log_interval),
        **kw,
    )
