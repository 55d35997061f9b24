"""Exact greedy blend counts, as GPT-NeoX's and megatron-core's ``build_blending_indices`` draw them.

Both frameworks fill a blended dataset of ``size`` samples greedily: at step ``s`` (``x = max(s, 1)``)
they pick the source ``i`` with the largest ``w_i * x - count_i`` in float64, ties to the lowest ``i``.
The counts after ``N`` steps are therefore NOT ``w_i * N`` in general; this module replays the rule
exactly, keeping only the counts (a small C loop when the extension is built, a pure-Python loop
otherwise), so 1e9 steps need no 1e9-entry arrays.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

try:  # the C extension is optional; the Python loop gives identical answers, only slower
    from neox_epoch import _greedy  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - exercised only without a compiler
    _greedy = None

log = logging.getLogger(__name__)
_SLOW_WARN_STEPS = 20_000_000


def normalize(weights: Sequence[float]) -> list[float]:
    """float64 ``w / sum(w)`` with numpy, as megatron-core's ``utils.normalize`` and NeoX's blend do."""
    w = np.asarray(weights, dtype=np.float64)
    return (w / np.sum(w)).tolist()


def _advance_py(
    weights: Sequence[float], start: int, counts: Sequence[int], stop: int, marks: Sequence[tuple[int, int]]
) -> tuple[list[int], list[int]]:
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
        j = wanted.get((best, c[best]))
        if j is not None:
            pos[j] = s
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
    if _greedy is not None:
        c, p = _greedy.advance(list(map(float, weights)), int(start), list(map(int, counts)), int(stop), list(marks))
        return list(c), list(p)
    if stop - start > _SLOW_WARN_STEPS:
        log.warning("neox_epoch._greedy is not built: replaying %d blend steps in Python is slow "
                    "(reinstall with a C compiler: pip install -e .)", stop - start)
    return _advance_py(weights, start, counts, stop, marks)


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
