"""The AVX2 replay (``_greedy.advance`` at 11 sources and more) and the whole count path
(``blend.greedy_counts``: jump, AVX2 or scalar) give exactly the plain scalar replay's counts.

The oracle is ``_greedy.advance_plain`` (the scalar loop every earlier version ran), itself checked
against the Python loop ``greedy_numpy.stepped``. Weights from 1e-6 to 1, exact ties (equal weights,
thirds) where rounding decides, 2 to 64 sources."""

from __future__ import annotations

import random

import pytest

from neox_epoch.semantics import blend, greedy_numpy

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
        assert plain(w, 0, [0] * n, stop)[0] == greedy_numpy.stepped(w, 0, [0] * n, stop, [])[0]


@pytest.mark.parametrize(
    "n, seed, stop",
    [(17, 0, 3_000_000), (24, 1, 2_000_000), (64, 2, 2_000_000), (64, 3, 1_000_003), (40, 4, 1_500_000)],
)
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


def _off_band(rng: random.Random, n: int) -> tuple[list[float], list[int], int, int]:
    """Unnormalized weights (1e-9 .. 1e6 in scale) and a start state the greedy never reaches."""
    scale = rng.choice([1e-3, 1.0, 7.0, 1e6])
    w = [scale * 10 ** rng.uniform(-6, 0) for _ in range(n)]
    stop = rng.randint(5_000, 60_000)
    start = rng.randint(1, stop // 2)
    return w, [rng.randint(0, 3 * start // n + 5) for _ in range(n)], start, stop


@pytest.mark.parametrize("seed", range(2))
def test_hot_cold_kernel(seed):
    """The many-source kernel (the 16 or 32 heaviest sources every step, the others only when their error bound
    reaches the maximum) and the AVX2 scan, each forced, and the timed choice, equal the plain replay: 2 x 150
    blends of 17-200 sources (log-uniform, equal, thirds, small integers, some zero weights), 4,096-150,000
    steps (past 2^16 the forced runs are split over threads), a third from mid-run states."""
    rng = random.Random(900 + seed)
    for _ in range(150):
        n = rng.choice([17, 18, 20, 24, 31, 33, 40, 48, 64, 100, 200])
        w = weights(rng, n)
        if rng.random() < 0.1:
            w = blend.normalize([0.0 if rng.random() < 0.3 else x for x in w])
        stop = rng.randint(4_096, 150_000)
        start = rng.randint(0, stop // 2) if rng.random() < 0.3 else 0
        counts = plain(w, 0, [0] * n, start)[0]
        want = plain(w, start, counts, stop)[0]
        for hot in (0, 16, 32, -1):
            assert list(_greedy.advance_kernel(w, start, counts, stop, [], hot)[0]) == want, (hot, w, start, stop)


def test_hot_cold_kernel_off_band():
    """Its error bound holds for unnormalized weights and start states the greedy never reaches (120 runs)."""
    rng = random.Random(31)
    for _ in range(40):
        w, counts, start, stop = _off_band(rng, rng.choice([17, 24, 33, 64]))
        want = plain(w, start, counts, stop)[0]
        for hot in (0, 16, 32):
            assert list(_greedy.advance_kernel(w, start, counts, stop, [], hot)[0]) == want, (hot, w, start, stop)


@pytest.mark.parametrize("threads", ["1", "2", "3"])
def test_many_sources_long_run_over_threads(monkeypatch, threads):
    """64 log-uniform sources, 9,000,017 draws (past the 8M-step split): the chosen kernel over 1-3 threads, each
    later chunk started from a guessed state and joined where it meets the true one, equals the plain replay."""
    monkeypatch.setenv("NEOX_EPOCH_THREADS", threads)
    rng = random.Random(64)
    w = blend.normalize([10 ** rng.uniform(-6, 0) for _ in range(64)])
    assert list(_greedy.advance(w, 0, [0] * 64, 9_000_017, [])[0]) == plain(w, 0, [0] * 64, 9_000_017)[0]


def test_non_finite_weights_take_the_plain_loop():
    """A NaN or infinite weight: the plain loop's comparisons decide (NaN at source 0 wins every step there,
    where a vector max would skip it)."""
    for w in ([float("nan")] + [1.0] * 20, [1.0] * 5 + [float("nan")] + [1.0] * 20, [float("inf")] + [1.0] * 30):
        n = len(w)
        for stop in (100_000, 9_000_000):
            assert list(_greedy.advance(w, 0, [0] * n, stop, [])[0]) == plain(w, 0, [0] * n, stop)[0]
    assert list(_greedy.advance([float("nan")] + [1.0] * 20, 0, [0] * 21, 9_000_000, [])[0])[0] == 9_000_000


@pytest.mark.parametrize("n", [150, 300, 1000])
def test_hot_cold_kernel_past_32_groups(n):
    """Past 144 sources the cold groups outnumber a 32-bit mask: every group's bound is still looked at. Weights
    alike (uniform in 0.5..1), so the lightest groups win often: 50,000 draws equal the plain replay."""
    rng = random.Random(5)
    w = blend.normalize([rng.uniform(0.5, 1.0) for _ in range(n)])
    want = plain(w, 0, [0] * n, 50_000)[0]
    for hot in (0, 16, 32):
        assert list(_greedy.advance_kernel(w, 0, [0] * n, 50_000, [], hot)[0]) == want, hot
