"""``unseen.spillover`` sums only the Binomial terms that are not 0.0 in float64: the same bits as the sum over
every k (the oracle below, the loop it replaced), at a fraction of the terms when E is large."""

from __future__ import annotations

import math
import random

from neox_epoch.plan.unseen import spillover
from neox_epoch.semantics import DatasetBuild


def every_term(e: int, b: int, spe: int, drawn: int) -> tuple[float, float] | None:
    """The plain sum over k = 0 .. upto, in ascending k (the oracle)."""
    if e <= 1 or drawn <= 0 or drawn >= b:
        return None
    p = drawn / b
    log_p, log_q = math.log(p), math.log1p(-p)
    upto = min(e, math.ceil(drawn / max(1, spe)))
    cdf = 0.0
    for k in range(upto + 1):
        cdf += math.exp(math.lgamma(e + 1) - math.lgamma(k + 1) - math.lgamma(e - k + 1) + k * log_p + (e - k) * log_q)
    return math.exp(e * log_q), max(0.0, 1.0 - cdf)


def build(e: int, b: int, spe: int, drawn: int) -> DatasetBuild:
    return DatasetBuild(
        tokens=spe * 64,
        samples_per_epoch=spe,
        samples_requested=drawn,
        epochs=e,
        samples_built=b,
        length=b,
        separate_final_epoch=False,
        formula="",
    )


def test_spillover_equals_the_sum_over_every_term_bit_for_bit() -> None:
    rng = random.Random(5)
    for _ in range(1500):
        e = rng.choice([2, 3, 5, 10, 50, 200, 1000, 5000, rng.randint(2, 20000)])
        spe = rng.randint(1, 3000)
        b = e * spe - rng.randint(0, spe - 1)
        drawn = rng.choice([1, b - 1, rng.randint(1, b)])
        assert spillover(build(e, b, spe, drawn), drawn) == every_term(e, b, spe, drawn), (e, b, spe, drawn)


def test_a_million_epochs_half_drawn() -> None:
    """E = 10^6, p just over 1/2: every copy of a token drawn with p, ~0.4991 seen more than ceil(passes) times."""
    e, spe = 1_000_000, 3
    b, drawn = e * spe, e * spe // 2 + 7
    got = spillover(build(e, b, spe, drawn), drawn)
    assert got == every_term(e, b, spe, drawn) == (0.0, 0.49906913651718776)
