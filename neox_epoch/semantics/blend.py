"""Exact greedy blend counts, as GPT-NeoX's and megatron-core's ``build_blending_indices`` draw them.

Both frameworks fill a blended dataset of ``size`` samples greedily: at step ``s`` (``x = max(s, 1)``)
they pick the source ``i`` with the largest ``w_i * x - count_i`` in float64, ties to the lowest ``i``.
The counts after ``N`` steps are therefore NOT ``w_i * N`` in general; this module replays the rule
exactly, keeping only the counts (a small C loop when the extension is built, a pure-Python loop
otherwise), so 1e9 steps need no 1e9-entry arrays.

Long runs jump ahead instead of replaying every step (:func:`_jump`), with a proof rather than an
estimate. In float64, as the frameworks compute it, every source's error ``e_i = w_i*s - c_i`` stays
above ``w_i - 1 - T(s)`` once the run starts inside that band (the winner has the largest computed error,
hence a real error at least the mean, ``sigma*s/n``, less the rounding ``2d``; it then loses ``1 - w_i``;
the others only gain), where ``sigma = sum(w) - 1`` exactly and ``d`` bounds the rounding of
``fl(fl(w*x) - c)``. So at a step ``b`` the true state lies in the finite set ``A(b)`` of count vectors
with ``sum = b``, ``c_i <= floor(w_i*(b-1) + 1 + T)`` and ``c_i`` at least its count at the start.
Every state of ``A(b)`` is replayed (the same exact C loop) from ``b`` to the end, in lockstep, equal
states merged; if they all end in one state, that is the true final state, whichever of them the true one
was. If not, or ``A(b)`` is too large (past about 20 sources), the plain replay runs. ``b`` is chosen where
``A(b)`` is smallest. The argument needs ``sum(counts) == start >= 1`` and a start state inside the band
(both checked; step 0, where ``x = 1``, is replayed). Marks jump between marks (:func:`_marked`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from neox_epoch.errors import PlanError
from neox_epoch.semantics import greedy_numpy as gnp
from neox_epoch.semantics import normalize  # noqa: F401 - the blends' normalization, here with them
from neox_epoch.util import extensions

# the C extension is optional (None: not built, or NEOX_EPOCH_NO_EXTENSIONS); the fallback gives identical answers
_greedy: Any = extensions.load("_greedy")

log = logging.getLogger(__name__)
MAX_DRAWS = 10_000_000_000
"""Longest blend counted: both frameworks' blending index holds a source id (uint8/int16) and an int64 per
sample (90-100 GB here), and no real run draws that many. Longer requests are refused before any replay."""
_JUMP_MIN_STEPS = 1 << 17
"""Runs shorter than this are replayed (the jump replays up to ``_JUMP_TAIL + _JUMP_WINDOW`` steps per state)."""
_JUMP_TAIL = 512
"""Fewest steps every candidate state is replayed before the end (time for the candidates to merge)."""
_JUMP_MERGE = 4.0
"""... plus this many times ``1 / min(weights)``: a candidate differing in a rare source merges once it is drawn."""
_JUMP_WINDOW = 1 << 16
"""The base step ``b`` is chosen among this many steps before the tail (a wider window finds smaller sets)."""
_JUMP_MAX_STATES = 250_000
"""Largest candidate set ``A(b)`` replayed; past it (many sources) the plain replay is cheaper."""
_NUMPY_MAX_STATES = 20_000
"""... without the C extension (the candidates then run in numpy, all in one step: :func:`_collapse`)."""
_JUMP_STEPS_PER_STATE = 20_000
"""A candidate state costs about as much as this many replayed draws of one source (enumeration, first round)."""


@dataclass(frozen=True)
class _Band:
    """The greedy's lower error band ``e_i >= w_i - 1 - T`` in exact integers over one power-of-two denominator.

    ``T`` bounds the float64 rounding at steps up to ``stop``: ``|fl(fl(w*x) - c) - (w*x - c)| <=
    u*(w*x + |e|)`` with ``u = 2**-53``, ``|e| <= n + 1 + |sigma|*x`` and ``sigma = sum(w) - 1`` (exact);
    ``T = |sigma|*stop + 2*d`` with ``2**-52`` for ``u`` (a factor 2 to spare), plus ``2**-40``, rounded up.
    """

    den: int
    nums: tuple[int, ...]
    """``w_i * den`` (exact: float64 weights are dyadic)."""
    slack: int
    """``T * den``, rounded up."""

    @staticmethod
    def of(weights: Sequence[float], stop: int) -> _Band:
        ratios = [float(w).as_integer_ratio() for w in weights]
        # powers of two: the largest is a common denominator; at least 2**80 so that rounding T up is harmless
        den = max(1 << 80, *(q for _, q in ratios))
        nums = tuple(p * (den // q) for p, q in ratios)
        sigma = abs(sum(nums) - den)
        rounding = -(-(max(nums) * stop + (2 * len(nums) + 2) * den + sigma * stop) // (1 << 52))
        return _Band(den, nums, sigma * stop + 2 * rounding - (-den // (1 << 40)))

    def caps(self, b: int) -> list[int]:
        """Exact ``floor(w_i*(b-1) + 1 + T)``: the most samples source i can have drawn before step ``b``."""
        return [(p * (b - 1) + self.den + self.slack) // self.den for p in self.nums]


def _best_base(weights: Sequence[float], lo: int, hi: int, slack: float) -> int:
    """The step ``b`` in ``[lo, hi]`` with the smallest ``sum(caps) - b`` (float estimate; any ``b`` is correct)."""
    bs = np.arange(lo, hi + 1, dtype=np.int64)
    w = np.asarray(weights, dtype=np.float64)
    spare = np.zeros(len(bs))
    for wi in w:  # one source at a time keeps memory at one window
        spare += np.floor(wi * (bs - 1).astype(np.float64) + 1.0 + slack)
    return int(bs[int(np.argmin(spare - bs))])


def _states(caps: Sequence[int], floors: Sequence[int], spare: int) -> Iterator[list[int]]:
    """Every count vector ``c`` with ``floors <= c <= caps`` and ``sum(caps) - sum(c) == spare``."""
    n = len(caps)
    room = [c - f for c, f in zip(caps, floors)]
    tail = [0] * (n + 1)
    for i in range(n - 1, -1, -1):
        tail[i] = tail[i + 1] + room[i]
    out = list(caps)

    def rec(i: int, left: int) -> Iterator[list[int]]:
        if i == n:
            if left == 0:
                yield list(out)
            return
        for take in range(max(0, left - tail[i + 1]), min(room[i], left) + 1):
            out[i] = caps[i] - take
            yield from rec(i + 1, left - take)
        out[i] = caps[i]

    return rec(0, spare)


def _collapse(weights: list[float], b: int, states: Iterator[list[int]], stop: int) -> list[int] | None:
    """Replay every state from ``b`` in lockstep, merging equal ones; the one end state, or None if several remain."""
    cur = {tuple(c) for c in states}
    s, chunk = b, 64
    while len(cur) > 1 and s < stop:
        e = min(stop, s + chunk)
        if _greedy is None:  # every state in one numpy step
            rows = np.array(sorted(cur), dtype=np.int64)
            starts = np.full(rows.shape[0], s, np.int64)
            cur = {tuple(r) for r in gnp.lockstep(np.asarray(weights), starts, rows, e - s)[0].tolist()}
        else:
            cur = {tuple(_greedy.advance(weights, s, list(c), e, [])[0]) for c in cur}
        s, chunk = e, min(4 * chunk, 1 << 20)
    if len(cur) != 1:
        return None
    (one,) = cur
    return _run(weights, s, list(one), stop, [])[0]


def _jump(weights: Sequence[float], start: int, counts: Sequence[int], stop: int) -> list[int] | None:
    """The counts at ``stop`` without replaying ``[start, stop)``, or None where the proof does not apply.

    See the module docstring: every state the true one can be in at a step ``b`` is replayed (merging as
    they meet) to ``stop``; one common end state is the answer.
    """
    n = len(weights)
    if n < 2 or start < 1 or sum(counts) != start:
        return None
    if not all(math.isfinite(w) and w > 0 for w in weights):
        return None
    # the candidates merge once each source has had time to be drawn: a few 1/w_min steps
    tail = _JUMP_TAIL + int(_JUMP_MERGE / min(weights))
    if stop - start < max(_JUMP_MIN_STEPS, 8 * (tail + _JUMP_WINDOW)):
        return None
    band = _Band.of(weights, stop)
    if 4 * band.slack > band.den or any(c > cap for c, cap in zip(counts, band.caps(start))):
        return None  # unnormalized weights, or a start state off the greedy's band: replay
    budget = min(
        _JUMP_MAX_STATES if _greedy is not None else _NUMPY_MAX_STATES,
        (stop - start) * n // (4 * _JUMP_STEPS_PER_STATE),
    )
    # a narrow probe first: with many sources no window gets the set under budget (saves 0.08 s at 64)
    probe = _best_base(weights, stop - tail - min(1024, _JUMP_WINDOW), stop - tail, band.slack / band.den)
    if math.comb(max(0, sum(band.caps(probe)) - probe - 4) + n - 1, n - 1) > budget:
        return None
    b = _best_base(weights, stop - tail - _JUMP_WINDOW, stop - tail, band.slack / band.den)
    caps = band.caps(b)
    spare = sum(caps) - b
    if spare < 0 or math.comb(spare + n - 1, n - 1) > budget:
        return None
    return _collapse([float(x) for x in weights], b, _states(caps, [int(c) for c in counts], spare), stop)


def _marked(
    weights: Sequence[float], start: int, counts: Sequence[int], stop: int, marks: Sequence[tuple[int, int]]
) -> tuple[list[int], list[int]]:
    """``advance`` with marks, jumping between them: no source i can draw its k-th sample before step
    ``ceil((k - 1 - T) / w_i)`` (the band's cap), so every stretch before the next mark's earliest step is
    jumped (or replayed where the jump does not apply), and only the few steps around a mark are replayed."""
    w = [float(x) for x in weights]
    n, band = len(w), _Band.of(weights, stop)
    s, c, pos = int(start), [int(x) for x in counts], [-1] * len(marks)

    def replay(to: int, free: bool = False) -> None:  # free: no mark can be drawn in [s, to) (the band's bound)
        nonlocal s, c
        c, got = _run(w, s, c, to, [] if free else list(marks))
        for j, p in enumerate(got):
            if p >= 0:
                pos[j] = p
        s = to

    if s == 0 and stop > 0:
        replay(1)  # step 0 (x = 1) is outside the band argument
    while s < stop:
        todo = [(i, k) for j, (i, k) in enumerate(marks) if pos[j] < 0 and 0 <= i < n and k > c[i]]
        if not todo or not all(x > 0 and math.isfinite(x) for x in w):
            break
        earliest = min(max(s, -(-((k - 1) * band.den - band.slack) // band.nums[i])) for i, k in todo)
        target = min(stop, earliest)
        jumped = _jump(weights, s, c, target) if target > s else None
        if jumped is not None:
            s, c = target, jumped
        elif target > s:
            replay(target, free=True)
        replay(min(stop, s + _JUMP_TAIL + int(_JUMP_MERGE / min(w))))
    if s < stop:
        jumped = _jump(weights, s, c, stop)
        if jumped is None:
            replay(stop, free=all(x > 0 and math.isfinite(x) for x in w))
        else:
            c = jumped
    return c, pos


def advance(
    weights: Sequence[float],
    start: int,
    counts: Sequence[int],
    stop: int,
    marks: Sequence[tuple[int, int]] = (),
) -> tuple[list[int], list[int]]:
    """Run the greedy steps ``s`` in ``[start, stop)`` from ``counts``.

    Returns the new counts and, for each ``(source, k)`` in ``marks``, the step at which that source
    drew its ``k``-th sample during the call (``-1`` if it did not).
    """
    if stop < start:
        raise ValueError(f"stop ({stop}) < start ({start})")
    if stop > MAX_DRAWS:
        raise PlanError(
            f"a greedy blend of {stop:,d} samples; expected at most {MAX_DRAWS:,d} (the framework's "
            f"blending index would take {9 * stop / 1e9:,.0f} GB or more): check train_iters, "
            "eval_interval and eval_iters"
        )
    if len(weights) == 1:  # one source draws every step, whatever its weight: no replay
        drawn = int(counts[0])
        return [drawn + stop - start], [
            start + k - drawn - 1 if i == 0 and drawn < k <= drawn + stop - start else -1 for i, k in marks
        ]
    if _greedy is None and stop - start >= gnp.SHORT:
        extensions.say_missing("_greedy", "the blend's greedy draws are replayed in numpy")
    if marks and stop - start >= _JUMP_MIN_STEPS:
        return _marked(weights, start, counts, stop, marks)
    if not marks and stop - start >= _JUMP_MIN_STEPS:
        first: list[int] = [int(c) for c in counts]
        s0 = int(start)
        if s0 == 0:  # step 0 (x = 1) is outside the band argument: take it
            first, s0 = _run(list(map(float, weights)), 0, first, 1, [])[0], 1
        jumped = _jump(weights, s0, first, int(stop))
        if jumped is not None:
            return jumped, []
    return _run(list(map(float, weights)), int(start), list(map(int, counts)), int(stop), list(marks))


def _run(
    weights: Sequence[float], start: int, counts: Sequence[int], stop: int, marks: Sequence[tuple[int, int]]
) -> tuple[list[int], list[int]]:
    """The plain replay of ``[start, stop)``: the C loop, else numpy's lanes (no marks) or the Python loop (marks)."""
    if _greedy is not None:
        c, p = _greedy.advance(list(map(float, weights)), int(start), list(map(int, counts)), int(stop), list(marks))
        return list(c), list(p)
    if not marks:
        return gnp.replay(weights, int(start), counts, int(stop)), []
    return gnp.stepped(weights, start, counts, stop, marks)


@dataclass(frozen=True)
class BlendDraws:
    """Per-source counts of a greedy blend at several prefix lengths."""

    weights: tuple[float, ...]
    """The normalized float64 weights the greedy used."""
    checkpoints: tuple[int, ...]
    """The prefix lengths (samples of the blend) at which counts were taken, ascending."""
    counts: tuple[tuple[int, ...], ...]
    """``counts[k][i]``: samples drawn from source i among the first ``checkpoints[k]`` blend samples."""
    mark_positions: tuple[int, ...]
    """For each requested mark ``(i, k)``, the blend position (0-based) of source i's k-th sample, or -1."""


def greedy_draws(
    weights: Sequence[float], checkpoints: Sequence[int], marks: Sequence[tuple[int, int]] = ()
) -> BlendDraws:
    """Counts per source after each checkpoint (number of blend samples), in one pass.

    ``weights`` are used as given (normalize them first the way the framework does).
    """
    cps = sorted({int(c) for c in checkpoints})
    counts = [0] * len(weights)
    pos = [-1] * len(marks)
    out: list[tuple[int, ...]] = []
    s = 0
    for cp in cps:
        counts, p = advance(weights, s, counts, cp, marks)
        pos = [a if a >= 0 else b for a, b in zip(pos, p)]
        out.append(tuple(counts))
        s = cp
    by_cp = dict(zip(cps, out))
    return BlendDraws(
        weights=tuple(float(w) for w in weights),
        checkpoints=tuple(int(c) for c in checkpoints),
        counts=tuple(by_cp[int(c)] for c in checkpoints),
        mark_positions=tuple(pos),
    )


def greedy_counts(weights: Sequence[float], size: int) -> list[int]:
    """Per-source counts after ``size`` greedy steps."""
    return advance(weights, 0, [0] * len(weights), size)[0]


def exhaustive_counts(sizes: Sequence[int]) -> list[int]:
    """megatron-core's exhaustive blending (weights None, size None): every source drawn exactly ``sizes[i]``."""
    return [int(s) for s in sizes]
