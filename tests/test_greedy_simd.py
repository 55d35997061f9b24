"""The AVX2 replay (``_greedy.advance`` at 11 sources and more) and the whole count path
(``blend.greedy_counts``: jump, AVX2 or scalar) give exactly the plain scalar replay's counts.

The oracle is ``_greedy.advance_plain`` (the scalar loop every earlier version ran), itself checked
against the Python loop ``blend._advance_py``. Weights from 1e-6 to 1, exact ties (equal weights,
thirds) where rounding decides, 2 to 64 sources."""

from __future__ import annotations

import random

import pytest

from neox_epoch.semantics import blend

_greedy = pytest.importorskip("neox_epoch._greedy")


def plain(w: list[float], start: int, counts: list[int], stop: int, marks=()) -> tuple[list[int], list[int]]:
    c, p = _greedy.advance_plain(w, start, counts, stop, list(marks))
    return list(c), list(p)


def weights(rng: random.Random, n: int) -> list[float]:
    kind = rng.random()
    if kind < 0.15:
        raw = [1.0] * n
    elif kind < 0.25:
        raw = [rng.choice([1.0, 2.0, 3.0]) / 3.0 for _ in range(n)]
    elif kind < 0.35:
        raw = [float(rng.randint(1, 5)) for _ in range(n)]
    else:
        raw = [10 ** rng.uniform(-6, 0) for _ in range(n)]
    return blend.normalize(raw)


@pytest.mark.parametrize("seed", range(4))
def test_many_random_blends(seed):
    """4 x 25,000 random blends (2-64 sources), 0-2,000 steps, some from mid-run states, some with marks:
    the AVX2 loop and greedy_counts' whole path equal the plain replay (100,000 blends)."""
    rng = random.Random(500 + seed)
    for _ in range(25_000):
        n = rng.choice([2, 3, 5, 8, 10, 11, 12, 16, 17, 20, 24, 31, 32, 33, 48, 63, 64])
        w = weights(rng, n)
        stop = rng.randint(0, 2_000)
        start = rng.randint(0, stop // 2) if rng.random() < 0.3 else 0
        counts = plain(w, 0, [0] * n, start)[0]
        marks = [(rng.randrange(n), rng.randint(1, stop // n + 2)) for _ in range(rng.randint(0, 3))]
        want = plain(w, start, counts, stop, marks)
        c, p = _greedy.advance(w, start, counts, stop, marks)
        assert (list(c), list(p)) == want, (w, start, counts, stop, marks)
        if start == 0 and not marks:
            assert blend.greedy_counts(w, stop) == want[0]


def test_python_oracle_agrees():
    """The scalar oracle equals the Python loop (300 blends, up to 64 sources)."""
    rng = random.Random(77)
    for _ in range(300):
        n = rng.choice([2, 17, 33, 64])
        w = weights(rng, n)
        stop = rng.randint(0, 500)
        assert plain(w, 0, [0] * n, stop)[0] == blend._advance_py(w, 0, [0] * n, stop, [])[0]


@pytest.mark.parametrize("n, seed, stop", [(17, 0, 3_000_000), (24, 1, 2_000_000), (64, 2, 2_000_000),
                                           (64, 3, 1_000_003), (40, 4, 1_500_000)])
def test_long_runs(n, seed, stop):
    """Longer runs at 17-64 sources: AVX2 (and the jump where it applies) equal the plain replay."""
    w = weights(random.Random(seed), n)
    assert blend.greedy_counts(w, stop) == plain(w, 0, [0] * n, stop)[0]
    marks = [(i, max(1, int(stop * w[i] * f))) for i in range(0, n, 5) for f in (0.3, 0.9)]
    assert tuple(blend.advance(w, 0, [0] * n, stop, marks)) == plain(w, 0, [0] * n, stop, marks)


def test_one_source_without_replay():
    """One source draws every step: counts and mark steps come out without a replay, equal to it."""
    rng = random.Random(11)
    for _ in range(2_000):
        stop = rng.randint(0, 300)
        start = rng.randint(0, stop)
        c0 = rng.randint(0, 50)
        marks = [(rng.randint(0, 1), rng.randint(-1, c0 + stop + 2)) for _ in range(rng.randint(0, 4))]
        w = [rng.choice([1.0, 0.5, 1e-6])]
        assert tuple(blend.advance(w, start, [c0], stop, marks)) == plain(w, start, [c0], stop, marks)
    assert blend.greedy_counts([1.0], 1_171_456_000) == [1_171_456_000]  # pythia-14m at 256 GPUs, at once
