"""Which dataset indices training drew: how many samples, how often each, and when.

Training reads a dataset in index order (megatron's sampler from ``consumed_samples``, NeoX's sequential
sampler), so what it consumed is a *prefix* of the dataset's indices: ``j = 0 .. N-1``, each mapped to a
sample through the shuffle index. When a blend wraps a source (NeoX does so silently), a source's indices
are drawn several times; :class:`Consumption` therefore holds a count per index range (a few runs),
and optionally the global position (blend index) at which each index was drawn, for ``--manifest``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

#: Draws per index from which the audit folds whole passes out of a consumption (:meth:`Consumption.fold`): below
#: it the per-sample counts fit a byte and the exposure histograms have at most ``epochs * 253 + 1`` bins.
FOLD_FROM = 254
#: Most exposure-histogram bins an unfolded exposure may need (int64 each, two histograms): 2^24 is 256 MB.
MAX_BINS = 1 << 24


@dataclass(frozen=True)
class Fold:
    """Whole passes taken out of a consumption (:meth:`Consumption.fold`): every index ``j < length`` is drawn
    ``passes + d(j)`` times. The exposure pass then runs on ``d(j) + modulus`` draws (0 past ``length``), so a token
    covered ``c`` times by the samples of a single pass and ``e`` times by the ``d`` draws (``e < modulus``) has the
    folded exposure ``modulus * c + e``; its exposure is ``passes * c + e``: :meth:`value`. With ``passes >=
    modulus`` that map keeps the order of exposures, so a document's smallest folded exposure stays its smallest."""

    passes: int
    modulus: int

    def value(self, folded: int) -> int:
        """A token's exposure from its folded exposure."""
        return self.passes * (folded // self.modulus) + folded % self.modulus


@dataclass(frozen=True)
class Consumption:
    """How often each index ``j`` of one dataset (``0 <= j < length``) was drawn by training."""

    length: int  # The dataset's `len` (NeoX: samples - 1; megatron: samples).
    runs: tuple[tuple[int, int, int], ...]
    """``(start, stop, count)``: indices in ``[start, stop)`` were drawn ``count`` times; disjoint, sorted."""
    consumed: int  # Draws in total (the samples this dataset contributed).
    positions: np.ndarray | None = field(default=None, compare=False)
    """Optional: global position (top-level sample index) of the draw of index ``j`` (drawn once each)."""
    period: int = 0
    """When ``positions`` is None: the global position of draw ``k`` (0-based pass) of ``j`` is
    ``j + k * period`` (a dataset read on its own; ``period`` = its length); 0: positions unknown."""
    tokens_out: np.ndarray | None = field(default=None, compare=False)
    """Optional (int32, one per token of the split's documents in .idx order): each token's exposure is added into
    it, so passes over two indexes of one corpus sum (:func:`neox_epoch.resume.exposure.from_tokens`)."""
    tokens_window: tuple[int, int] | None = field(default=None, compare=False)
    """With ``tokens_out``: the split's documents ``[first, stop)`` (0: its first) whose tokens it holds (None: all)."""
    folded: Fold | None = field(default=None, compare=False)
    """Set on the consumption :meth:`fold` returns: its runs hold the folded draws."""

    @staticmethod
    def prefix(length: int, consumed: int) -> Consumption:
        """A dataset read on its own for ``consumed`` samples, wrapping modulo ``length`` (NeoX) when longer."""
        return Consumption.from_prefixes(length, [(consumed, 1)], period=length)

    @staticmethod
    def from_prefixes(
        length: int, prefixes: Sequence[tuple[int, int]], period: int = 0, positions: np.ndarray | None = None
    ) -> Consumption:
        """Indices drawn as ``mult`` passes over the prefix ``[0, P)`` each, wrapping modulo ``length``; a negative
        ``mult`` takes a prefix away again (``[a, b)`` is ``(b, 1), (a, -1)``)."""
        if length <= 0:
            return Consumption(length=max(length, 0), runs=(), consumed=0, positions=positions, period=period)
        prefixes = [(prefix, mult) for prefix, mult in prefixes if prefix > 0 and mult != 0]
        cuts: dict[int, int] = {}  # a prefix's partial pass: its multiplicity ends at its remainder
        for prefix, mult in prefixes:
            if prefix % length:
                cuts[prefix % length] = cuts.get(prefix % length, 0) + mult
        count = sum(-(-prefix // length) * mult for prefix, mult in prefixes)  # full and partial passes
        runs, start = [], 0
        for stop in [*sorted(cuts), length]:
            runs += [(start, stop, count)] if stop > start and count > 0 else []
            count, start = count - cuts.get(stop, 0), stop
        return Consumption(
            length=length,
            runs=tuple(runs),
            consumed=sum(prefix * mult for prefix, mult in prefixes),
            positions=positions,
            period=period,
        )

    @property
    def max_count(self) -> int:
        return max((c for _, _, c in self.runs), default=0)

    def fold(self, epochs: int, per_sample: bool) -> Consumption:
        """This consumption for an exposure pass over ``epochs`` copies, exact at any number of draws.

        From :data:`FOLD_FROM` draws on, the whole passes every index shares are folded out (:class:`Fold`): the
        pass counts small draws and the exposures are unfolded after it. Per-sample results (``per_sample``: the
        manifest's first and last draws and sums, the per-token exposures) cannot be unfolded: there, and where
        the indices do not share enough whole passes, the unfolded pass runs if its histograms fit
        :data:`MAX_BINS`; else :class:`ValueError` says why."""
        top = self.max_count
        if top < FOLD_FROM or epochs <= 0:
            return self
        covered = sum(b - a for a, b, _ in self.runs) == self.length
        passes = min(c for _, _, c in self.runs) if covered else 0
        modulus = epochs * (top - passes) + 1
        if passes >= modulus and not per_sample and self.tokens_out is None:
            runs = tuple((a, b, c - passes + modulus) for a, b, c in self.runs)
            return replace(self, runs=runs, folded=Fold(passes, modulus))
        if epochs * top + 1 > MAX_BINS or (self.tokens_out is not None and epochs * top >= 1 << 31):
            raise ValueError(
                f"{top} draws of a sample over {epochs} copies: the exposure per sample and token "
                f"needs {epochs * top + 1} counts, more than the {MAX_BINS} kept"
            )
        return self

    def segments(self, start: int, stop: int) -> list[tuple[int, int, int]]:
        """``[start, stop)`` cut into ``(lo, hi, draws)`` pieces (0 draws between the runs and past ``length``)."""
        pieces, at = [], start
        for a, b, c in self.runs:
            lo, hi = max(a, start), min(b, stop)
            if hi > lo:
                pieces += [(at, lo, 0)] if lo > at else []
                pieces.append((lo, hi, c))
                at = hi
        return pieces + ([(at, stop, 0)] if stop > at else [])

    def counts(self, start: int, stop: int) -> np.ndarray:
        """Draw counts of indices ``[start, stop)`` (0 at and past ``length``)."""
        out = np.zeros(max(0, stop - start), dtype=np.int64)
        for lo, hi, c in self.segments(start, stop):
            out[lo - start : hi - start] = c
        return out

    def first_last(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """Global positions of the first and last draw of indices ``[start, stop)`` (-1 if never drawn)."""
        counts = self.counts(start, stop)
        indices = np.arange(start, stop, dtype=np.int64)
        if self.positions is None and self.period > 0:
            return np.where(counts > 0, indices, -1), np.where(counts > 0, indices + (counts - 1) * self.period, -1)
        first = np.full(indices.shape, -1, dtype=np.int64)
        if self.positions is not None:
            drawn = (indices < self.positions.shape[0]) & (counts > 0)
            first[drawn] = self.positions[indices[drawn]]
        return first, first.copy()
