"""Tokens a run never sees, from the index structure: exact where the structure fixes it, else expected.

Counts the ``seq_length`` input tokens of each drawn sample (the extra label token is the next sample's
first input token), as the audit does. Where the shuffle decides which copies of a token are drawn, the
figure is the expectation over that shuffle, computed in log space so any number of epochs is fine.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from neox_epoch.semantics import DatasetBuild
from neox_epoch.semantics.neox_index import epoch_starts


@dataclass(frozen=True)
class Unseen:
    """Tokens of a split never drawn, and whether the number is exact or an expectation."""

    tokens: int
    exact: bool


def blocks(build: DatasetBuild, seq_length: int, extra_token: int, separate_all: bool) -> list[tuple[int, int]]:
    """The index's shuffle blocks as (first sample, epochs of tokens it spans).

    Jointly shuffled: one block of E epochs. megatron's 80% rule: the first E-1 epochs, then the last.
    ``separate_all`` (neox_epoch's separate_epochs): one block per epoch.
    """
    e, t = build.epochs, build.tokens
    if e <= 1:
        return [(0, 1)]
    if separate_all:
        return [(s, 1) for s in epoch_starts(t, seq_length, e)[:-1]]
    if build.separate_final_epoch:
        return [(0, e - 1), (((e - 1) * t - extra_token) // seq_length, 1)]
    return [(0, e)]


def expected_unseen(
    build: DatasetBuild, drawn: int, seq_length: int, extra_token: int = 1, separate_all: bool = False
) -> Unseen:
    """Tokens of the split never among the input tokens of its first ``drawn`` samples (in shuffled order).

    A block drawn completely covers every token of its epochs (up to the tail of its last epoch, which the
    next block covers again). A block of one epoch drawn in part covers ``k * seq_length`` distinct tokens,
    exactly. A block of several epochs drawn in part: each token has one copy per epoch, drawn with
    probability p, so ``T * (1 - p)^epochs`` is expected unseen.
    """
    t, b = build.tokens, build.samples_built
    if drawn <= 0 or b <= 0:
        return Unseen(t, True)
    drawn = min(drawn, b)
    parts = blocks(build, seq_length, extra_token, separate_all)
    ends = [s for s, _ in parts[1:]] + [b]
    covered_whole = 0  # epochs of tokens in blocks drawn completely
    for (start, epochs), end in zip(parts, ends):
        if drawn >= end:
            covered_whole += epochs
            continue
        k = drawn - start
        if covered_whole >= 1:
            # the earlier blocks covered every token at least once, except the tail of the first epoch's
            # stream when that block was one epoch: at most seq_length + a tokens, seen again with probability k/n
            tail = max(0, t - start * seq_length) if covered_whole == 1 and start * seq_length < t else 0
            n = end - start
            return Unseen(round(tail * (1 - k / n)) if n else tail, tail == 0)
        if epochs == 1:
            return Unseen(max(0, t - k * seq_length), True)
        p = k / (end - start)
        return Unseen(round(t * math.exp(epochs * math.log1p(-p))) if p < 1 else 0, False)
    if covered_whole == 1:  # E == 1 drawn whole: the stream's last partial sample is never drawn
        return Unseen(max(0, t - b * seq_length), True)
    return Unseen(0, True)


#: a Binomial term whose log is below this is 0.0 in float64 (exp underflows past about -745.1)
_ZERO_LOG = -760.0


def spillover(build: DatasetBuild, drawn: int) -> tuple[float, float] | None:
    """Cross-epoch spillover of a jointly shuffled E-epoch index drawn short: the expected share of tokens
    never seen and the share seen more often than ``ceil(passes)``, or None when it does not apply.

    Each token has E copies, each drawn with probability ``p = drawn / samples_built``; its draws are
    Binomial(E, p). Terms are summed in log space (E may be in the millions), in ascending k, over the
    k whose term is not 0.0 in float64 (:func:`_nonzero_terms`), so the sum is the one over every k.
    """
    e, b = build.epochs, build.samples_built
    if e <= 1 or build.separate_final_epoch or drawn <= 0 or drawn >= b:
        return None
    p = drawn / b
    log_p, log_q = math.log(p), math.log1p(-p)
    unseen = math.exp(e * log_q)
    upto = min(e, math.ceil(drawn / max(1, build.samples_per_epoch)))
    lgamma_e = math.lgamma(e + 1)

    def log_term(k: int) -> float:
        return lgamma_e - math.lgamma(k + 1) - math.lgamma(e - k + 1) + k * log_p + (e - k) * log_q

    cdf = 0.0
    for k in _nonzero_terms(log_term, min(upto, math.floor((e + 1) * p)), upto):
        cdf += math.exp(log_term(k))
    return unseen, max(0.0, 1.0 - cdf)


def _nonzero_terms(log_term: Callable[[int], float], mode: int, upto: int) -> range:
    """The k in ``[0, upto]`` outside of which every term is 0.0: the log terms of a Binomial rise up to its
    mode and fall after it, so the first k above ``_ZERO_LOG`` is found by bisection below the mode, and the
    last by bisection above it. Adding the 0.0 terms left out changes no bit of the sum."""
    lo, hi = 0, mode
    if log_term(0) <= _ZERO_LOG:
        while hi - lo > 1:  # log_term(lo) <= _ZERO_LOG < log_term(hi), or hi is the mode
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if log_term(mid) <= _ZERO_LOG else (lo, mid)
        lo = hi
    first, lo, hi = lo, mode, upto
    if log_term(upto) <= _ZERO_LOG:
        while hi - lo > 1:  # log_term(lo) > _ZERO_LOG (or lo is the mode) >= log_term(hi)
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if log_term(mid) > _ZERO_LOG else (lo, mid)
        hi = lo
    return range(first, hi + 1)
