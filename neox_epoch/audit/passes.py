"""The passes over an index's files: :func:`scan_documents` (document ids inside the .idx), :func:`count_draws`
(the shuffle index a permutation; with a consumption, each sample's draw count), :func:`walk_stream` (every sample
boundary at ``i * seq_length`` of the stream the document index and the *current* .idx sizes give; copies per
document; the exposure)."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from neox_epoch.audit.exposure import PIECES, SPLIT_MIN, StreamPass, kernel, zeros
from neox_epoch.audit.findings import Finding, finding
from neox_epoch.audit.index_report import DIVERGENCE, MIXED, STALE_HINT
from neox_epoch.errors import FileProblem
from neox_epoch.formats.npy import NpyReader, Progress
from neox_epoch.semantics.consumption import Consumption

#: entries of doc_idx (and rows of sample_idx) per chunk
STREAM_CHUNK = 1 << 20


@dataclass(frozen=True)
class SampleGrid:
    """Where an index's sample rows belong: row ``i`` at stream token ``i * seq_length``, rows ``0 .. samples``."""

    samples: int  # S: the sample index's rows - 1.
    seq_length: int


class DocumentScan(NamedTuple):
    """:func:`scan_documents`' answer."""

    first_id: int  # The smallest document id.
    stop_id: int  # The largest + 1.
    problem: Finding | None
    ids_mix: int | None  # The ids' mix sum (the kernel's scan; None for dtypes not int32/int64).


class Scattered(NamedTuple):
    """:func:`_scatter`'s answer."""

    bad: int  # The position in ``ids`` of the first id outside the store (-1: none).
    mix: int  # The ids' mix sum.
    largest: int  # Their largest id (-1: none).


class RowPiece(NamedTuple):
    """Sample rows of one document chunk (:meth:`SampleRows.upto`)."""

    first_row: int
    previous: int  # The document position of the row before the first.
    rows: np.ndarray


class RowCheck(NamedTuple):
    """:func:`check_rows`' answer."""

    last: int | None  # The stream position of row S when among the rows.
    problem: Finding | None


# ---- stage 3: the passes ---------------------------------------------------------------------------------


def scan_documents(reader: NpyReader, sequences: int, idx_path: str, progress: Progress) -> DocumentScan:
    """(the smallest document id, the largest + 1, a problem, the ids' mix sum: the kernel's scan, None for other
    dtypes than int32/int64): the ids must be inside the .idx."""
    fast = reader.info.dtype in (np.dtype(np.int32), np.dtype(np.int64))
    scans = [
        kernel.scan(ids) if fast else (int(ids.min()), int(ids.max()), 0)
        for _, ids in reader.chunks(progress=progress, label="documents")
    ]
    mix = sum(scan[2] for scan in scans) % (1 << 64) if fast else None
    if not scans:
        return DocumentScan(
            0, 0, finding(reader.info.path, "document index", "at least one document", "an empty array"), mix
        )
    low, high = min(scan[0] for scan in scans), max(scan[1] for scan in scans)
    if low < 0 or high >= sequences:
        return DocumentScan(
            low,
            high + 1,
            finding(
                reader.info.path,
                "document ids",
                f"ids in [0, {sequences}) (sequences of {idx_path})",
                f"id {low if low < 0 else high}",
                "the index belongs to another (larger) corpus: " + STALE_HINT,
            ),
            mix,
        )
    return DocumentScan(low, high + 1, None, mix)


@dataclass(frozen=True)
class Draws:
    """The shuffle pass: a permutation, and each sample's draw count."""

    counts: np.ndarray | None
    """Draw count per sample, or uint64 words of one bit per sample (the kernel's, at most one draw each); None: no
    consumption, or the shuffle index is not a permutation."""
    sample_draws: np.ndarray | None  # `[S, 2]` first and last global draw position of each sample (manifest only).
    tops: tuple[tuple[int, int, int], ...] = ()  # (start, stop, largest id) of the chunks read, in order.
    findings: tuple[Finding, ...] = ()

    def first_block_max(self, reader: NpyReader, first_block: int) -> int:
        """The largest id among the first ``first_block`` entries (-1: none), from the chunks' (the one across the
        block's end read again)."""
        largest = -1
        for start, stop, top in self.tops:
            if start < first_block:
                largest = max(largest, top if stop <= first_block else int(reader.read(start, first_block).max()))
        return largest


def count_draws(
    reader: NpyReader,
    samples: int,
    consumption: Consumption | None,
    manifest: bool,
    progress: Progress,
    exact: bool = False,
) -> Draws:
    """Each id in ``[0, S)`` once; ``counts[shuffle[j]]`` = the draws of dataset index ``j``. The ids' mix sum (the
    kernel's ``mixed``) says whether they are a permutation (each count then written once); the ``exact`` pass, which
    counts every id, says which are missing."""
    path = reader.info.path
    if reader.info.rows != samples:
        wrong = finding(
            path, "shuffle index length", f"{samples} (rows of the sample index - 1)", reader.info.rows, MIXED
        )
        return Draws(None, None, (), (wrong,))
    hashing = not exact
    dtype = _count_dtype(hashing, consumption.max_count if consumption is not None else 0, manifest)
    store = (
        None if hashing and consumption is None else zeros(-(-samples // 64) if dtype == np.uint64 else samples, dtype)
    )
    sample_draws = np.full((samples, 2), -1, np.int64) if manifest and consumption is not None else None
    tops: list[tuple[int, int, int]] = []
    mix_sum = 0
    for start, ids in reader.chunks(rows=STREAM_CHUNK, progress=progress, label="shuffle"):
        stop = start + ids.shape[0]
        bad, mix, largest = _shuffle_chunk(store, ids, start, consumption, hashing, samples)
        tops.append((start, stop, largest))
        if bad >= 0:
            entry = finding(
                path,
                "shuffle entry",
                f"sample ids in [0, {samples})",
                f"{int(ids[bad])} at position {start + bad}",
                MIXED,
            )
            return Draws(None, None, (), (entry,))
        mix_sum += mix
        if sample_draws is not None and consumption is not None:
            sample_draws[ids, 0], sample_draws[ids, 1] = consumption.first_last(start, stop)
    if hashing:
        if mix_sum % (1 << 64) == kernel.mixed(0, samples):
            return Draws(store, sample_draws, tuple(tops))
        return count_draws(reader, samples, None, manifest, progress, exact=True)
    assert store is not None
    if not store.all():  # (no temporary array of S flags)
        missing = np.flatnonzero(store == 0)
        repeated = finding(
            path,
            "shuffle permutation",
            f"each sample id in [0, {samples}) exactly once",
            f"{missing.size} ids missing (first: {int(missing[0])}), so others repeat",
            "the shuffle index is damaged or from another build: " + STALE_HINT,
        )
        return Draws(None, None, (), (repeated,))
    store -= 1
    return Draws(store if consumption is not None else None, sample_draws, tuple(tops))


def _count_dtype(hashing: bool, top: int, manifest: bool) -> type:
    """The draw counts' store: one bit per sample when none is drawn twice and the ids are hashed (the stream pass
    reads them at random: from cache; not for the manifest, whose sample_draws the kernel reads up to the draws'
    length), else the narrowest unsigned type above the most draws of one sample."""
    if hashing and top <= 1 and not manifest:
        return np.uint64
    return np.uint8 if top < 254 else np.uint16 if top < 65534 else np.uint32


def _shuffle_chunk(
    store: np.ndarray | None,
    ids: np.ndarray,
    start: int,
    consumption: Consumption | None,
    hashing: bool,
    samples: int,
) -> tuple[int, int, int]:
    """One chunk of the shuffle index into ``store`` (when counted): the position of its first id outside
    ``[0, samples)`` (-1: none), its ids' mix sum (0 when not hashed or bad) and its largest id."""
    if store is None:  # (only hashed: the range checked here, the kernel's mix)
        largest = int(ids.max()) if ids.size else -1
        if ids.size and (int(ids.min()) < 0 or largest >= samples):
            return int(np.argmax((ids < 0) | (ids >= samples))), 0, largest
        return -1, kernel.mixed(ids) if hashing else 0, largest
    pieces = (
        consumption.segments(start, start + ids.shape[0])
        if consumption is not None
        else [(start, start + ids.shape[0], 0)]
    )
    bad, mix, largest = _scatter(store, ids, start, pieces, 0 if hashing else 1, samples)
    return bad, mix, largest


def _scatter(
    store: np.ndarray, ids: np.ndarray, start: int, pieces: list[tuple[int, int, int]], offset: int, samples: int
) -> Scattered:
    """``store[ids] = draws + offset`` (zeros not written), piece by piece (the kernel's ``scatter``): the position in
    ``ids`` of the first id outside the store (-1: none), the ids' mix sum and their largest id."""
    mix, largest = 0, -1
    for lo, hi, count in pieces:
        part = ids[lo - start : hi - start]
        bad, part_mix, top = kernel.scatter(part, store, count + offset, samples)
        mix, largest = mix + part_mix, max(largest, top) if part.size else largest
        if bad >= 0:
            return Scattered(lo - start + bad, mix, largest)
    return Scattered(-1, mix, largest)


class SampleRows:
    """The sample index's rows in order, read in chunks (:func:`check_rows` checks them)."""

    def __init__(self, reader: NpyReader) -> None:
        self.reader, self.next_row, self.first_row, self.previous = reader, 0, 0, 0
        self.pending = np.zeros((0, 2), np.int64)

    def upto(self, stop: int) -> list[RowPiece]:
        """The next rows whose document position is below ``stop``, as pieces (first row, the document position of
        the row before it, rows), views of the chunks read (rows out of order are cut anywhere: check_rows finds
        them)."""
        pieces = []
        while self.pending.shape[0] or self.next_row < self.reader.info.rows:
            if not self.pending.shape[0]:
                self.pending = self.reader.read(self.next_row, self.next_row + STREAM_CHUNK)
                self.next_row += self.pending.shape[0]
            cut = bisect_left(self.pending[:, 0], stop)  # (np.searchsorted would copy the strided column)
            if cut:
                pieces.append(RowPiece(self.first_row, self.previous, self.pending[:cut]))
                self.previous = int(self.pending[cut - 1, 0])
            self.pending, self.first_row = self.pending[cut:], self.first_row + cut
            if self.pending.shape[0]:
                break
        return pieces

    def leftover(self, entries: int) -> Finding | None:
        """A row still unread once the document index ran out."""
        if not self.pending.shape[0] and self.next_row >= self.reader.info.rows:
            return None
        row = self.first_row
        position = int(self.pending[0, 0]) if self.pending.shape[0] else int(self.reader.read(row, row + 1)[0, 0])
        return finding(
            self.reader.info.path,
            "sample index range",
            f"document positions < {entries} (entries of doc_idx)",
            f"row {row} points at position {position}",
            "the sample index points past the document index: the files come from different builds. " + STALE_HINT,
        )


def _row_order(path: str, first_row: int, rows: np.ndarray, previous: int) -> Finding | None:
    """Rows going back in the document index, or a negative offset."""
    back = np.flatnonzero(np.diff(rows[:, 0], prepend=previous) < 0)
    if back.size:
        return finding(
            path,
            "sample index order",
            "non-decreasing document positions",
            f"row {first_row + back[0]} goes back to {int(rows[back[0], 0])}",
            "the sample index is damaged: " + STALE_HINT,
        )
    negative = np.flatnonzero(rows[:, 1] < 0)
    if negative.size:
        return finding(path, "sample offset", ">= 0", f"{int(rows[negative[0], 1])} at row {first_row + negative[0]}")
    return None


def check_rows(path: str, piece: RowPiece, start: int, positions: np.ndarray, grid: SampleGrid) -> RowCheck:
    """Sample boundaries ``piece.rows`` (from row ``first_row``; the row before at document position ``previous``) of
    the document chunk at ``start`` whose copies start at ``positions`` (one more: the chunk's end): in order, row
    ``i`` at ``i * seq_length``, every offset inside its document (the kernel's ``rows``; numpy to say where a row is
    off). Returns the stream position of row S when among them, and the first problem."""
    first_row, previous, rows = piece
    samples, seq_length = grid.samples, grid.seq_length
    count = rows.shape[0]
    if not count:
        return RowCheck(None, None)
    good = kernel.rows(positions, rows, start, first_row, seq_length, samples) < 0
    order = None if good else _row_order(path, first_row, rows, previous)
    if order is not None:
        return RowCheck(None, order)
    # (rows in order from `previous` are entries of this chunk) row S: where the last (dropped or kept) sample ends
    last = int(positions[int(rows[-1, 0]) - start]) + int(rows[-1, 1]) if first_row + count - 1 == samples else None
    if good:
        return RowCheck(last, None)
    local = np.clip(rows[:, 0].astype(np.intp) - start, 0, positions.shape[0] - 2)  # (upto: in range)
    where = positions[local] + rows[:, 1]
    expected = np.arange(first_row, first_row + count, dtype=np.int64) * seq_length
    bad = (where > positions[local + 1]) | (rows[:, 1] < 0) | ((where != expected) & (expected < samples * seq_length))
    if not bad.any():
        return RowCheck(last, None)
    at = int(np.argmax(bad))
    entry, offset, size = int(rows[at, 0]), int(rows[at, 1]), int(positions[local[at] + 1] - positions[local[at]])
    row = f"sample_idx[{first_row + at}] = ({entry}, {offset})"
    found = (
        f"{row}: offset past the end of the document at entry {entry} ({size} tokens)"
        if offset > size
        else f"{row} at token {int(where[at])}"
    )
    expected_text = (
        f"stream token {(first_row + at) * seq_length} (= {first_row + at} x seq_length {seq_length}) "
        "from doc_idx and the current .idx sizes"
    )
    return RowCheck(last, finding(path, "sample boundary", expected_text, found, DIVERGENCE))


@dataclass(frozen=True)
class Stream:
    """The stream pass: copies per document, the stream's length, the boundary checks."""

    copies: np.ndarray | None  # Copies per document when they are not all `epochs` (None: they are).
    epochs: int  # The document index's rows / documents (0: not a multiple).
    total_tokens: int
    last_position: int | None
    tail_missing: int  # Documents absent from the last epoch's block (the 80% rule; 0 when not separated).
    findings: tuple[Finding, ...]


def _splits(pieces: list[RowPiece], start: int, count: int, grid: SampleGrid) -> np.ndarray | None:
    """Where the kernel's two threads may start a piece of the chunk of ``count`` copies at ``start``: ``PIECES - 1``
    of its sample rows ``pieces``, evenly apart (rows are seq_length tokens apart: the pieces hold about as many
    tokens), each as (its entry, the stream position the row says it is at) (None: one thread). A wrong one is that
    row off its boundary: check_rows finds it (the kernel keeps the positions exact)."""
    seq_length, samples = grid.seq_length, grid.samples
    total = sum(block.shape[0] for _, _, block in pieces)
    if count < SPLIT_MIN or not total:
        return None
    cuts: list[tuple[int, int]] = []
    wanted, seen = [k * total // PIECES for k in range(1, PIECES)], 0
    for first_row, _, block in pieces:
        while wanted and wanted[0] < seen + block.shape[0]:
            row = wanted.pop(0) - seen
            entry, offset = int(block[row, 0]) - start, int(block[row, 1])
            base = (first_row + row) * seq_length - offset
            if (cuts[-1][0] if cuts else 0) < entry < count and offset >= 0 and base >= 0 and first_row + row < samples:
                cuts.append((entry, base))
        seen += block.shape[0]
    return np.array(cuts, np.int64) if cuts else None


@dataclass(frozen=True)
class StreamFiles:
    """What the stream pass reads of one index besides its walker."""

    doc: NpyReader
    sample: NpyReader
    grid: SampleGrid
    tail_from: int | None  # The document index entry where the last epoch's own block starts (None: not separate).
    ids_mix: int | None  # The ids' mix sum (scan_documents'): the copies are all there when it is range_mix.
    range_mix: int  # The split's ids' mix sum.


def _changed_ids(doc_r: NpyReader, start: int, what: str) -> FileProblem:
    """The document index's chunk at ``start`` holds an id outside the range its scan found."""
    return FileProblem(
        doc_r.info.path,
        "document ids",
        "the ids the first pass over the file found",
        f"in the chunk from entry {start}: {what}",
        "the file changed while being read (a rank 0 rebuilding the index?): audit it again once it is complete",
    )


def walk_stream(files: StreamFiles, walker: StreamPass, progress: Progress) -> Stream:
    """One pass over doc_idx with sample_idx alongside (see :class:`StreamPass` for the exposure); the mix sums say
    whether the copies are all there, or are counted one by one."""
    doc_r, sample_r, grid, tail_from = files.doc, files.sample, files.grid, files.tail_from
    rows = SampleRows(sample_r)
    problem: Finding | None = None
    last: int | None = None
    tail = np.zeros(walker.sizes.shape[0], bool) if tail_from is not None else None
    buffer = np.empty(0, doc_r.info.dtype)
    for start, mapped in doc_r.chunks(rows=STREAM_CHUNK, progress=progress, label="stream"):
        # read once: a rank 0 rewriting the file meanwhile changes no id checked below (one buffer: no fresh pages)
        buffer = buffer if buffer.shape[0] >= mapped.shape[0] else np.empty(mapped.shape[0], mapped.dtype)
        ids = buffer[: mapped.shape[0]]
        ids[...] = mapped
        pieces = rows.upto(start + ids.shape[0]) if problem is None else []
        try:
            positions = walker.advance(ids, _splits(pieces, start, ids.shape[0], grid))
        except IndexError as outside:  # (ids scanned in range before: the file changed since)
            raise _changed_ids(doc_r, start, str(outside)) from None
        if tail is not None and tail_from is not None and start + ids.shape[0] > tail_from:
            tail[ids[max(0, tail_from - start) :] - walker.first_id] = True
        for piece in pieces:
            found_last, problem = check_rows(sample_r.info.path, piece, start, positions, grid)
            last = found_last if found_last is not None else last
            if problem is not None:
                break
    problem = problem or rows.leftover(doc_r.info.rows)
    copies = None
    # the mix sum says they are not all `epochs` (or the ids were not hashed): count them
    if not walker.copies_match(files.ids_mix, files.range_mix):
        copies = np.zeros(walker.sizes.shape[0], np.int64)
        for start, mapped in doc_r.chunks(rows=STREAM_CHUNK):
            local = np.array(mapped, np.int64) - walker.first_id
            if local.size and (int(local.min()) < 0 or int(local.max()) >= copies.shape[0]):
                raise _changed_ids(doc_r, start, "a document id outside the scanned range")
            copies += np.bincount(local, minlength=copies.shape[0])
    return Stream(
        copies,
        walker.epochs,
        walker.position,
        last,
        0 if tail is None else int(np.count_nonzero(~tail)),
        (problem,) if problem is not None else (),
    )
