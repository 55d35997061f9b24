"""Exposure when every document of the split is in the document index exactly once or twice.

That is the common dense case: one epoch (megatron-core without a repeat) or the two NeoX builds for a
"one epoch" request, consumed part way. A document's exposure is then complete at its last copy, so the
stream pass (C extension, ``stream_pair``) computes it there, from the stream positions of its copies and
the draw counts ``c`` of the samples they fall in, straight into the token and document histograms: no
change log, no last pass over the documents. With two copies each document has an 8-byte record (its .idx
size and the position of the copy met first); with one, none.

The result equals :meth:`~neox_epoch.audit.exposure.ExposureState.finalize` (the same definition,
``tests/test_audit_paths.py`` compares them); :mod:`neox_epoch.audit.validate` picks this path when the
hash sum of the ids says every document is there ``E`` in ``PAIR_EPOCHS`` times and no manifest is asked
for (a manifest needs the first/last draw per document, kept by the records path).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import numpy as np

from neox_epoch.audit.exposure import ExposureReport, report_from_histograms

#: copies per document this path handles (a test switches it off to exercise the records path)
PAIR_EPOCHS: tuple[int, ...] = (1, 2)
#: bits of a record's size field (larger documents: the records path)
SIZE_BITS = 24
#: stream positions a record holds (below 2^39: the top bit of its 40 marks a first copy kept by its draw counts)
POSITION_LIMIT = 1 << 39


@dataclass
class Pairs:
    """State of the pair computation of one index during the stream pass."""

    sizes: np.ndarray
    """The split's .idx sizes (contiguous int32, mapped in place)."""
    rec: np.ndarray | None
    """Every document twice: uint64 per document, ``(the first copy seen << 24) | size`` (C ``pair_init``);
    None: every document once."""
    hist: np.ndarray
    """int64 ``[2, 2, H]``: per thread of the stream pass, tokens and documents (at their minimum) by times seen."""
    stats: np.ndarray
    """int64 ``[2, 2]``: per thread, documents never seen and documents seen unevenly."""
    c: np.ndarray | None = None
    """Draw count per sample (``c[S] = 0``), set after the shuffle pass."""

    def report(self, consumed: int) -> ExposureReport:
        """The exposure report once the stream pass has seen every copy."""
        ht = self.hist[0, 0] + self.hist[1, 0]
        hd = self.hist[0, 1] + self.hist[1, 1]
        unseen, partial = (int(x) for x in self.stats.sum(axis=0))
        return report_from_histograms(ht, hd, unseen, partial, consumed)


def applies(epochs: int) -> bool:
    """Whether an index holding every document ``epochs`` times can take this path (checked before any work)."""
    return epochs in PAIR_EPOCHS


def make_pairs(ext: ModuleType, sizes: np.ndarray, epochs: int, tokens: int, top: int) -> Pairs | None:
    """The pair state for documents ``sizes`` each there ``epochs`` times and draw counts at most ``top``;
    None when this path does not apply (another number of copies, a document of 2^24 tokens or more,
    stream positions past the records' 40 bits, sizes not a contiguous int32 array)."""
    if not applies(epochs) or not hasattr(ext, "stream_pair") or epochs * tokens >= POSITION_LIMIT:
        return None
    if sizes.dtype != np.int32 or not sizes.flags.c_contiguous:
        return None
    rec = None
    if epochs == 2:
        rec = np.empty(sizes.shape[0], dtype=np.uint64)
        if int(ext.pair_init(sizes, rec)) >= 1 << SIZE_BITS:
            return None
    H = epochs * max(int(top), 0) + 1
    return Pairs(sizes=sizes, rec=rec, hist=np.zeros((2, 2, H), dtype=np.int64),
                 stats=np.zeros((2, 2), dtype=np.int64))
