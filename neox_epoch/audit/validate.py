"""Audit one GPT index (a doc/sample/shuffle triple) against the .bin/.idx it was built from.

One way through: :func:`describe` (the name or the description, into the report), :func:`check_headers`
(complete .npy files of the dtypes and shapes the frameworks write), :func:`scan_documents` (document ids
inside the .idx), :func:`count_draws` (the shuffle index a permutation; with a consumption, each sample's
draw count), :func:`walk_stream` (every sample boundary at ``i * seq_length`` of the stream the document
index and the *current* .idx sizes give; copies per document; the exposure), then :func:`number_findings`
compares what the framework would build (:mod:`neox_epoch.semantics.built`) with what the files say. A
damaged file is a finding, never a traceback.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from neox_epoch.audit.exposure import (
    PIECES,
    SPLIT_MIN,
    ExposureReport,
    ManifestChunk,
    StreamPass,
    kernel,
    read_sizes,
    zeros,
)
from neox_epoch.audit.findings import Finding, JsonFields, finding
from neox_epoch.errors import AuditError, FileProblem, IndexFileError
from neox_epoch.formats import cache_names as names
from neox_epoch.formats import idx as idxmod
from neox_epoch.formats.cache_descriptions import read_legacy_description, read_mcore_description, tokenizer_form_note
from neox_epoch.formats.npy import NpyInfo, NpyReader, Progress, read_header
from neox_epoch.semantics import mcore as mcore_sem
from neox_epoch.semantics.built import IndexNumbers, extra_token_from_files, index_numbers
from neox_epoch.semantics.consumption import FOLD_FROM, Consumption
from neox_epoch.semantics.orders import seeded_orders
from neox_epoch.util.inputs import changed_files, file_states
from neox_epoch.util.mapguard import guarded

#: entries of doc_idx (and rows of sample_idx) per chunk
STREAM_CHUNK = 1 << 20
#: regenerate doc_idx/shuffle_idx from the seed when they hold at most this many entries together
REGEN_LIMIT = 1 << 23
STALE_HINT = (
    "the cache was built from another version of the corpus or with another seq_length/split: "
    "delete these index files so the framework rebuilds them (NeoX reuses files by name alone)"
)
DIVERGENCE = "first divergence: " + STALE_HINT
MIXED = "doc/sample/shuffle files come from different builds: " + STALE_HINT


@dataclass
class IndexReport(JsonFields):
    """What one index is, as audited. JSON keys are the field names but digest (see docs/audit.md)."""

    kind: str
    path: str
    split: str
    files: dict[str, str] = field(default_factory=dict)
    data_prefix: str | None = None
    seq_length: int | None = None
    seed: int | None = None
    num_samples_requested: int | None = None
    epochs: int | None = None
    samples: int | None = None
    samples_per_epoch: int | None = None
    length: int | None = None
    separated_final_epoch: bool | None = None
    documents: int | None = None
    document_range: list[int] | None = None
    tokens: int | None = None
    add_extra_token: int | None = None
    pack_impl: str | None = None
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    exposure: ExposureReport | None = None
    digest: str = field(default="", repr=False)


# ---- stage 1: what the name or the description says ----------------------------------------------------

Bookends = tuple[float, float]


def describe(
    group: names.CacheGroup, report: IndexReport, add_extra_token: int | None
) -> tuple[str | None, Bookends | None]:
    """The index's parameters, as its name (NeoX) or description (megatron) gives them, into the report;
    returns (the data prefix, the split's bookends in the .idx: None when not recorded)."""
    neox = group.neox
    if neox is not None:
        report.seq_length, report.seed, report.num_samples_requested = neox.seq_length, neox.seed, neox.num_samples
        report.pack_impl, report.add_extra_token = neox.pack_impl, 1
        return neox.prefix, None
    path, mcore = group.files[names.DESCRIPTION], group.kind == names.MCORE
    description = (read_mcore_description if mcore else read_legacy_description)(path)
    if description.digest != group.digest:
        report.findings.append(
            finding(
                path,
                "description md5",
                f"{group.digest} (the hash in the file names)",
                description.digest,
                "the description was edited or belongs to other files: the cache cannot be trusted",
            )
        )
    if mcore:
        return _describe_mcore(group, report, path, description.fields, add_extra_token)
    fields, name = description.fields, description.fields.get("name")
    report.seq_length, report.seed, report.num_samples_requested = (
        fields.get("seq_length"),
        fields.get("seed"),
        fields.get("num_samples"),
    )
    report.split, report.add_extra_token = name if isinstance(name, str) else group.split, 1
    return fields.get("data_prefix"), None


def _describe_mcore(
    group: names.CacheGroup, report: IndexReport, path: str, fields: dict[str, Any], add_extra_token: int | None
) -> tuple[str | None, Bookends | None]:
    """megatron-core's description (``add_extra_token`` None: not recorded, inferred from the files later); a
    null split_matrix (blend_per_split) makes the split the whole .idx."""
    found = report.findings
    if fields.get("class") != "GPTDataset":
        found.append(finding(path, "description class", "GPTDataset", fields.get("class")))
    if fields.get("index_split") != group.split:
        found.append(
            finding(path, "description index_split", f"{group.split} (from the file names)", fields.get("index_split"))
        )
    numbers = {}
    for key, (low, high) in (("sequence_length", (1, 1 << 31)), ("random_seed", (0, 1 << 32))):  # (numpy's seeds)
        value = fields.get(key)
        numbers[key] = value if isinstance(value, int) and not isinstance(value, bool) and low <= value < high else None
        if numbers[key] is None:
            found.append(finding(path, f"description {key}", f"an integer in [{low}, {high})", repr(value)))
    matrix = fields.get("split_matrix")
    position = mcore_sem.SPLITS.index(group.split) if group.split in mcore_sem.SPLITS else -1
    bookends = (0.0, 1.0) if matrix is None else None
    if isinstance(matrix, list) and 0 <= position < len(matrix):
        pair = matrix[position]
        if not (
            isinstance(pair, list)
            and len(pair) == 2
            and all(type(v) in (int, float) and 0 <= v <= 1 for v in pair)
            and pair[0] <= pair[1]
        ):  # (NaN fails 0 <= v)
            found.append(
                finding(
                    path,
                    "description split_matrix",
                    f"bookends 0 <= start <= end <= 1 for the {group.split} split",
                    repr(pair),
                )
            )
        else:
            bookends = (float(pair[0]), float(pair[1]))
        found.extend(_split_findings(path, fields.get("split"), matrix))
    requested, prefix = fields.get("num_samples"), fields.get("dataset_path")
    report.seq_length, report.seed = numbers["sequence_length"], numbers["random_seed"]
    report.num_samples_requested = requested if isinstance(requested, int) else None
    report.add_extra_token = add_extra_token
    report.notes.extend(filter(None, [tokenizer_form_note(fields)]))
    return prefix if isinstance(prefix, str) else None, bookends


def _split_findings(path: str, split: Any, matrix: list[Any]) -> list[Finding]:
    """The description's split_matrix must be what megatron-core derives from its split string."""
    if not isinstance(split, str):
        return []
    try:
        mine: list[Any] | None = mcore_sem.split_matrix(split)
    except Exception:  # noqa: BLE001 - a damaged field is a finding
        mine = None

    def same(ours: Any, theirs: Any) -> bool:
        if ours is None or theirs is None:
            return ours is None and theirs is None
        return (
            isinstance(theirs, list)
            and len(theirs) == 2
            and all(type(t) in (int, float) and abs(o - t) <= 1e-9 for o, t in zip(ours, theirs))
        )

    if mine is not None and all(same(a, b) for a, b in zip(mine, matrix)):
        return []
    return [finding(path, "description split/split_matrix", f"split_matrix {mine} from split {split!r}", matrix)]


# ---- stage 2: the .npy headers ---------------------------------------------------------------------------


def check_dtype(info: NpyInfo, allowed: tuple[str, ...], ndim: int, role: str) -> tuple[NpyInfo | None, list[Finding]]:
    """(the header, None when the file cannot be read as an index at all; the findings)."""
    if info.dtype.kind not in "iu" or len(info.shape) != ndim:
        shape = "[N+1, 2]" if ndim == 2 else "[N]"
        return None, [
            finding(
                info.path,
                f"{role} dtype/shape",
                f"an integer array of shape {shape} ({' or '.join(allowed)})",
                f"{info.dtype} of shape {list(info.shape)}",
                "not an index the frameworks write: delete it to rebuild",
            )
        ]
    if ndim == 2 and info.shape[1] != 2:
        return None, [finding(info.path, "sample index shape", "[N+1, 2]", list(info.shape))]
    if info.dtype.name not in allowed:
        return info, [
            finding(
                info.path,
                f"{role} dtype",
                " or ".join(allowed),
                info.dtype.name,
                "the frameworks write these dtypes; this file was written by something else or converted",
            )
        ]
    return info, []


def check_headers(group: names.CacheGroup, packed: bool) -> tuple[list[NpyInfo | None], list[Finding]]:
    """The doc/sample/shuffle headers (None: not an index at all) and their findings: complete .npy files of
    the dtypes the frameworks write (NeoX's unpacked index: int64 document ids)."""
    doc, sample, shuffle = (read_header(group.files[role]) for role in names.GPT_ROLES)
    checked = [
        check_dtype(doc, ("int32",) if packed else ("int32", "int64"), 1, "document index"),
        check_dtype(sample, ("int32", "int64"), 2, "sample index"),
        check_dtype(shuffle, ("uint32", "int64"), 1, "shuffle index"),
    ]
    return [info for info, _ in checked], [problem for _, found in checked for problem in found]


# ---- stage 3: the passes ---------------------------------------------------------------------------------


def scan_documents(
    reader: NpyReader, sequences: int, idx_path: str, progress: Progress
) -> tuple[int, int, Finding | None, int | None]:
    """(the smallest document id, the largest + 1, a problem, the ids' mix sum: the kernel's scan, None without it
    or for other dtypes than int32/int64): the ids must be inside the .idx."""
    fast = kernel is not None and reader.info.dtype in (np.dtype(np.int32), np.dtype(np.int64))
    scans = [
        kernel.scan(ids) if fast else (int(ids.min()), int(ids.max()), 0)
        for _, ids in reader.chunks(progress=progress, label="documents")
    ]
    mix = sum(scan[2] for scan in scans) % (1 << 64) if fast else None
    if not scans:
        return 0, 0, finding(reader.info.path, "document index", "at least one document", "an empty array"), mix
    low, high = min(scan[0] for scan in scans), max(scan[1] for scan in scans)
    if low < 0 or high >= sequences:
        return (
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
    return low, high + 1, None, mix


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
    counts every id, runs without the kernel or to say which are missing."""
    path = reader.info.path
    if reader.info.rows != samples:
        return Draws(
            None,
            None,
            (),
            (
                finding(
                    path, "shuffle index length", f"{samples} (rows of the sample index - 1)", reader.info.rows, MIXED
                ),
            ),
        )
    top = consumption.max_count if consumption is not None else 0
    hashing = kernel is not None and not exact
    # with the kernel, one bit per sample when none is drawn twice (the stream pass reads them at random: from cache;
    # not for the manifest, whose sample_draws the kernel reads up to the draws' length)
    dtype = (
        np.uint64
        if hashing and top <= 1 and not manifest
        else np.uint8
        if top < 254
        else np.uint16
        if top < 65534
        else np.uint32
    )
    store = (
        None if hashing and consumption is None else zeros(-(-samples // 64) if dtype == np.uint64 else samples, dtype)
    )
    sample_draws = np.full((samples, 2), -1, np.int64) if manifest and consumption is not None else None
    tops: list[tuple[int, int, int]] = []
    mix_sum = 0
    for start, ids in reader.chunks(rows=STREAM_CHUNK, progress=progress, label="shuffle"):
        stop, bad = start + ids.shape[0], -1
        largest = int(ids.max()) if ids.size and (kernel is None or store is None) else -1
        if ids.size and (kernel is None or store is None) and (int(ids.min()) < 0 or largest >= samples):
            bad = int(np.argmax((ids < 0) | (ids >= samples)))
        if bad < 0 and store is not None:
            pieces = consumption.segments(start, stop) if consumption is not None else [(start, stop, 0)]
            bad, mix, top = _scatter(store, ids, start, pieces, 0 if hashing else 1, samples)
            largest = top if kernel is not None else largest
        else:
            mix = kernel.mixed(ids) if hashing and bad < 0 else 0
        tops.append((start, stop, largest))
        if bad >= 0:
            return Draws(
                None,
                None,
                (),
                (
                    finding(
                        path,
                        "shuffle entry",
                        f"sample ids in [0, {samples})",
                        f"{int(ids[bad])} at position {start + bad}",
                        MIXED,
                    ),
                ),
            )
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
        return Draws(
            None,
            None,
            (),
            (
                finding(
                    path,
                    "shuffle permutation",
                    f"each sample id in [0, {samples}) exactly once",
                    f"{missing.size} ids missing (first: {int(missing[0])}), so others repeat",
                    "the shuffle index is damaged or from another build: " + STALE_HINT,
                ),
            ),
        )
    store -= 1
    return Draws(store if consumption is not None else None, sample_draws, tuple(tops))


def _scatter(
    store: np.ndarray, ids: np.ndarray, start: int, pieces: list[tuple[int, int, int]], offset: int, samples: int
) -> tuple[int, int, int]:
    """``store[ids] = draws + offset`` (zeros not written), piece by piece (the kernel's ``scatter``; numpy, with intp
    indices, the ids checked before): the position in ``ids`` of the first id outside the store (-1: none), the
    ids' mix sum and their largest id (the kernel's; 0 and -1 without it)."""
    mix, largest = 0, -1
    for lo, hi, count in pieces:
        part = ids[lo - start : hi - start]
        if kernel is None:
            store[part.astype(np.intp)] = count + offset
            continue
        bad, part_mix, top = kernel.scatter(part, store, count + offset, samples)
        mix, largest = mix + part_mix, max(largest, top) if part.size else largest
        if bad >= 0:
            return lo - start + bad, mix, largest
    return -1, mix, largest


class SampleRows:
    """The sample index's rows in order, read in chunks (:func:`check_rows` checks them)."""

    def __init__(self, reader: NpyReader) -> None:
        self.reader, self.next_row, self.first_row, self.previous = reader, 0, 0, 0
        self.pending = np.zeros((0, 2), np.int64)

    def upto(self, stop: int) -> list[tuple[int, int, np.ndarray]]:
        """The next rows whose document position is below ``stop``, as pieces (first row, the document position of
        the row before it, rows), views of the chunks read (rows out of order are cut anywhere: check_rows finds them)."""
        pieces = []
        while self.pending.shape[0] or self.next_row < self.reader.info.rows:
            if not self.pending.shape[0]:
                self.pending = self.reader.read(self.next_row, self.next_row + STREAM_CHUNK)
                self.next_row += self.pending.shape[0]
            cut = bisect_left(self.pending[:, 0], stop)  # (np.searchsorted would copy the strided column)
            if cut:
                pieces.append((self.first_row, self.previous, self.pending[:cut]))
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


def check_rows(
    path: str,
    first_row: int,
    previous: int,
    rows: np.ndarray,
    start: int,
    positions: np.ndarray,
    samples: int,
    seq_length: int,
) -> tuple[int | None, Finding | None]:
    """Sample boundaries ``rows`` (from row ``first_row``; the row before at document position ``previous``) of the
    document chunk at ``start`` whose copies start at ``positions`` (one more: the chunk's end): in order, row ``i``
    at ``i * seq_length``, every offset inside its document (the kernel's ``rows``; numpy when it is not built or to
    say where a row is off). Returns (the stream position of row S when among them, the first problem)."""
    count = rows.shape[0]
    if not count:
        return None, None
    good = kernel is not None and kernel.rows(positions, rows, start, first_row, seq_length, samples) < 0
    order = None if good else _row_order(path, first_row, rows, previous)
    if order is not None:
        return None, order
    # (rows in order from `previous` are entries of this chunk) row S: where the last (dropped or kept) sample ends
    last = int(positions[int(rows[-1, 0]) - start]) + int(rows[-1, 1]) if first_row + count - 1 == samples else None
    if good:
        return last, None
    local = np.clip(rows[:, 0].astype(np.intp) - start, 0, positions.shape[0] - 2)  # (upto: in range)
    where = positions[local] + rows[:, 1]
    expected = np.arange(first_row, first_row + count, dtype=np.int64) * seq_length
    bad = (where > positions[local + 1]) | (rows[:, 1] < 0) | ((where != expected) & (expected < samples * seq_length))
    if not bad.any():
        return last, None
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
    return last, finding(path, "sample boundary", expected_text, found, DIVERGENCE)


@dataclass(frozen=True)
class Stream:
    """The stream pass: copies per document, the stream's length, the boundary checks."""

    copies: np.ndarray | None  # Copies per document when they are not all `epochs` (None: they are).
    epochs: int  # The document index's rows / documents (0: not a multiple).
    total_tokens: int
    last_position: int | None
    tail_missing: int  # Documents absent from the last epoch's block (the 80% rule; 0 when not separated).
    findings: tuple[Finding, ...]


def _splits(
    pieces: list[tuple[int, int, np.ndarray]], start: int, count: int, seq_length: int, samples: int
) -> np.ndarray | None:
    """Where the kernel's two threads may start a piece of the chunk of ``count`` copies at ``start``: ``PIECES - 1``
    of its sample rows ``pieces``, evenly apart (rows are seq_length tokens apart: the pieces hold about as many
    tokens), each as (its entry, the stream position the row says it is at) (None: one thread). A wrong one is that
    row off its boundary: check_rows finds it (the kernel keeps the positions exact)."""
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


def walk_stream(
    doc_r: NpyReader,
    sample_r: NpyReader,
    walker: StreamPass,
    samples: int,
    tail_from: int | None,
    progress: Progress,
    ids_mix: int | None,
    range_mix: int | None,
) -> Stream:
    """One pass over doc_idx with sample_idx alongside (see :class:`StreamPass` for the exposure); ``ids_mix``: the
    ids' mix sum (scan_documents') that says the copies are all there against ``range_mix``, the split's."""
    rows = SampleRows(sample_r)
    problem: Finding | None = None
    last: int | None = None
    tail = np.zeros(walker.sizes.shape[0], bool) if tail_from is not None else None
    for start, ids in doc_r.chunks(rows=STREAM_CHUNK, progress=progress, label="stream"):
        pieces = rows.upto(start + ids.shape[0]) if problem is None else []
        positions = walker.advance(ids, _splits(pieces, start, ids.shape[0], walker.seq_length, samples))
        if tail is not None and tail_from is not None and start + ids.shape[0] > tail_from:
            tail[ids[max(0, tail_from - start) :] - walker.first_id] = True
        for first_row, previous, block in pieces:
            found_last, problem = check_rows(
                sample_r.info.path, first_row, previous, block, start, positions, samples, walker.seq_length
            )
            last = found_last if found_last is not None else last
            if problem is not None:
                break
    problem = problem or rows.leftover(doc_r.info.rows)
    copies = None
    if not walker.copies_match(
        ids_mix, range_mix
    ):  # the mix sum says they are not all `epochs` (or no kernel): count them
        copies = np.zeros(walker.sizes.shape[0], np.int64)
        for _, ids in doc_r.chunks(rows=STREAM_CHUNK):
            copies += np.bincount(ids - walker.first_id, minlength=copies.shape[0])
    return Stream(
        copies,
        walker.epochs,
        walker.position,
        last,
        0 if tail is None else int(np.count_nonzero(~tail)),
        (problem,) if problem is not None else (),
    )


# ---- stage 4: what the files say against what the framework builds ---------------------------------------


@dataclass(frozen=True)
class Copies:
    """Documents of the split in the document index and their copies."""

    documents: int
    tokens: int
    epochs: int
    findings: tuple[Finding, ...]


def count_copies(
    path: str, copies: np.ndarray | None, tokens: int, sizes: np.ndarray, first_id: int, epochs: int
) -> Copies:
    """Every document of ``[first_id, first_id + D)`` present the same number of times (the epochs);
    ``tokens``: the sum of ``sizes``; ``copies`` None: the stream pass found them all ``epochs`` times."""
    if copies is None:
        return Copies(sizes.shape[0], tokens, epochs, ())
    low, epochs = (int(copies.min()), int(copies.max())) if copies.size else (0, 0)
    if low == epochs > 0:
        return Copies(copies.shape[0], tokens, epochs, ())
    present = copies > 0
    documents, found = int(np.count_nonzero(present)), []
    if documents != copies.shape[0]:
        found.append(
            finding(
                path,
                "documents of the split",
                f"every id in [{first_id}, {first_id + copies.shape[0]})",
                f"document {first_id + int(np.argmin(present))} absent ({copies.shape[0] - documents} absent)",
                "the index is damaged or mixed: " + STALE_HINT,
            )
        )
    other = np.flatnonzero(present & (copies != epochs))
    if other.size:
        found.append(
            finding(
                path,
                "epochs",
                f"every document {epochs} times",
                f"document {first_id + int(other[0])} {int(copies[other[0]])} times",
                "the document index is damaged or mixed: " + STALE_HINT,
            )
        )
    return Copies(documents, int(sizes[present].sum(dtype=np.int64)), epochs, tuple(found))


def number_findings(
    paths: tuple[str, str],
    kind: str,
    numbers: IndexNumbers,
    copies: Copies,
    samples: int,
    requested: int | None,
    seq_length: int,
    trusted: bool,
) -> list[Finding]:
    """The files' epochs and samples against the framework's (``trusted``: the copies and boundaries are)."""
    doc_path, sample_path = paths
    epochs, tokens, found = copies.epochs, copies.tokens, []
    if numbers.epochs_for_request is not None and numbers.epochs_for_request != epochs:
        expected = (
            f"{numbers.epochs_for_request} (smallest E with (E*{tokens} - 1) // {seq_length} >= {requested})"
            if kind == names.NEOX
            else f"{numbers.epochs_for_request} (for num_samples {requested}, seq_length {seq_length}, {tokens} tokens)"
        )
        found.append(finding(doc_path, "epochs for the request", expected, epochs, STALE_HINT))
    if kind != names.NEOX and requested is not None and tokens > 0 and samples < requested:
        found.append(finding(sample_path, "samples built", f">= num_samples {requested}", samples, STALE_HINT))
    if kind == names.MCORE and requested is None and epochs != 1:
        found.append(finding(doc_path, "epochs", "1 (num_samples null: one epoch)", epochs, STALE_HINT))
    if trusted and samples not in (numbers.built, numbers.built + 1):
        found.append(
            finding(
                sample_path,
                "samples built",
                f"{numbers.built} from {epochs} epochs of {tokens} tokens",
                samples,
                STALE_HINT,
            )
        )
    return found


def seed_findings(
    doc_r: NpyReader, shuffle_r: NpyReader, seed: int, first_id: int, stop_id: int, epochs: int, first_block: int | None
) -> list[Finding]:
    """doc_idx and shuffle_idx exactly what the seed builds (:mod:`neox_epoch.semantics.orders`)."""
    blocks = [epochs - 1, 1] if first_block is not None and epochs > 1 else [epochs]
    samples = shuffle_r.info.rows
    cut = first_block if first_block is not None and 0 < first_block < samples else samples
    expected, expected_shuffle = seeded_orders(
        np.arange(first_id, stop_id, dtype=np.int32), blocks, [0, cut, samples] if cut < samples else [0, samples], seed
    )
    got = doc_r.read(0, doc_r.info.rows)
    if got.shape != expected.shape or not np.array_equal(got, expected):
        where = int(np.argmax(got != expected)) if got.shape == expected.shape else min(got.shape[0], expected.shape[0])
        return [
            finding(
                doc_r.info.path,
                "document index vs seed",
                f"the order random_seed {seed} builds for documents [{first_id}, {stop_id}) x {epochs} epochs",
                f"a different order from entry {where}",
                "the index was built with other parameters or data: " + STALE_HINT,
            )
        ]
    got = shuffle_r.read(0, samples)
    if not np.array_equal(got.astype(np.int64), expected_shuffle.astype(np.int64)):
        return [
            finding(
                shuffle_r.info.path,
                "shuffle index vs seed",
                f"the permutation random_seed {seed} builds",
                f"a different permutation from entry {int(np.argmax(got != expected_shuffle))}",
                STALE_HINT,
            )
        ]
    return []


# ---- the whole audit of one index ------------------------------------------------------------------------

ConsumptionFor = Callable[[str, int], "Consumption | None"]
ManifestSink = Callable[[IndexReport, ManifestChunk], None]
IterationOf = Callable[[int], "int | None"]


@dataclass(frozen=True)
class Setting:
    """What the passes of one index need: its files, parameters and data."""

    group: names.CacheGroup
    bookends: Bookends | None  # The split's in the .idx (megatron-core).
    infos: list[NpyInfo]  # The doc, sample and shuffle headers.
    header: idxmod.IdxHeader
    samples: int
    seq_length: int


def audit_index(
    group: names.CacheGroup,
    resolve_prefix: Callable[[str | None], str | None] | None = None,
    add_extra_token: int | None = None,
    consumption_for: ConsumptionFor | None = None,
    manifest: ManifestSink | None = None,
    progress: Progress | None = None,
    iteration_of: IterationOf | None = None,
) -> IndexReport:
    """Audit one GPT index; never raises for a damaged file (findings instead)."""
    report = IndexReport(
        kind=group.kind, path=group.stem, split=group.split, files=dict(group.files), digest=group.digest
    )
    watched = file_states(list(group.files.values()))
    with guarded() as faults:  # (a page of a file that shrank reads zeros instead of ending the process)
        try:
            setting = _setting(report, group, resolve_prefix, add_extra_token)
            if setting is not None:
                _run_passes(report, setting, consumption_for, manifest, progress or Progress(), iteration_of)
        except FileProblem as problem:
            report.findings.append(Finding.of(problem))
            report.exposure = None
        shrank = faults()
    changed = changed_files(watched)
    if changed or shrank:
        report.findings.append(
            finding(
                ", ".join(changed) or group.stem,
                "changed while being read",
                "files that stay as they are during the audit",
                f"{len(changed)} file(s) replaced, resized or written" + (f", {shrank} page(s) gone" if shrank else ""),
                "a process (a rank 0 rebuilding the index?) rewrote the cache: audit it again once it is complete",
            )
        )
        report.exposure = None
    return report


def _setting(
    report: IndexReport,
    group: names.CacheGroup,
    resolve_prefix: Callable[[str | None], str | None] | None,
    add_extra_token: int | None,
) -> Setting | None:
    """Stages 1 and 2 into the report; None when the passes cannot run."""
    missing = group.missing_roles()
    report.findings.extend(
        finding(
            group.stem,
            "missing file",
            f"the {role} file of this index",
            "no such file",
            "an incomplete cache: the framework would rebuild it (or fail)",
        )
        for role in missing
    )
    if missing:
        return None
    prefix, bookends = describe(group, report, add_extra_token)
    packed = report.pack_impl in (None, "packed")
    if not packed:
        report.notes.append(f"pack_impl {report.pack_impl}: only headers and document ids are audited (no exposure)")
    infos, found = check_headers(group, packed)
    report.findings.extend(found)
    if any(info is None for info in infos):
        return None
    samples = max(0, infos[1].rows - 1)
    report.samples, report.length = samples, samples - 1 if group.kind == names.NEOX else samples
    where = group.files.get(names.DESCRIPTION, group.stem)
    if report.seq_length is None or report.seq_length <= 0:
        report.findings.append(finding(where, "sequence length", "a positive integer", report.seq_length))
        return None
    prefix = resolve_prefix(prefix) if resolve_prefix is not None else prefix
    if not prefix:
        report.findings.append(finding(where, "data prefix", "the path of the .bin/.idx", "none", "pass --data-prefix"))
        return None
    report.data_prefix = prefix
    try:
        header = idxmod.read_header(prefix, check_bin=True)
    except IndexFileError as err:
        report.findings.append(
            finding(
                idxmod.normalize_prefix(prefix) + ".idx",
                "data",
                "the .bin/.idx the index was built from",
                str(err),
                "point --data-prefix at the data (the cache files are checked against its sizes)",
            )
        )
        return None
    return Setting(group, bookends, infos, header, samples, report.seq_length)


def _sizes(header: idxmod.IdxHeader, first_id: int, stop_id: int) -> np.ndarray:
    """The split's .idx sizes, read like an .npy array's rows: a read-only view of the file (a copy if not mappable)."""
    info = NpyInfo(header.prefix + ".idx", (header.sequence_count,), np.dtype(np.int32), False, header.sizes_offset)
    with NpyReader(info) as reader:
        return reader.read(first_id, stop_id)


def _separation(
    path: str, numbers: IndexNumbers, draws: Draws, block_max: int, samples: int
) -> tuple[bool, list[Finding]]:
    """Whether the last epoch is shuffled on its own: the 80% rule against the shuffle index's blocks (``block_max``:
    the largest id among the first block's entries)."""
    in_files = block_max < numbers.first_block if not draws.findings and 0 < numbers.first_block < samples else None
    if numbers.separate is None or in_files is None or in_files == numbers.separate:
        return bool(numbers.separate if numbers.separate is not None else in_files), []
    return numbers.separate, [
        finding(
            path,
            "final-epoch separation",
            f"{'a separately' if numbers.separate else 'a jointly'} shuffled final epoch (80% rule)",
            f"{'separate' if in_files else 'joint'} shuffle blocks",
            "the index was built with other parameters than its description says: " + STALE_HINT,
        )
    ]


def _run_passes(
    report: IndexReport,
    setting: Setting,
    consumption_for: ConsumptionFor | None,
    manifest: ManifestSink | None,
    progress: Progress,
    iteration_of: IterationOf | None,
) -> None:
    doc_info, sample_info, shuffle_info = setting.infos
    packed = report.pack_impl in (None, "packed")
    consumption = consumption_for(report.split, report.length or 0) if consumption_for and packed else None
    # (the pool's exit, first, waits for its thread before the readers close)
    with (
        NpyReader(doc_info) as doc_r,
        NpyReader(sample_info) as sample_r,
        NpyReader(shuffle_info) as shuffle_r,
        ThreadPoolExecutor(1) as side,
    ):
        # the shuffle pass on a second thread (its progress not shown) beside the documents' scan and the records'
        # fresh pages, whose first touch costs 0.02-0.25 s at 30M samples as the machine gives them
        def shuffle_pass(drawn: Consumption | None) -> Future[Draws]:
            return side.submit(count_draws, shuffle_r, setting.samples, drawn, manifest is not None, Progress())

        # (a consumption folded for many draws waits for the copies' count: Consumption.fold)
        folds = consumption is not None and consumption.max_count >= FOLD_FROM
        _stream_passes(
            report,
            setting,
            consumption,
            manifest,
            progress,
            iteration_of,
            (doc_r, sample_r, shuffle_r),
            shuffle_pass if folds else shuffle_pass(consumption),
        )


def _stream_passes(
    report: IndexReport,
    setting: Setting,
    consumption: Consumption | None,
    manifest: ManifestSink | None,
    progress: Progress,
    iteration_of: IterationOf | None,
    readers: tuple[NpyReader, NpyReader, NpyReader],
    shuffle_pass: Future[Draws] | Callable[[Consumption | None], Future[Draws]],
) -> None:
    """The passes of :func:`_run_passes` with its readers, the shuffle pass running on another thread."""
    kind, samples, sequences = setting.group.kind, setting.samples, setting.header.sequence_count
    doc_info, _, shuffle_info = setting.infos
    doc_r, sample_r, shuffle_r = readers
    packed = report.pack_impl in (None, "packed")
    first_id, stop_id, problem, ids_mix = scan_documents(doc_r, sequences, setting.header.prefix + ".idx", progress)
    if problem is not None:
        report.findings.append(problem)
        return
    report.document_range = [first_id, stop_id]
    expected = mcore_sem.split_range(setting.bookends, sequences) if setting.bookends is not None else None
    if expected is not None and expected[1] > expected[0] and (first_id, stop_id) != expected:
        report.findings.append(
            finding(
                doc_info.path,
                "document range",
                f"[{expected[0]}, {expected[1]}) from split_matrix and {sequences} sequences",
                f"[{first_id}, {stop_id})",
                "the corpus or split changed since the build: " + STALE_HINT,
            )
        )
    range_mix = kernel.mixed(first_id, stop_id) if kernel is not None else None  # (the shuffle pass still runs)
    sizes = _sizes(setting.header, first_id, stop_id)
    documents = stop_id - first_id
    epochs = doc_r.info.rows // documents if doc_r.info.rows % documents == 0 else 0
    exposing = kernel is not None and consumption is not None and epochs > 0 and packed
    records, stats = read_sizes(sizes, epochs if exposing else 0)
    tokens = stats[2]
    if not isinstance(shuffle_pass, Future):
        try:
            consumption = consumption.fold(epochs, manifest is not None) if consumption is not None else None
        except ValueError as err:
            raise AuditError(f"{doc_info.path}: {err}: audit without --manifest, or a smaller --consumed") from None
        shuffle_pass = shuffle_pass(consumption)
    numbers = index_numbers(
        kind, tokens, setting.seq_length, epochs, report.num_samples_requested, report.add_extra_token or 1
    )
    draws = shuffle_pass.result()
    block_max = draws.first_block_max(shuffle_r, numbers.first_block if epochs > 1 else 0)
    separate, found = _separation(shuffle_info.path, numbers, draws, block_max, samples)
    report.findings.extend(draws.findings + tuple(found))
    if not packed:
        return
    walker = StreamPass(
        sizes,
        first_id,
        epochs,
        draws.counts,
        setting.seq_length,
        draws.sample_draws,
        *((consumption.tokens_out, consumption.tokens_window) if consumption else (None, None)),
        stats=stats,
        records=records,
    )
    tail_from = (epochs - 1) * documents if separate and epochs > 1 else None
    stream = walk_stream(doc_r, sample_r, walker, samples, tail_from, progress, ids_mix, range_mix)
    report.findings.extend(stream.findings)
    copies, final_ok = _conclude(report, setting, stream, sizes, tokens, first_id, separate)
    trusted = not draws.findings and not stream.findings and final_ok
    small = doc_r.info.rows + samples <= REGEN_LIMIT
    if small and trusted and not copies.findings and copies.epochs > 0 and (report.seed or -1) >= 0:
        report.findings.extend(
            seed_findings(
                doc_r,
                shuffle_r,
                int(report.seed or 0),
                first_id,
                stop_id,
                copies.epochs,
                numbers.first_block if separate else None,
            )
        )
    if consumption is not None:
        _expose(report, walker, consumption, trusted and not copies.findings, manifest, iteration_of)


def _conclude(
    report: IndexReport, setting: Setting, stream: Stream, sizes: np.ndarray, tokens: int, first_id: int, separate: bool
) -> tuple[Copies, bool]:
    """The copies, the final boundary and the framework's numbers into the report; (copies, final boundary ok)."""
    kind, samples, seq_length = setting.group.kind, setting.samples, setting.seq_length
    doc_path, sample_path = setting.group.files[names.DOC], setting.group.files[names.SAMPLE]
    copies = count_copies(doc_path, stream.copies, tokens, sizes, first_id, stream.epochs)
    report.findings.extend(copies.findings)
    report.documents, report.tokens, report.epochs = copies.documents, copies.tokens, copies.epochs
    if stream.tail_missing:
        report.findings.append(
            finding(
                doc_path,
                "final-epoch separation",
                "each document once in the last epoch block",
                f"{stream.tail_missing} documents missing from it",
                STALE_HINT,
            )
        )
    # row S at S*L (the last partial sample dropped) or at E*T - a (kept)
    end, last = stream.total_tokens, stream.last_position
    ends = [samples * seq_length] + [end - a for a in (1, 0) if samples * seq_length > end - a]
    final_ok = bool(stream.findings) or last is None or last in ends
    if not final_ok:
        report.findings.append(
            finding(
                sample_path,
                "sample boundary",
                f"stream token {ends[0]} for the last row {samples}",
                f"token {last}",
                DIVERGENCE,
            )
        )
    extra = report.add_extra_token
    if kind == names.MCORE and extra is None:
        extra = extra_token_from_files(end, last, samples, seq_length) if final_ok else None
        if extra is None and copies.tokens % seq_length == 0:
            report.notes.append(
                "add_extra_token_to_sequence is not recorded in the cache and not inferable from it; "
                "samples_per_epoch assumes 1 (the default): pass --add-extra-token 0 if the run used 0"
            )
        extra = 1 if extra is None else extra
    report.add_extra_token = extra
    numbers = index_numbers(kind, copies.tokens, seq_length, copies.epochs, report.num_samples_requested, extra or 1)
    report.samples_per_epoch = numbers.samples_per_epoch
    report.separated_final_epoch = bool(separate) and copies.epochs > 1 and kind != names.NEOX
    trusted = not stream.findings and not copies.findings
    report.findings.extend(
        number_findings(
            (doc_path, sample_path), kind, numbers, copies, samples, report.num_samples_requested, seq_length, trusted
        )
    )
    return copies, final_ok


def _expose(
    report: IndexReport,
    walker: StreamPass,
    consumption: Consumption,
    trusted: bool,
    manifest: ManifestSink | None,
    iteration_of: IterationOf | None,
) -> None:
    """The exposure into the report (withheld when the files cannot be trusted: the findings say why)."""
    if kernel is None:
        report.notes.append(
            "exposure not computed: the compiled kernel neox_epoch._exposure is not built "
            "(install a C compiler and run pip install -e . again: docs/audit.md, Cost)"
        )
    if not walker.exposing or not trusted:
        return
    exposure = walker.report(consumption.consumed, consumption.folded)
    per_epoch, positions = report.samples_per_epoch, consumption.positions
    if per_epoch and consumption.consumed > per_epoch:  # the global position of draw number per_epoch (0-based)
        if positions is not None:
            exposure.second_pass_sample = int(positions[per_epoch]) if per_epoch < positions.shape[0] else None
        elif consumption.period > 0:  # (a blend's source, 0: the blend knows the position)
            exposure.second_pass_sample = per_epoch
        if iteration_of is not None and exposure.second_pass_sample is not None:
            exposure.second_pass_iteration = iteration_of(exposure.second_pass_sample)
    if consumption.consumed > (report.length or 0):
        exposure.notes.append(
            f"{consumption.consumed} samples drawn from a dataset of len {report.length}: "
            + (
                "NeoX wraps the index silently (index % len)"
                if report.kind == names.NEOX
                else "megatron would run out of samples (or a blend raises)"
            )
        )
    report.exposure = exposure
    for chunk in walker.manifest() if manifest is not None else []:
        manifest(report, chunk)
