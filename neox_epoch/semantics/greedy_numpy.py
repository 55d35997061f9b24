"""The greedy blend replay in numpy, for an install without the compiled ``neox_epoch._greedy`` (same counts, slower).

:func:`lockstep` runs many count vectors through the greedy rule at once (one numpy step for all of them), the
frameworks' float64 arithmetic unchanged (``fl(fl(w * x) - c)``, ties to the lowest source: ``argmax``).
:func:`replay` uses it the way the C extension splits a long run over threads, exactly: the run is cut into lanes,
lane 0 starts from the true state, every other lane from a GUESSED state at its start step (the largest-remainder
rounding of ``w * b``) and keeps its first states. Walking the lanes in order, the true state at a lane's start
(the end of the lane before) is stepped forward until it equals that lane's kept state at the same step; from there
the two are the same deterministic sequence, so the lane's end is the true end. This is done for all lanes at once, in
rounds: every lane whose start differs from its predecessor's end runs again from that end, keeping its end where it
meets its earlier trajectory within the kept states, else running to its end. Lane 0 is exact, so once no start
changes every lane is.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

LANE_STEPS = 2048
"""Steps per lane (at least): fewer lanes per step costs numpy's per-call overhead, more costs memory."""
MAX_LANES = 8192
KEPT = 32
"""States kept at the start of each lane (the true and the guessed trajectories meet within a few steps)."""
SHORT = 20_000
"""Runs shorter than this are stepped one at a time (:func:`steps`)."""
MAX_ROUNDS = 64
"""Rounds of lanes run again (:func:`_round`); past them (trajectories that do not meet) the rest is stepped."""


def stepped(
    weights: Sequence[float], start: int, counts: Sequence[int], stop: int, marks: Sequence[tuple[int, int]] = ()
) -> tuple[list[int], list[int]]:
    """The greedy rule one step at a time over ``[start, stop)`` (the plain Python loop every faster path is checked
    against): the counts after it, and for each mark ``(source, k)`` the step at which that source drew its k-th
    sample (-1: not within these steps)."""
    w = [float(x) for x in weights]
    c = [int(x) for x in counts]
    pos = [-1] * len(marks)
    wanted: dict[tuple[int, int], int] = {(s, k): j for j, (s, k) in enumerate(marks)}
    n = len(w)
    for s in range(start, stop):
        x = float(s) if s >= 1 else 1.0
        best, best_err = 0, w[0] * x - float(c[0])
        for i in range(1, n):
            err = w[i] * x - float(c[i])
            if err > best_err:
                best, best_err = i, err
        c[best] += 1
        j = wanted.get((best, c[best])) if wanted else None
        if j is not None:
            pos[j] = s
    return c, pos


def steps(weights: Sequence[float], start: int, counts: Sequence[int], stop: int) -> list[int]:
    """The counts after the steps ``[start, stop)``, one step at a time (short runs): :func:`stepped`."""
    return stepped(weights, start, counts, stop)[0]


def lockstep(
    weights: np.ndarray, starts: np.ndarray, counts: np.ndarray, count: int, kept: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """``count`` greedy steps of every row of ``counts`` (int64 [m, n], in place), row r from step ``starts[r]``;
    returns them and the first ``kept`` states after each step ([kept, m, n])."""
    rows = np.arange(counts.shape[0])
    errors = np.empty(counts.shape, np.float64)
    history = np.empty((min(kept, count), *counts.shape), np.int64)
    x = starts.astype(np.float64)
    for t in range(count):
        np.multiply(np.maximum(x, 1.0)[:, None], weights[None, :], out=errors)
        np.subtract(errors, counts, out=errors)
        counts[rows, errors.argmax(axis=1)] += 1
        x += 1.0
        if t < history.shape[0]:
            history[t] = counts
    return counts, history


def _guesses(weights: np.ndarray, bases: np.ndarray) -> np.ndarray:
    """The largest-remainder rounding of ``w * b`` for each base ``b`` (counts summing to ``b``)."""
    ideal = bases[:, None].astype(np.float64) * weights[None, :]
    out = np.floor(ideal).astype(np.int64)
    short = bases - out.sum(axis=1)
    rank = np.argsort(np.argsort(out - ideal, axis=1, kind="stable"), axis=1, kind="stable")  # 0: largest remainder
    n = weights.shape[0]
    out += (rank < np.clip(short, 0, n)[:, None]).astype(np.int64)
    out -= (rank >= n - np.clip(-short, 0, n)[:, None]).astype(np.int64)
    return np.maximum(out, 0)


def replay(weights: Sequence[float], start: int, counts: Sequence[int], stop: int) -> list[int]:
    """The counts after the steps ``[start, stop)``, exactly (see the module docstring)."""
    total = stop - start
    if total < SHORT:
        return steps(weights, start, counts, stop)
    w = np.asarray(weights, dtype=np.float64)
    lanes = max(2, min(MAX_LANES, total // LANE_STEPS))
    length = total // lanes
    bases = start + length * np.arange(lanes, dtype=np.int64)
    begun = _guesses(w, bases)
    begun[0] = np.asarray(counts, dtype=np.int64)
    ends, history = lockstep(w, bases, begun.copy(), length, KEPT)
    for _ in range(MAX_ROUNDS):
        if not _round(w, bases, begun, ends, history, length):
            return steps(weights, start + lanes * length, ends[-1].tolist(), stop)
    exact = int(np.argmax(np.any(begun[1:] != ends[:-1], axis=1)))  # lanes [0, exact] are exact
    return steps(weights, int(bases[exact + 1]), ends[exact].tolist(), stop)


def _round(
    w: np.ndarray, bases: np.ndarray, begun: np.ndarray, ends: np.ndarray, history: np.ndarray, length: int
) -> bool:
    """Every lane whose start is not its predecessor's end runs again from that end (in place); False: none did.

    A lane meeting its earlier trajectory within the kept states keeps its end (the same sequence from there on);
    the others run to their end. Lane 0 starts from the true state, so the lanes are all exact once none changes."""
    changed = 1 + np.flatnonzero(np.any(begun[1:] != ends[:-1], axis=1))
    if not changed.size:
        return False
    begun[changed] = ends[changed - 1]
    kept = history.shape[0]
    now, seen = lockstep(w, bases[changed], begun[changed].copy(), kept, kept)
    met = np.any(np.all(seen == history[:, changed], axis=2), axis=0)
    again = changed[~met]
    if again.size:
        history[:, again] = seen[:, ~met]
        ends[again] = lockstep(w, bases[again] + kept, now[~met], length - kept)[0]
    return True
