"""The greedy blend's jump-ahead (blend._jump) gives exactly the plain replay's counts.

The oracle is the plain replay: the scalar C loop ``_greedy.advance_plain`` (itself checked against the Python loop
``greedy_numpy.stepped`` in test_semantics.py and below). The jump's tuning constants are shrunk so that
short runs jump too (correctness does not depend on them: they only decide how often the jump is tried
and how often it succeeds); long runs use the shipped constants. Weights span 1e-6..1, 2 to 64 sources,
plus ties (equal weights, thirds) where rounding decides."""

from __future__ import annotations

import random

import pytest

from neox_epoch.semantics import blend, greedy_numpy

_greedy = pytest.importorskip("neox_epoch._greedy")


def plain(w: list[float], start: int, counts: list[int], stop: int) -> list[int]:
    return list(_greedy.advance_plain(w, start, counts, stop, [])[0])


def random_weights(rng: random.Random, n: int, low: float) -> list[float]:
    kind = rng.random()
    if kind < 0.15:
        raw = [1.0] * n  # exact ties
    elif kind < 0.25:
        raw = [rng.choice([1.0, 2.0, 3.0]) / 3.0 for _ in range(n)]  # thirds: near-ties after rounding
    elif kind < 0.35:
        raw = [float(rng.randint(1, 5)) for _ in range(n)]
    else:
        raw = [10 ** rng.uniform(-6 if low < 1e-3 else -3, 0) for _ in range(n)]
    return blend.normalize(raw)


@pytest.fixture
def eager(monkeypatch):
    """Jump on short runs: a short tail and window, no minimum length."""
    monkeypatch.setattr(blend, "_JUMP_MIN_STEPS", 1)
    monkeypatch.setattr(blend, "_JUMP_TAIL", 4)
    monkeypatch.setattr(blend, "_JUMP_WINDOW", 8)
    monkeypatch.setattr(blend, "_JUMP_MERGE", 0.05)
    monkeypatch.setattr(blend, "_JUMP_MAX_STATES", 300)
    monkeypatch.setattr(blend, "_JUMP_STEPS_PER_STATE", 1)


@pytest.mark.parametrize("seed", range(10))
def test_short_runs_many_blends(eager, seed):
    """10 x 10,000 random blends (2-64 sources), runs of 0-3,000 steps, from step 0 and from mid-run states."""
    rng = random.Random(seed)
    jumped = 0
    for _ in range(10_000):
        n = rng.choice([2, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 64])
        w = random_weights(rng, n, 1e-3)
        stop = rng.randint(0, 3_000)
        start = rng.randint(0, stop // 2) if rng.random() < 0.3 else 0
        counts = plain(w, 0, [0] * n, start)
        if rng.random() < 0.05 and n > 1:  # an arbitrary (not greedy-reached) start state
            i, j = rng.randrange(n), rng.randrange(n)
            if counts[j] > 0:
                counts[i] += 1
                counts[j] -= 1
        want = plain(w, start, counts, stop)
        assert blend.advance(w, start, counts, stop)[0] == want, (w, start, counts, stop)
        s0, c0 = (1, plain(w, 0, counts, 1)) if start == 0 else (start, counts)
        jumped += stop > s0 and blend._jump(w, s0, c0, stop) is not None
    assert jumped > 2_000  # the jump itself was exercised, not only its fallback


def test_python_oracle_agrees(eager):
    """The C loop used as the oracle above equals the Python loop on 300 blends."""
    rng = random.Random(99)
    for _ in range(300):
        n = rng.choice([2, 3, 5, 8, 17, 64])
        w = random_weights(rng, n, 1e-6)
        stop = rng.randint(0, 600)
        assert plain(w, 0, [0] * n, stop) == greedy_numpy.stepped(w, 0, [0] * n, stop, [])[0]


@pytest.mark.parametrize(
    "n, seed, stop",
    [
        (2, 0, 40_000_000),
        (3, 1, 25_000_000),
        (5, 2, 12_000_000),
        (8, 3, 8_000_000),
        (14, 4, 5_000_000),
        (2, 5, 3_000_000),
        (4, 6, 20_000_000),
        (16, 7, 3_000_000),
    ],
)
def test_long_runs_shipped_constants(n, seed, stop):
    """Long runs with the shipped constants (weights down to 1e-6): the jump's counts equal the replay's."""
    rng = random.Random(seed)
    w = random_weights(rng, n, 1e-6) if seed % 3 else blend.normalize([10 ** rng.uniform(-3, 0) for _ in range(n)])
    if min(w) > 1e-4:
        assert blend._jump(w, 1, plain(w, 0, [0] * n, 1), stop) is not None  # the jump, not its fallback
    assert blend.greedy_counts(w, stop) == plain(w, 0, [0] * n, stop)


@pytest.mark.parametrize("n", [2, 3, 7, 10, 16, 31, 64])
def test_ties_equal_weights_long(n):
    """Equal weights tie at every multiple of n; the jump (one candidate state) keeps the lowest-index rule."""
    w = blend.normalize([1.0] * n)
    for stop in (2_000_003, 3_000_000 + n // 2):
        assert blend._jump(w, 1, plain(w, 0, [0] * n, 1), stop) is not None  # the jump, not its fallback
        assert blend.greedy_counts(w, stop) == plain(w, 0, [0] * n, stop)


def test_thirds_and_draws_checkpoints():
    """Weights of 1/3 (inexact in binary) and greedy_draws' several checkpoints, each jumped separately."""
    w = blend.normalize([1 / 3, 1 / 3, 1 / 3])
    cps = [0, 1, 2, 999_999, 1_500_000, 4_000_001]
    got = blend.greedy_draws(w, cps)
    assert list(got.counts) == [tuple(plain(w, 0, [0, 0, 0], c)) for c in cps]


def test_off_band_start_replays():
    """A start state the greedy cannot reach (far off its band) is replayed, not jumped."""
    w = blend.normalize([1.0, 1.0])
    assert blend._jump(w, 1_000, [1_000, 0], 2_000_000) is None
    assert blend.advance(w, 1_000, [1_000, 0], 2_000_000)[0] == plain(w, 1_000, [1_000, 0], 2_000_000)


def test_longer_than_any_framework_builds_is_refused_at_once():
    """Past blend.MAX_DRAWS samples (a 90 GB blending index) the count is refused in one line, no replay."""
    import time

    from neox_epoch.errors import PlanError

    t = time.perf_counter()
    with pytest.raises(PlanError, match=r"a greedy blend of 10,000,000,001 samples; expected at most"):
        blend.greedy_counts(blend.normalize([1.0, 2.0, 3.0] * 30), blend.MAX_DRAWS + 1)
    assert time.perf_counter() - t < 1.0


@pytest.mark.parametrize("seed", range(4))
def test_marks_jump_between_them(eager, seed):
    """4 x 1,500 random blends with marks (source, k): counts and every mark's step equal the replay's."""
    rng = random.Random(1000 + seed)
    for _ in range(1_500):
        n = rng.choice([2, 3, 4, 6, 8, 16])
        w = random_weights(rng, n, 1e-3)
        stop = rng.randint(1, 3_000)
        start = rng.randint(0, stop // 3) if rng.random() < 0.3 else 0
        counts = plain(w, 0, [0] * n, start)
        marks = [(rng.randrange(n + 1), rng.randint(0, stop // n + 3)) for _ in range(rng.randint(1, 5))]
        want = _greedy.advance_plain(w, start, counts, stop, marks)
        got = blend.advance(w, start, counts, stop, marks)
        assert (got[0], got[1]) == (list(want[0]), list(want[1])), (w, start, counts, stop, marks)


def test_marks_long_run():
    """Marks on long runs with the shipped constants (resume-check's and the counters' use)."""
    rng = random.Random(7)
    for n, stop in ((3, 20_000_000), (8, 12_000_000)):
        w = blend.normalize([10 ** rng.uniform(-2, 0) for _ in range(n)])
        marks = [(i, int(stop * w[i] * f)) for i in range(n) for f in (0.1, 0.5, 0.99)] + [(0, 1), (1, 10**9)]
        want = _greedy.advance_plain(w, 0, [0] * n, stop, marks)
        assert blend.advance(w, 0, [0] * n, stop, marks) == (list(want[0]), list(want[1]))
