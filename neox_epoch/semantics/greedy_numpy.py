"""The greedy blend replay in numpy, for an install without the compiled ``neox_epoch._greedy`` (same counts, slower).

:func:`lockstep` runs many count vectors through the greedy rule at once (one numpy step for all of them), the
frameworks' float64 arithmetic unchanged (``fl(fl(w * x) - c)``, ties to the lowest source: ``argmax``).
:func:`replay` uses it the way the C extension splits a long run over threads, exactly: the run is cut into lanes,
lane 0 starts from the true state, every other lane from a GUESSED state at its start step (the largest-remainder
rounding of ``w * b``) and keeps its first states. Walking the lanes in order, the true state at a lane's start
(the end of the lane before) is stepped forward until it equals that lane's kept state at the same step; from there
the two are the same deterministic sequence, so the lane's end is the true end. A lane whose guess never meets the
true state within the kept steps is replayed again from the true state (:func:`replay` on that lane alone).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

LANE_STEPS = 2048
"""Steps per lane (at least): fewer lanes per step costs numpy's per-call overhead, more costs memory."""
MAX_LANES = 16384
KEPT = 48
"""States kept at the start of each lane (the true and the guessed trajectories meet within a few steps)."""
SHORT = 20_000
"""Runs shorter than this are stepped one at a time (:func:`steps`)."""


def steps(weights: Sequence[float], start: int, counts: Sequence[int], stop: int) -> list[int]:
    """The counts after the steps ``[start, stop)``, one step at a time (short runs)."""
    w = [float(x) for x in weights]
    c = [int(x) for x in counts]
    n = len(w)
    for s in range(start, stop):
        x = float(s) if s >= 1 else 1.0
        best, best_err = 0, w[0] * x - float(c[0])
        for i in range(1, n):
            err = w[i] * x - float(c[i])
            if err > best_err:
                best, best_err = i, err
        c[best] += 1
    return c


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
    state = _guesses(w, bases)
    state[0] = np.asarray(counts, dtype=np.int64)
    firsts = state.copy()
    ends, history = lockstep(w, bases, state, length, KEPT)
    true = [int(c) for c in counts]
    for lane in range(lanes):
        true = _follow(w, int(bases[lane]), true, firsts[lane], history[:, lane], ends[lane], length)
    return steps(weights, start + lanes * length, true, stop)


def _follow(
    w: np.ndarray, base: int, true: list[int], guess: np.ndarray, history: np.ndarray, end: np.ndarray, length: int
) -> list[int]:
    """The true state at the end of a lane from the true state at its start (see the module docstring)."""
    if guess.tolist() == true:
        return [int(c) for c in end]
    for t in range(history.shape[0]):
        true = steps(w.tolist(), base + t, true, base + t + 1)
        if history[t].tolist() == true:
            return [int(c) for c in end]
    return replay(w.tolist(), base + history.shape[0], true, base + length)
