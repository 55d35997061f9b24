"""How often each token of one index was an *input* token, for a given consumption.

Sample ``i`` covers the input tokens ``[i*L, i*L + L)`` of the stream (the documents of ``doc_idx``
concatenated), coverage ending at ``min(S*L, E*T)``; a token's exposure is the number of consumed samples
covering one of its ``E`` copies. :class:`StreamPass` walks the document index once with the compiled
``neox_epoch._exposure`` (see its comment); without it (no C compiler at install time, or NEOX_EPOCH_NO_EXTENSIONS)
:mod:`neox_epoch.audit.exposure_numpy` does the same in numpy, slower, with the same numbers (docs/install.md).
"""

from __future__ import annotations

import mmap
from collections import Counter
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from neox_epoch.audit import exposure_numpy
from neox_epoch.errors import AuditError
from neox_epoch.semantics.consumption import Fold
from neox_epoch.util import extensions

_compiled: ModuleType | None = extensions.load("_exposure")
COMPILED = _compiled is not None
"""Whether the compiled kernel runs (else numpy's, :mod:`neox_epoch.audit.exposure_numpy`: not built, no C compiler
at install time, or switched off)."""
kernel: ModuleType = _compiled if _compiled is not None else exposure_numpy


@dataclass
class ExposureReport:
    """Exposure of one index (or the sum over a blend's sources) for a given consumption."""

    consumed_samples: int  # Samples of this dataset drawn by training.
    tokens: dict[int, int]
    """``{times seen: tokens}`` over the split's tokens (bins with tokens only, in the JSON too)."""
    documents: dict[int, int]
    """``{times: documents}``, a document at the minimum exposure of its tokens; empty documents left out."""
    documents_unseen: int  # Documents none of whose tokens was an input.
    documents_partial: int  # Documents whose tokens were seen different numbers of times.
    tokens_unseen: int  # Tokens never an input.
    token_exposures: int  # Sum of all token exposures.
    second_pass_sample: int | None = None
    """0-based global sample at which this dataset's draws exceed one epoch's samples (None: never)."""
    second_pass_iteration: int | None = None
    """1-based iteration containing ``second_pass_sample`` (needs the global batch size)."""
    notes: list[str] = field(default_factory=list)  # Remarks (draws past the end, wraps).

    def to_json(self) -> dict[str, Any]:
        total, plain = sum(self.tokens.values()), ("documents_unseen", "documents_partial", "tokens_unseen")
        return {
            "consumed_samples": self.consumed_samples,
            "tokens": {str(times): count for times, count in sorted(self.tokens.items())},
            "documents": {str(times): count for times, count in sorted(self.documents.items())},
            **{key: getattr(self, key) for key in plain},
            "fraction_tokens_unseen": round(self.tokens_unseen / total, 6) if total else 0.0,
            "token_exposures": self.token_exposures,
            "second_pass_sample": self.second_pass_sample,
            "second_pass_iteration": self.second_pass_iteration,
            "notes": list(self.notes),
        }

    @staticmethod
    def combine(parts: list[ExposureReport]) -> ExposureReport:
        """Sum of several sources' exposures (a blend)."""
        tokens, documents = Counter[int](), Counter[int]()
        for part in parts:
            tokens.update(part.tokens)
            documents.update(part.documents)
        total = {
            key: sum(getattr(part, key) for part in parts)
            for key in ("consumed_samples", "documents_unseen", "documents_partial", "tokens_unseen", "token_exposures")
        }
        return ExposureReport(tokens=dict(sorted(tokens.items())), documents=dict(sorted(documents.items())), **total)


@dataclass(frozen=True)
class ManifestChunk:
    """Per-document exposure of a range of documents, for ``--manifest``."""

    documents: np.ndarray  # Document ids (sequence indices in the .idx).
    tokens: np.ndarray  # Tokens of each document.
    min_exposure: np.ndarray  # Minimum exposure over the document's tokens.
    max_exposure: np.ndarray  # Maximum exposure over the document's tokens.
    token_exposures: np.ndarray  # Sum of the exposures of the document's tokens.
    first: np.ndarray  # Global sample index of the first draw that covered the document (-1: never).
    last: np.ndarray  # Global sample index of the last draw that covered the document (-1: never).


PACKED = 1 << 24  # Documents below this size share a word of the stream pass's records with a position (see below).
SPLIT_MIN = 1 << 16  # Chunks of the document index with fewer entries are walked on one thread (tests lower it).
PIECES = 16  # Pieces of a chunk for the kernel's two threads.
SIZE_CHUNK = 1 << 18  # Sizes read, copied while in cache and their pages released, at a time.


def release(view: np.ndarray, start: int = 0, stop: int | None = None) -> None:
    """Drop the pages of rows ``[start, stop)`` of a view of a mapped file window from this process (they are read
    again from the page cache if touched again): the .idx sizes, once copied into the records, do not stay resident
    beside them (with 2^20-entry chunks, peak RSS x0.83 at 30M samples). Nothing for an array in memory."""
    base = view.base.obj if isinstance(view.base, memoryview) else view.base
    if not isinstance(base, mmap.mmap) or not hasattr(mmap, "MADV_DONTNEED") or view.ndim != 1 or not view.size:
        return
    stop = view.shape[0] if stop is None else min(stop, view.shape[0])
    origin = np.frombuffer(base, np.uint8, count=1).ctypes.data
    low = (view.ctypes.data + start * view.strides[0] - origin) // mmap.PAGESIZE * mmap.PAGESIZE
    high = min(len(base), view.ctypes.data + stop * view.strides[0] - origin)
    if high > low >= 0:
        base.madvise(mmap.MADV_DONTNEED, low, high - low)


def zeros(shape: int | tuple[int, ...], dtype: type) -> np.ndarray:
    """Zeros on transparent huge pages: numpy asks Linux for them for its large ``np.empty`` only (calloc's
    4 kB pages, ``np.zeros``, make each random access into hundreds of MB a TLB miss)."""
    out: np.ndarray = np.empty(shape, dtype)
    out.fill(0)
    return out


def from_histograms(
    tokens_hist: np.ndarray, documents_hist: np.ndarray, stats: np.ndarray, consumed: int, folded: Fold | None = None
) -> ExposureReport:
    """The report from histogram arrays indexed by times seen (``folded``: by folded exposures, unfolded here) and
    (unseen, partial) document counts."""
    value = folded.value if folded is not None else int
    tokens = {value(int(times)): int(tokens_hist[times]) for times in np.flatnonzero(tokens_hist)}
    return ExposureReport(
        consumed_samples=consumed,
        tokens=tokens,
        documents_unseen=int(stats[0]),
        documents_partial=int(stats[1]),
        documents={value(int(times)): int(documents_hist[times]) for times in np.flatnonzero(documents_hist)},
        tokens_unseen=tokens.get(0, 0),
        token_exposures=sum(times * count for times, count in tokens.items()),
    )


def packs(epochs: int, stats: tuple[int, int, int]) -> bool:
    """Whether an exposing pass packs its records (one word fewer: half the memory at 2 epochs): every size, (smallest,
    largest, sum) ``stats``, in 24 bits and a position + 1 in 39."""
    low, high, total = stats
    return epochs > 1 and 0 <= low <= high < PACKED and epochs * total < (1 << 39) - 1


def read_sizes(sizes: np.ndarray, epochs: int = 0) -> tuple[np.ndarray | None, tuple[int, int, int]]:
    """The sizes' (smallest, largest, sum) and, for an exposing pass over ``epochs`` (> 0), its records: a document's
    size and its earlier copies' positions + 1 (zero: not seen) in one row, packed when they fit (:func:`packs`:
    assumed, then filled again if not), on huge pages (one TLB entry per 2 MB), each page written once. One pass: a
    piece at a time scanned (the kernel's ``scan``, x0.4 numpy's three passes), copied while in cache and its pages
    released (:func:`release`; x0.8 a scan, then a copy, 30M samples). (Fresh pages cost: only what is needed.)"""
    records = np.empty((sizes.shape[0], epochs - (epochs > 1)), np.int64) if epochs > 0 else None
    low, high, total = 0, 0, 0
    for start in range(0, sizes.shape[0], SIZE_CHUNK):
        part = sizes[start : start + SIZE_CHUNK]
        least, most, _, plain = (
            kernel.scan(part)
            if part.dtype == np.int32
            else (int(part.min()), int(part.max()), 0, int(part.sum(dtype=np.int64)))
        )
        low, high, total = min(low, least) if start else least, max(high, most), total + plain
        if records is not None:
            records[start : start + SIZE_CHUNK, 0], records[start : start + SIZE_CHUNK, 1:] = part, 0
        release(sizes, start, start + SIZE_CHUNK)
    if records is not None and records.shape[1] != epochs - packs(epochs, (low, high, total)):  # (2^24 tokens or more)
        records = np.empty((sizes.shape[0], epochs), np.int64)
        records[:, 0], records[:, 1:] = sizes, 0
    return records, (low, high, total)


class StreamPass:
    """The walk over the document index, chunk by chunk: copy positions, the copies' check and the exposure."""

    def __init__(
        self,
        sizes: np.ndarray,
        first_id: int,
        epochs: int,
        draws: np.ndarray | None,
        seq_length: int,
        sample_draws: np.ndarray | None = None,
        tokens_out: np.ndarray | None = None,
        tokens_window: tuple[int, int] | None = None,
        stats: tuple[int, int, int] | None = None,
        records: np.ndarray | None = None,
    ) -> None:
        self.first_id, self.epochs, self.seq_length = first_id, epochs, seq_length
        self.position, self.buffer = 0, np.empty(0, np.int64)
        self.exposing = draws is not None and epochs > 0
        self.draws = draws if self.exposing else None
        if self.exposing and kernel is exposure_numpy:
            extensions.say_missing("_exposure", "the audit's stream pass runs in numpy")
        self.samples = (
            0 if draws is None else draws.shape[0] * (64 if draws.dtype == np.uint64 else 1)
        )  # (bits past S: 0)
        top = (
            0 if draws is None or not draws.size else int(draws.any()) if draws.dtype == np.uint64 else int(draws.max())
        )
        bins = epochs * top + 1  # (uint64 draws: one bit per sample)
        self.tokens_hist, self.documents_hist = np.zeros(bins, np.int64), np.zeros(bins, np.int64)
        self.stats = np.zeros(3, np.int64)  # never seen, seen unevenly, exposures off the bins
        documents = sizes.shape[0]
        if self.exposing and records is None:
            records, stats = read_sizes(sizes, epochs)
        stats = stats or read_sizes(sizes)[1]
        self.records = records if self.exposing else None
        packed = self.records is not None and epochs > 1 and self.records.shape[1] == epochs - 1
        self.sizes = sizes if packed else np.empty(documents, np.int32) if self.records is None else self.records[:, 0]
        if self.records is None:
            self.sizes[...] = sizes
            release(sizes)
        self.sample_draws = sample_draws if self.exposing else None
        self.per_document = zeros((documents, 5), np.int64) if self.sample_draws is not None else None
        # each token's exposure added into tokens_out (resume_exposure.from_tokens): where a document's tokens start
        # there, -1 for a document outside tokens_window (the documents whose tokens it holds)
        first, stop = tokens_window or (0, documents)
        self.token_starts = np.full(documents, -1, np.int64) if tokens_out is not None else None
        if self.token_starts is not None and stop > first:
            self.token_starts[first:stop] = np.cumsum(sizes[first:stop], dtype=np.int64) - sizes[first:stop]
        self.tokens_out = tokens_out if tokens_out is not None and self.exposing else None
        if (
            tokens_out is not None
            and self.tokens_out is not None
            and (tokens_out.dtype != np.int32 or tokens_out.size != sizes[first:stop].sum(dtype=np.int64))
        ):
            raise AuditError(
                f"tokens_out: int32, one per token of the documents, expected; got {tokens_out.dtype} "
                f"{tokens_out.shape}"
            )

    def advance(self, documents: np.ndarray, splits: np.ndarray | None = None) -> np.ndarray:
        """The stream positions of the copies ``documents`` (the document index's next chunk) and where it ends;
        ``splits``: int64 ``(entry, its position by the sample index)`` rows where the kernel's two threads may start a
        piece of the chunk."""
        if self.buffer.shape[0] <= documents.shape[0]:
            self.buffer = np.empty(documents.shape[0] + 1, np.int64)
        positions = self.buffer[: documents.shape[0] + 1]  # one buffer for every chunk (no fresh pages each time)
        positions[0] = self.position
        ids, sizes = np.ascontiguousarray(documents, dtype=np.int32), self.sizes if self.records is None else None
        positions[-1] = kernel.stream(
            ids,
            self.first_id,
            sizes,
            self.records,
            self.position,
            self.epochs,
            self.draws,
            self.seq_length,
            self.samples,
            positions,
            self.tokens_hist,
            self.documents_hist,
            self.stats,
            self.sample_draws,
            self.per_document,
            self.tokens_out,
            self.token_starts,
            splits,
        )
        self.position = int(positions[-1])
        return positions

    def copies_match(self, ids_mix: int | None, range_mix: int) -> bool:
        """Every document seen ``epochs`` times: the ids' mix sum against ``epochs`` times the split's (``range_mix``,
        the kernel's ``mixed`` over its ids; ``ids_mix`` None, ids neither int32 nor int64:
        count them)."""
        if self.epochs <= 0 or ids_mix is None:
            return False
        return ids_mix % (1 << 64) == self.epochs * range_mix % (1 << 64)

    def report(self, consumed: int, folded: Fold | None = None) -> ExposureReport:
        """The exposure once every copy was seen (each document exactly ``epochs`` times; ``folded``: the draws were
        folded, :class:`~neox_epoch.semantics.consumption.Fold`)."""
        if self.stats[2]:
            raise AuditError("the stream pass found an exposure outside its histograms (inconsistent inputs)")
        return from_histograms(self.tokens_hist, self.documents_hist, self.stats, consumed, folded)

    def manifest(self, chunk_documents: int = 1 << 20) -> list[ManifestChunk]:
        """The per-document rows (every document is present: the copies matched), in chunks."""
        assert self.per_document is not None, "the pass was built without sample_draws"
        chunks = []
        for start in range(0, self.sizes.shape[0], chunk_documents):
            present = np.arange(start, min(start + chunk_documents, self.sizes.shape[0]))
            rows = self.per_document[present].T
            chunks.append(ManifestChunk(present + self.first_id, self.sizes[present].astype(np.int64), *rows))
        return chunks
