"""Audit one GPT index (a doc/sample/shuffle triple) against the .bin/.idx it was built from.

Checks, each failure a :class:`~neox_epoch.audit.findings.Finding` (path, expected, found):

- files present, readable, complete; integer dtypes the frameworks write; ``sample_idx`` of shape
  ``[S+1, 2]``; ``shuffle_idx`` of length ``S``;
- megatron-core: md5 of ``description.txt`` equals the name's hash, and its fields (dataset_path,
  num_samples, sequence_length, index_split, split_matrix, random_seed) agree with the files; legacy
  ``.dsc`` likewise; NeoX: the seq_length, seed and sample request of the name;
- document ids inside the .idx, every document of the split present the same number of times (the
  epochs); ``sample_idx`` non-decreasing, its offsets inside their documents, and every sample boundary
  at stream position ``i * seq_length`` when recomputed from ``doc_idx`` and the *current* .idx sizes:
  the first boundary that is not is reported (a stale cache: the corpus or seq_length changed);
- ``shuffle_idx`` a permutation (the megatron 80% rule: two blocks), and, for indexes small enough,
  that ``doc_idx`` and ``shuffle_idx`` are exactly what the seed builds.

All arrays are read once, in chunks (:mod:`neox_epoch.audit.npy`); the same pass feeds the exposure
computation (:mod:`neox_epoch.audit.exposure`) when a consumption is given.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from neox_epoch import idx as idxmod
from neox_epoch.audit import names
from neox_epoch.audit.consumption import Consumption
from neox_epoch.audit.descriptions import Description, read_legacy_description, read_mcore_description
from neox_epoch.audit.exposure import (
    SPARSE_COPIES,
    SPARSE_SAMPLES,
    ExposureReport,
    ExposureState,
    ManifestChunk,
    accelerated,
    sparse_exposure,
)
from neox_epoch.audit.findings import FileProblem, Finding
from neox_epoch.audit.npy import NpyInfo, NpyReader, read_header, zeroed
from neox_epoch.audit.pairs import Pairs, applies, make_pairs
from neox_epoch.errors import IndexFileError
from neox_epoch.semantics import mcore as mcore_sem
from neox_epoch.semantics import neox as neox_sem

#: entries of doc_idx per chunk of the stream pass
STREAM_CHUNK = 1 << 18
_U64 = (1 << 64) - 1
#: regenerate doc_idx/shuffle_idx from the seed when they hold at most this many entries together
REGEN_LIMIT = 1 << 23
#: the 80% rule of megatron (core and legacy)
SEPARATE_THRESHOLD = 0.80

_DOC_DTYPES = ("int32",)
_SAMPLE_DTYPES = ("int32", "int64")
_SHUFFLE_DTYPES = ("uint32", "int64")


@dataclass
class IndexReport:
    """What one index is, as audited. JSON keys are the field names."""

    kind: str
    """``neox``, ``megatron-core`` or ``megatron-legacy``."""
    path: str
    """The index's files without their role suffix."""
    split: str
    """megatron split (train/valid/test) or NeoX dataset name (train, train_0, valid, ...)."""
    files: dict[str, str] = field(default_factory=dict)
    """role -> file."""
    data_prefix: str | None = None
    """The .bin/.idx prefix the index was checked against."""
    seq_length: int | None = None
    """Sequence length (NeoX: from the name; megatron: from the description)."""
    seed: int | None = None
    """Random seed of the shuffles."""
    num_samples_requested: int | None = None
    """Samples the framework asked this dataset for (name or description)."""
    epochs: int | None = None
    """Epochs of documents in ``doc_idx``."""
    samples: int | None = None
    """Samples built: rows of ``sample_idx`` minus one."""
    samples_per_epoch: int | None = None
    """Samples one pass over the split's documents gives: NeoX ``(T-1)//L``, megatron ``(T-a)//L``."""
    length: int | None = None
    """``len(dataset)`` as the framework uses it (NeoX: samples - 1)."""
    separated_final_epoch: bool | None = None
    """The last epoch is shuffled on its own (megatron's 80% rule); NeoX never."""
    documents: int | None = None
    """Documents of the split (distinct ids in ``doc_idx``)."""
    document_range: list[int] | None = None
    """``[first, last + 1)`` of the document ids."""
    tokens: int | None = None
    """Tokens of the split's documents (one epoch), from the .idx sizes."""
    add_extra_token: int | None = None
    """megatron-core's add_extra_token_to_sequence (1 for NeoX and legacy)."""
    digest: str = ""
    """md5 in the file names (megatron)."""
    pack_impl: str | None = None
    """NeoX pack_impl from the name."""
    findings: list[Finding] = field(default_factory=list)
    """Problems found."""
    notes: list[str] = field(default_factory=list)
    """Remarks that are not problems of the files."""
    exposure: ExposureReport | None = None
    """Exposure, when a consumption applies to this index."""
    description: dict[str, Any] | None = field(default=None, repr=False)
    """megatron-core description fields (for blends)."""
    exposure_ok: bool = field(default=True, repr=False)
    """False once a finding makes the exposure meaningless."""

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "path": self.path,
            "split": self.split,
            "files": dict(self.files),
            "data_prefix": self.data_prefix,
            "seq_length": self.seq_length,
            "seed": self.seed,
            "num_samples_requested": self.num_samples_requested,
            "epochs": self.epochs,
            "samples": self.samples,
            "samples_per_epoch": self.samples_per_epoch,
            "length": self.length,
            "separated_final_epoch": self.separated_final_epoch,
            "documents": self.documents,
            "document_range": self.document_range,
            "tokens": self.tokens,
            "add_extra_token": self.add_extra_token,
            "pack_impl": self.pack_impl,
            "findings": [f.to_json() for f in self.findings],
            "notes": list(self.notes),
            "exposure": self.exposure.to_json() if self.exposure is not None else None,
        }


class Progress:
    """Minimal progress sink: ``advance(units)`` during a pass (see :mod:`neox_epoch.audit.report`)."""

    def describe(self, what: str) -> None:
        """The index or blend the next passes are about."""

    def start(self, label: str, total: int) -> None:
        """Begin a pass of ``total`` units."""

    def advance(self, units: int) -> None:
        """``units`` more done."""

    def done(self) -> None:
        """The pass ended."""


def _finding(rep: IndexReport, path: str, what: str, expected: Any, found: Any, hint: str = "") -> None:
    rep.findings.append(Finding(path=path, what=what, expected=str(expected), found=str(found), hint=hint))


STALE_HINT = (
    "the cache was built from another version of the corpus or with another seq_length/split: "
    "delete these index files so the framework rebuilds them (NeoX reuses files by name alone)"
)


@dataclass
class _Ctx:
    """Working state of one index audit."""

    rep: IndexReport
    """The report being filled."""
    group: names.CacheGroup
    """The index's files."""
    doc: NpyInfo | None = None
    """Header of the document index."""
    sample: NpyInfo | None = None
    """Header of the sample index."""
    shuffle: NpyInfo | None = None
    """Header of the shuffle index."""
    header: idxmod.IdxHeader | None = None
    """Header of the data's .idx."""
    L: int = 0
    """Sequence length."""
    S: int = 0
    """Samples built (rows of the sample index - 1)."""
    lo: int = 0
    """First document id in the document index."""
    hi: int = 0
    """Last document id + 1."""
    expected_range: tuple[int, int] | None = None
    """Document range the description's split_matrix gives (megatron-core)."""
    expected_separate: bool | None = None
    """Whether the 80% rule separates the last epoch (from the request), else from the files."""
    a: int = 1
    """add_extra_token_to_sequence in use."""
    a_known: bool = False
    """``a`` is known (given, inferred, or always 1) rather than assumed."""
    description: Description | None = None
    """The parsed description file (megatron)."""
    files_separate: bool | None = None
    """What the shuffle index's blocks say about the last epoch's separation."""
    doc_hash: int | None = None
    """Sum mod 2^64 of mix(id) over the document index (C extension), for the copies check without counts."""
    allow_sparse: bool = True
    """The exposure may be computed from the copies overlapping the few samples drawn another number of times
    than most (:func:`~neox_epoch.audit.exposure.sparse_exposure`); False on the retry with records."""
    aff: _Affected | None = None
    """That computation's state during the stream pass."""
    pairs: Pairs | None = None
    """Every document once or twice: the exposure computed at each document's last copy
    (:mod:`neox_epoch.audit.pairs`)."""


@dataclass
class _Affected:
    """Copies overlapping the samples drawn another number of times than most (two regions, one a thread)."""

    ids: np.ndarray
    """Those samples (sorted int64)."""
    counts: np.ndarray
    """Their draw counts."""
    default: int
    """The draw count of every other sample."""
    rows: np.ndarray
    """``[2 * cap, 3]`` int64: (local document, stream position, size) of each copy, region 2 from ``cap``."""
    n1: int = 0
    """Copies found by the first thread (more than ``cap``: they did not fit)."""
    n2: int = 0
    """Next row of the second region."""

    def copies(self) -> np.ndarray | None:
        """The copies found, or None when a region overflowed."""
        cap = self.rows.shape[0] // 2
        if self.n1 > cap or self.n2 > 2 * cap:
            return None
        return np.concatenate((self.rows[: self.n1], self.rows[cap : self.n2]))


class _SparseFailed(Exception):
    """The sparse exposure's preconditions failed (copies not all E times, too many copies): audit again
    with per-document records."""


def _check_dtype(rep: IndexReport, info: NpyInfo, allowed: tuple[str, ...], ndim: int, role: str) -> bool:
    """False (with a finding) when the array cannot be read as an index at all."""
    if info.dtype.kind not in "iu" or len(info.shape) != ndim:
        shape = "[N+1, 2]" if ndim == 2 else "[N]"
        _finding(rep, info.path, f"{role} dtype/shape", f"an integer array of shape {shape} ({' or '.join(allowed)})",
                 f"{info.dtype} of shape {list(info.shape)}", "not an index the frameworks write: delete it to rebuild")
        return False
    if info.dtype.name not in allowed:
        _finding(rep, info.path, f"{role} dtype", " or ".join(allowed), info.dtype.name,
                 "the frameworks write these dtypes; this file was written by something else or converted")
    return True


def _describe(ctx: _Ctx, resolve_prefix: Callable[[str | None], str | None] | None) -> str | None:
    """Read the description (megatron) or the name (NeoX); fill seq_length, seed, request; return the prefix."""
    rep, g = ctx.rep, ctx.group
    prefix: str | None = None
    if g.kind == names.NEOX:
        assert g.neox is not None
        n = g.neox
        rep.seq_length, rep.seed, rep.num_samples_requested = n.seq_length, n.seed, n.num_samples
        rep.pack_impl = n.pack_impl
        rep.add_extra_token = 1
        ctx.a, ctx.a_known = 1, True
        prefix = n.prefix
    else:
        dpath = g.files.get(names.DESCRIPTION)
        if dpath is None:
            return None
        desc = read_mcore_description(dpath) if g.kind == names.MCORE else read_legacy_description(dpath)
        ctx.description = desc
        if desc.digest != g.digest:
            _finding(rep, dpath, "description md5", f"{g.digest} (the hash in the file names)", desc.digest,
                     "the description was edited or belongs to other files: the cache cannot be trusted")
        f = desc.fields
        if g.kind == names.MCORE:
            rep.description = f
            if f.get("class") != "GPTDataset":
                _finding(rep, dpath, "description class", "GPTDataset", f.get("class"))
            if f.get("index_split") != g.split:
                _finding(rep, dpath, "description index_split", f"{g.split} (from the file names)", f.get("index_split"))
            rep.seq_length = _int_field(rep, dpath, f, "sequence_length")
            rep.seed = _int_field(rep, dpath, f, "random_seed")
            ns = f.get("num_samples")
            rep.num_samples_requested = ns if isinstance(ns, int) else None
            prefix = f.get("dataset_path") if isinstance(f.get("dataset_path"), str) else None
            ctx.expected_range = None
            sm = f.get("split_matrix")
            split_i = mcore_sem.SPLITS.index(g.split) if g.split in mcore_sem.SPLITS else -1
            if isinstance(sm, list) and 0 <= split_i < len(sm):
                book = sm[split_i]
                if book is None:
                    _finding(rep, dpath, "description split_matrix", f"bookends for the {g.split} split", "null")
                else:
                    ctx.expected_range = (-1, -1)  # resolved against the .idx below
                    ctx.rep.description = {**f, "_bookends": (float(book[0]), float(book[1]))}
                split_str = f.get("split")
                if isinstance(split_str, str):
                    try:
                        mine = mcore_sem.split_matrix(split_str)
                    except Exception:  # noqa: BLE001 - a damaged field is a finding
                        mine = None
                    if mine is None or any(
                        (a is None) != (b is None) or (a is not None and b is not None and
                                                       (abs(a[0] - b[0]) > 1e-9 or abs(a[1] - b[1]) > 1e-9))
                        for a, b in zip(mine, sm)
                    ):
                        _finding(rep, dpath, "description split/split_matrix",
                                 f"split_matrix {mine} from split {split_str!r}", sm)
            elif sm is None:
                ctx.expected_range = None  # blend_per_split: the whole .idx
            if ctx.a_known is False:
                rep.add_extra_token = None
        else:
            rep.seq_length = f.get("seq_length")
            rep.seed = f.get("seed")
            rep.num_samples_requested = f.get("num_samples")
            name = f.get("name")
            if isinstance(name, str):
                rep.split = name
            prefix = f.get("data_prefix")
            rep.add_extra_token = 1
            ctx.a, ctx.a_known = 1, True
    if resolve_prefix is not None:
        prefix = resolve_prefix(prefix)
    return prefix


def _int_field(rep: IndexReport, path: str, f: dict[str, Any], key: str) -> int | None:
    v = f.get(key)
    if isinstance(v, bool) or not isinstance(v, int):
        _finding(rep, path, f"description {key}", "an integer", repr(v))
        return None
    return v


def _load_sizes(header: idxmod.IdxHeader, lo: int, hi: int, out: np.ndarray | None = None,
                stats: list[int] | None = None) -> np.ndarray:
    """``sizes[lo:hi]`` of the .idx as int32, read once (4 bytes a document), in chunks into ``out`` (a
    view, e.g. the size field of the per-document records) when given. ``stats``: a list that receives
    [sum, max] of the sizes (from the contiguous chunks, not the strided result)."""
    if out is None:
        out = zeroed(hi - lo, np.int32)
    total = top = 0
    with open(header.prefix + ".idx", "rb") as f:
        f.seek(header.sizes_offset + 4 * lo)
        for a in range(0, hi - lo, STREAM_CHUNK):
            part = np.fromfile(f, dtype=np.int32, count=min(STREAM_CHUNK, hi - lo - a))
            out[a : a + part.shape[0]] = part
            if part.shape[0] != min(STREAM_CHUNK, hi - lo - a):
                raise FileProblem(header.prefix + ".idx", "size", f"{hi - lo} sizes from sequence {lo}",
                                  f"{a + part.shape[0]}")
            if stats is not None and part.shape[0]:
                total += int(part.sum(dtype=np.int64))
                top = max(top, int(part.max()))
    if stats is not None:
        stats[:] = [total, top]
    return out


def _map_sizes(header: idxmod.IdxHeader, lo: int, hi: int) -> np.ndarray:
    """``sizes[lo:hi]`` of the .idx as a read-only view of the file (no copy; :func:`_load_sizes` if it
    cannot be mapped)."""
    try:
        return np.asarray(idxmod.sizes_memmap(header)[lo:hi])
    except (OSError, ValueError):
        return _load_sizes(header, lo, hi)


def _size_totals(sizes: np.ndarray) -> tuple[int, int]:
    """(tokens, documents without tokens) of the split's sizes (contiguous int32: in C, two threads)."""
    ext = accelerated()
    if ext is not None and hasattr(ext, "sum_i32") and sizes.dtype == np.int32 and sizes.flags.c_contiguous:
        tokens, empty = (int(x) for x in ext.sum_i32(sizes))
        return tokens, empty
    step = 1 << 24
    return (sum(int(sizes[a : a + step].sum(dtype=np.int64)) for a in range(0, sizes.shape[0], step)),
            sum(int(np.count_nonzero(sizes[a : a + step] == 0)) for a in range(0, sizes.shape[0], step)))


def _copies_by_hash(ctx: _Ctx, rows: int, D: int, tokens: int, empty: int) -> _DocStats | None:
    """The document statistics without per-document counts: when ``rows = E * D`` and the ids' hash sum
    (:func:`_doc_prepass`) equals ``E`` times that of every id in ``[lo, hi)``, each document is there
    exactly ``E`` times (a damaged index matches by a chance of about 2^-64). ``tokens``, ``empty``: from
    :func:`_size_totals`. None: count them instead."""
    ext = accelerated()
    if ctx.doc_hash is None or ext is None or not D or rows % D:
        return None
    E = rows // D
    if (E * int(ext.mix_range(ctx.lo, ctx.hi))) & _U64 != ctx.doc_hash:
        return None
    return _DocStats(documents=D, tokens=tokens, epochs=E, first_absent=0, first_other=None, by_hash=True,
                     empty=empty)


def _count_copies(ctx: _Ctx, doc_r: NpyReader, D: int, sizes: np.ndarray) -> _DocStats:
    """The document statistics from per-document counts (one pass over the document index)."""
    ext = accelerated()
    assert ext is not None
    counts = zeroed(D, np.uint32)
    for _, d in doc_r.chunks(rows=STREAM_CHUNK):
        ext.count_add(d, ctx.lo, counts)
    return _doc_stats(counts, np.uint32(0xFFFFFFFF), sizes, 32)


def _doc_prepass(ctx: _Ctx, reader: NpyReader, progress: Progress) -> bool:
    """min/max of doc_idx: ids inside the .idx. False when the stream pass cannot run."""
    rep, info = ctx.rep, reader.info
    assert ctx.header is not None
    n = ctx.header.sequence_count
    lo, hi = None, None
    ext = accelerated()
    scan = ext is not None and hasattr(ext, "doc_scan")
    h = 0
    progress.start("documents", info.rows)
    for _, d in reader.chunks(rows=STREAM_CHUNK):
        if scan:
            dmin, dmax, hd = (int(x) for x in ext.doc_scan(d))
            h = (h + hd) & _U64
        else:
            dmin, dmax = int(d.min()), int(d.max())
        lo = dmin if lo is None else min(lo, dmin)
        hi = dmax if hi is None else max(hi, dmax)
        progress.advance(d.shape[0])
    progress.done()
    ctx.doc_hash = h if scan else None
    if lo is None or hi is None:
        _finding(rep, info.path, "document index", "at least one document", "an empty array")
        return False
    if lo < 0 or hi >= n:
        bad = lo if lo < 0 else hi
        _finding(rep, info.path, "document ids", f"ids in [0, {n}) (sequences of {ctx.header.prefix}.idx)",
                 f"id {bad}", "the index belongs to another (larger) corpus: " + STALE_HINT)
        return False
    ctx.lo, ctx.hi = lo, hi + 1
    return True


def _check_separation(ctx: _Ctx, info: NpyInfo, s_first: int | None, max_first: int) -> None:
    """Whether the first ``s_first`` shuffle entries stay below ``s_first`` (a separately shuffled last epoch)."""
    if s_first is not None and 0 < s_first < ctx.S:
        files_separate = max_first < s_first
        ctx.files_separate = files_separate
        if ctx.expected_separate is not None and files_separate != ctx.expected_separate:
            _finding(ctx.rep, info.path, "final-epoch separation",
                     f"{'a separately' if ctx.expected_separate else 'a jointly'} shuffled final epoch (80% rule)",
                     f"{'separate' if files_separate else 'joint'} shuffle blocks",
                     "the index was built with other parameters than its description says: " + STALE_HINT)


def _shuffle_entry_finding(rep: IndexReport, path: str, S: int, value: int, position: int, progress: Progress) -> None:
    """A shuffle entry outside ``[0, S)`` (both shuffle passes): a finding, the exposure withheld."""
    _finding(rep, path, "shuffle entry", f"sample ids in [0, {S})", f"{value} at position {position}",
             "doc/sample/shuffle files come from different builds: " + STALE_HINT)
    rep.exposure_ok = False
    progress.done()


def _shuffle_pass(ctx: _Ctx, reader: NpyReader, consumption: Consumption | None, s_first: int | None,
                  manifest: bool, progress: Progress) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """Permutation check and draw counts per sample: returns (c with c[S]=0, first, last) or Nones.

    With the C extension (and no manifest) one sequential pass checks the ids' range and two sums that
    are 0 over a permutation (``_exposure.perm_hash``: a 64-bit hash and the plain sum), and only the
    positions whose draw count differs from most positions' are written into ``c`` (none for a validation
    or a whole number of passes; with a sparse exposure their ids are kept instead, in ``ctx.aff``); when
    the sums say "not a permutation", :func:`_shuffle_pass_exact` runs to name the first missing id."""
    rep, info, S = ctx.rep, reader.info, ctx.S
    ext = accelerated()
    if ext is None or manifest or info.rows != S or not hasattr(ext, "perm_hash"):
        return _shuffle_pass_exact(ctx, reader, consumption, s_first, manifest, progress)
    top = consumption.max_count if consumption is not None else 0
    cdt = np.uint8 if top < 255 else (np.uint16 if top < 65535 else np.uint32)
    default, minority = consumption.majority(S) if consumption is not None else (0, [])
    store = None
    ids: list[np.ndarray] = []
    counts: list[np.ndarray] = []
    if consumption is not None and ctx.aff is None:
        store = zeroed(S + 1, cdt, fill=None if default == 0 else np.asarray([default], dtype=cdt))
    h1 = h2 = 0
    max_first = -1
    progress.start("shuffle", S)
    for j0, v in reader.chunks(rows=STREAM_CHUNK):
        j1 = j0 + v.shape[0]
        bad, a1, a2 = ext.perm_hash(v, j0, S)
        if bad >= 0:
            _shuffle_entry_finding(rep, info.path, S, int(v[bad]), j0 + bad, progress)
            return None, None, None
        h1, h2 = (h1 + int(a1)) & _U64, (h2 + int(a2)) & _U64
        for a, b, cnt in minority:
            lo_, hi_ = max(a, j0), min(b, j1)
            if hi_ <= lo_:
                continue
            if store is not None:
                ext.scatter(v[lo_ - j0 : hi_ - j0], lo_, store, [(lo_, hi_, cnt)])
            elif ctx.aff is not None:  # the few samples drawn another number of times: their ids
                ids.append(v[lo_ - j0 : hi_ - j0].astype(np.int64))
                counts.append(np.full(hi_ - lo_, cnt, dtype=np.int64))
        if s_first is not None and j0 < s_first:
            max_first = max(max_first, int(v[: s_first - j0].max()))
        progress.advance(v.shape[0])
    progress.done()
    if h1 or h2:  # not a permutation: the exact pass names the first missing id (and reports it)
        return _shuffle_pass_exact(ctx, reader, consumption, s_first, manifest, progress)
    _check_separation(ctx, info, s_first, max_first)
    if store is not None:
        store[S] = 0
    if ctx.aff is not None and ids:
        all_ids = np.concatenate(ids)
        order = np.argsort(all_ids, kind="stable")
        ctx.aff.ids, ctx.aff.counts = all_ids[order], np.concatenate(counts)[order]
    return store, None, None


def _shuffle_pass_exact(ctx: _Ctx, reader: NpyReader, consumption: Consumption | None, s_first: int | None,
                        manifest: bool, progress: Progress
                        ) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """:func:`_shuffle_pass` by writing every id: names the first missing id; keeps first/last draws."""
    rep, info, S = ctx.rep, reader.info, ctx.S
    if info.rows != S:
        _finding(rep, info.path, "shuffle index length", f"{S} (rows of the sample index - 1)", info.rows,
                 "doc/sample/shuffle files come from different builds: " + STALE_HINT)
        rep.exposure_ok = False
        return None, None, None
    top = consumption.max_count if consumption is not None else 0
    cdt = np.uint8 if top < 255 else (np.uint16 if top < 65535 else np.uint32)
    store = zeroed(S + 1, cdt)
    first = last = None
    if manifest and consumption is not None:
        first = np.full(S, -1, dtype=np.int64)
        last = np.full(S, -1, dtype=np.int64)
    max_first = -1
    ext = accelerated()
    runs = [(a, b, cnt + 1) for a, b, cnt in consumption.runs] if consumption is not None else []
    progress.start("shuffle", S)
    for j0, v in reader.chunks(rows=STREAM_CHUNK):
        j1 = j0 + v.shape[0]
        if ext is not None:
            bad = int(ext.scatter(v, j0, store, runs))
        else:
            vmin, vmax = int(v.min()), int(v.max())
            bad = int(np.argmax((v < 0) | (v >= S))) if vmin < 0 or vmax >= S else -1
        if bad >= 0:
            _shuffle_entry_finding(rep, info.path, S, int(v[bad]), j0 + bad, progress)
            return None, None, None
        if ext is not None:
            if first is not None and last is not None and consumption is not None:
                f, la = consumption.first_last(j0, j1)
                first[v], last[v] = f, la
        elif consumption is None or not consumption.runs:
            store[v] = 1
        else:
            vals = np.ones(v.shape[0], dtype=cdt)
            for a, b, cnt in consumption.runs:
                lo_, hi_ = max(a, j0), min(b, j1)
                if hi_ > lo_:
                    vals[lo_ - j0 : hi_ - j0] = cnt + 1
            store[v] = vals
            if first is not None and last is not None:
                f, la = consumption.first_last(j0, j1)
                first[v], last[v] = f, la
        if s_first is not None and j0 < s_first:
            max_first = max(max_first, int(v[: s_first - j0].max()))
        progress.advance(v.shape[0])
    progress.done()
    if ext is not None:  # counts the ids never written, then (when none) store[:S] -= 1, store[S] = 0
        n_missing, first_missing = (int(x) for x in ext.finish_store(store))
    else:
        missing = np.flatnonzero(store[:S] == 0)
        n_missing, first_missing = int(missing.size), int(missing[0]) if missing.size else -1
    if n_missing:
        _finding(rep, info.path, "shuffle permutation", f"each sample id in [0, {S}) exactly once",
                 f"{n_missing} ids missing (first: {first_missing}), so others repeat",
                 "the shuffle index is damaged or from another build: " + STALE_HINT)
        rep.exposure_ok = False
        return None, None, None
    _check_separation(ctx, info, s_first, max_first)
    if ext is None:
        store[:S] -= 1
        store[S] = 0
    return store, first, last


@dataclass
class _Stream:
    """Results of the stream pass."""

    total_tokens: int = 0
    """Tokens of the whole stream (E*T for a consistent index)."""
    pos_last: int | None = None
    """Stream position of the last sample boundary (row S)."""
    last_row: tuple[int, int] | None = None
    """(local document, offset) of the last sample boundary."""
    diverged: bool = False
    """A sample boundary disagreed with the .idx sizes (reported once)."""


def _stream_pass(ctx: _Ctx, doc_r: NpyReader, sample_r: NpyReader, sizes: np.ndarray, acc: np.ndarray | None,
                 acc_shift: int, exp: ExposureState | None, tail_check: tuple[int, np.ndarray] | None,
                 progress: Progress) -> _Stream:
    """One pass over doc_idx and sample_idx: per-document copies (and exposure), boundary checks."""
    ext = accelerated()
    if ext is not None:
        return _stream_pass_c(ext, ctx, doc_r, sample_r, sizes, acc, acc_shift, exp, tail_check, progress)
    rep, S, lo = ctx.rep, ctx.S, ctx.lo
    out = _Stream()
    rows_total = S + 1
    next_row = 0
    pend = np.zeros((0, 2), dtype=np.int64)
    pend_row0 = 0
    prev_p = 0
    base = 0
    check = True
    one = np.ones(1, dtype=acc.dtype)
    progress.start("stream", doc_r.info.rows)
    ndoc = doc_r.info.rows
    for q0, d in doc_r.chunks(rows=STREAM_CHUNK):
        q1 = q0 + d.shape[0]
        dl = d - lo if lo else d
        s32 = sizes[dl]
        cum_after = np.cumsum(s32, dtype=np.int64)
        if base:
            cum_after += base
        s = s32
        cum_before = cum_after - s32
        if exp is not None and rep.exposure_ok:
            f0 = exp.base_counts(cum_before).astype(acc.dtype)
            vals = (f0 << acc.dtype.type(acc_shift)) | one
            exp.copies(dl, s, cum_before)
        else:
            vals = np.ones(dl.shape[0], dtype=acc.dtype)
        np.add.at(acc, dl, vals)
        if tail_check is not None and q1 > tail_check[0]:
            seen = tail_check[1]
            seen[dl[max(0, tail_check[0] - q0) :]] = True
        # sample boundaries whose document position falls in this chunk
        while check:
            if pend.shape[0] == 0:
                if next_row >= rows_total:
                    break
                block = sample_r.read(next_row, min(rows_total, next_row + STREAM_CHUNK)).astype(np.int64)
                pend_row0, next_row = next_row, next_row + block.shape[0]
                p = block[:, 0]
                if int(p[0]) < prev_p or (p.shape[0] > 1 and bool(np.any(np.diff(p) < 0))):
                    dif = np.diff(np.concatenate(([prev_p], p)))
                    bad = int(np.argmax(dif < 0))
                    _finding(rep, sample_r.info.path, "sample index order",
                             "non-decreasing document positions", f"row {pend_row0 + bad} goes back to {int(p[bad])}",
                             "the sample index is damaged: " + STALE_HINT)
                    rep.exposure_ok, check = False, False
                    break
                if int(block[:, 1].min()) < 0:
                    bad = int(np.argmax(block[:, 1] < 0))
                    _finding(rep, sample_r.info.path, "sample offset", ">= 0", f"{int(block[bad, 1])} at row {pend_row0 + bad}")
                    rep.exposure_ok, check = False, False
                    break
                prev_p = int(p[-1])
                pend = block
            k = int(np.searchsorted(pend[:, 0], q1, side="left"))
            if k:
                _boundaries(ctx, out, pend[:k], pend_row0, q0, dl, s, cum_before, exp, sample_r.info.path)
                if out.diverged and (exp is not None or ctx.aff is not None):
                    rep.exposure_ok = False
                pend, pend_row0 = pend[k:], pend_row0 + k
            if pend.shape[0]:
                break
        base = int(cum_after[-1]) if cum_after.shape[0] else base
        progress.advance(d.shape[0])
    progress.done()
    out.total_tokens = base
    if check and (pend.shape[0] or next_row < rows_total):
        _rows_past_doc_index(rep, sample_r, pend, pend_row0, next_row, ndoc)
    return out



def _rows_past_doc_index(rep: Any, sample_r: NpyReader, pend: np.ndarray, pend_row0: int, next_row: int,
                         ndoc: int) -> None:
    """Finding for sample-index rows left after the document index ran out (both stream passes)."""
    row = pend_row0 if pend.shape[0] else next_row
    p_bad = int(pend[0, 0]) if pend.shape[0] else int(sample_r.read(row, row + 1)[0, 0])
    _finding(rep, sample_r.info.path, "sample index range", f"document positions < {ndoc} (entries of doc_idx)",
             f"row {row} points at position {p_bad}",
             "the sample index points past the document index: the files come from different builds. " + STALE_HINT)
    rep.exposure_ok = False

def _stream_pass_c(ext: Any, ctx: _Ctx, doc_r: NpyReader, sample_r: NpyReader, sizes: np.ndarray, acc: np.ndarray | None,
                   acc_shift: int, exp: ExposureState | None, tail_check: tuple[int, np.ndarray] | None,
                   progress: Progress) -> _Stream:
    """:func:`_stream_pass` with its per-entry loops in C (same checks, same findings)."""
    rep, S, lo, L = ctx.rep, ctx.S, ctx.lo, ctx.L
    out = _Stream()
    rows_total = S + 1
    next_row = 0
    pend = np.zeros((0, 2), dtype=sample_r.info.dtype)
    pend_row0 = 0
    prev_p = 0
    base = 0
    check = True
    exposing = exp is not None or ctx.aff is not None or ctx.pairs is not None
    cb_buf = np.empty(STREAM_CHUNK, dtype=np.int64)
    s_buf = np.empty(STREAM_CHUNK, dtype=np.int32)
    progress.start("stream", doc_r.info.rows)
    ndoc = doc_r.info.rows
    for q0, d in doc_r.chunks(rows=STREAM_CHUNK):
        n = d.shape[0]
        q1 = q0 + n
        # the chunk's second half runs on another thread from the stream position the sample index gives
        # for its first row there; peeked blocks are used only when clean (else read again below, in order)
        qm = q0 + n // 2
        while check and next_row < rows_total and (pend.shape[0] == 0 or int(pend[-1, 0]) < qm):
            block = sample_r.read(next_row, min(rows_total, next_row + STREAM_CHUNK))
            order, neg = ext.check_block(block, prev_p)
            if order >= 0 or neg >= 0:
                break
            if pend.shape[0]:  # the pending rows and this block as one view of the file (no copy)
                pend = sample_r.read(pend_row0, next_row + block.shape[0])
            else:
                pend, pend_row0 = block, next_row
            next_row += block.shape[0]
            prev_p = int(block[-1, 0])
        split_at = split_base = -1
        if check and pend.shape[0]:
            k = int(ext.rows_before(pend, qm))
            if k < pend.shape[0] and pend_row0 + k < S and int(pend[k, 0]) < q1:
                split_at, split_base = int(pend[k, 0]) - q0, (pend_row0 + k) * L - int(pend[k, 1])
        if exp is not None and rep.exposure_ok:
            base, exp.n_log, seam_ok, exp.n_log2 = ext.stream(
                d, lo, sizes, acc, acc_shift, base, exp.c, L, S, cb_buf, s_buf, exp.head, exp.log, exp.n_log,
                split_at, split_base, exp.pack, exp.bias, exp.inl, exp.n_log2, exp.kchg)
        elif ctx.pairs is not None and rep.exposure_ok:
            p = ctx.pairs
            base, seam_ok = ext.stream_pair(d, lo, p.sizes, p.rec, base, p.c, L, S, cb_buf, s_buf, split_at, split_base,
                                            p.hist, p.stats)
        elif ctx.aff is not None and acc is None:
            aff = ctx.aff
            base, aff.n1, seam_ok, aff.n2 = ext.stream_aff(d, lo, sizes, base, L, S, cb_buf, s_buf, split_at, split_base,
                                                           aff.ids, int(aff.default != 0), aff.rows, aff.n1, aff.n2)
        else:
            base, _, seam_ok = ext.stream(d, lo, sizes, acc, acc_shift, base, None, L, S, cb_buf, s_buf, None, None, 0,
                                          split_at, split_base)
        cb, s = cb_buf[:n], s_buf[:n]
        if exp is not None and rep.exposure_ok and exp.first_s is not None:
            exp.copies(d - lo if lo else d, s, cb)
        if tail_check is not None and q1 > tail_check[0]:
            dl = d - lo if lo else d
            tail_check[1][dl[max(0, tail_check[0] - q0) :]] = True
        while check:
            if pend.shape[0] == 0:
                if next_row >= rows_total:
                    break
                block = sample_r.read(next_row, min(rows_total, next_row + STREAM_CHUNK))
                pend_row0, next_row = next_row, next_row + block.shape[0]
                order, neg = ext.check_block(block, prev_p)
                if order >= 0:
                    _finding(rep, sample_r.info.path, "sample index order",
                             "non-decreasing document positions", f"row {pend_row0 + order} goes back to {int(block[order, 0])}",
                             "the sample index is damaged: " + STALE_HINT)
                    rep.exposure_ok, check = False, False
                    break
                if neg >= 0:
                    _finding(rep, sample_r.info.path, "sample offset", ">= 0", f"{int(block[neg, 1])} at row {pend_row0 + neg}")
                    rep.exposure_ok, check = False, False
                    break
                prev_p = int(block[-1, 0])
                pend = block
            k = int(ext.rows_before(pend, q1))
            if k:
                _boundaries_c(ext, ctx, out, pend[:k], pend_row0, q0, d, s, cb, sample_r.info.path)
                if out.diverged and exposing:
                    rep.exposure_ok = False
                pend, pend_row0 = pend[k:], pend_row0 + k
            if pend.shape[0]:
                break
        if not seam_ok and exposing and rep.exposure_ok:  # the check reports it
            rep.exposure_ok = False
        progress.advance(n)
    progress.done()
    out.total_tokens = base
    if check and (pend.shape[0] or next_row < rows_total):
        _rows_past_doc_index(rep, sample_r, pend, pend_row0, next_row, ndoc)
    return out


def _boundaries_c(ext: Any, ctx: _Ctx, out: _Stream, rows: np.ndarray, row0: int, q0: int, d: np.ndarray,
                  s: np.ndarray, cb: np.ndarray, path: str) -> None:
    """:func:`_boundaries` in C: the exposure needs nothing from the rows (the stream pass found the
    copies where the draw count changes)."""
    rep, L, S = ctx.rep, ctx.L, ctx.S
    if row0 + rows.shape[0] - 1 == S:  # the final boundary is checked at the end (ceil case)
        p_l, off_l = int(rows[-1, 0]) - q0, int(rows[-1, 1])
        out.pos_last = int(cb[p_l]) + off_l
        out.last_row = (int(d[p_l]) - ctx.lo, off_l)
        if off_l > int(s[p_l]) and not out.diverged:
            _finding(rep, path, "sample boundary", f"an offset <= {int(s[p_l])} in document {int(d[p_l])}",
                     f"sample_idx[{S}] = ({p_l + q0}, {off_l})", "first divergence: " + STALE_HINT)
            out.diverged = True
        rows = rows[:-1]
    if not rows.shape[0] or out.diverged:
        return
    b = int(ext.check_rows(rows, q0, row0, L, cb, s))
    if b < 0:
        return
    pb, ob = int(rows[b, 0]) - q0, int(rows[b, 1])
    _boundary_finding(rep, out, path, row0 + b, L, pb + q0, ob, int(d[pb]), int(s[pb]), int(cb[pb]) + ob)


def _boundary_finding(rep: IndexReport, out: _Stream, path: str, i: int, L: int, pos: int, off: int, doc: int,
                      size: int, token: int) -> None:
    """The first sample boundary ``sample_idx[i] = (pos, off)`` not where the sizes put it (both stream passes)."""
    row = f"sample_idx[{i}] = ({pos}, {off})"
    found = f"{row}: offset past the end of document {doc} ({size} tokens)" if off > size else f"{row} at token {token}"
    _finding(rep, path, "sample boundary",
             f"stream token {i * L} (= {i} x seq_length {L}) from doc_idx and the current .idx sizes",
             found, "first divergence: " + STALE_HINT)
    out.diverged = True


def _boundaries(ctx: _Ctx, out: _Stream, rows: np.ndarray, row0: int, q0: int, dl: np.ndarray, s: np.ndarray,
                cum_before: np.ndarray, exp: ExposureState | None, path: str) -> None:
    """Check the sample boundaries ``rows`` (row ids from ``row0``) of this doc chunk; feed the exposure."""
    rep, L, S = ctx.rep, ctx.L, ctx.S
    p = rows[:, 0] - q0
    off = rows[:, 1]
    size = s[p]
    pos = cum_before[p] + off
    if row0 + rows.shape[0] - 1 == S:  # the final boundary is checked at the end (ceil case)
        out.pos_last = int(pos[-1])
        out.last_row = (int(dl[p[-1]]), int(off[-1]))
        if off[-1] > size[-1] and not out.diverged:
            _finding(rep, path, "sample boundary", f"an offset <= {int(size[-1])} in document {int(dl[p[-1]]) + ctx.lo}",
                     f"sample_idx[{S}] = ({int(p[-1]) + q0}, {int(off[-1])})", "first divergence: " + STALE_HINT)
            out.diverged = True
        p, off, pos, size = p[:-1], off[:-1], pos[:-1], size[:-1]
    n = p.shape[0]
    if not n or out.diverged:
        return
    pos -= np.arange(row0 * L, (row0 + n) * L, L, dtype=np.int64)
    bad = (off > size) | (pos != 0)
    if bad.any():
        b = int(np.argmax(bad))
        _boundary_finding(rep, out, path, row0 + b, L, int(p[b]) + q0, int(off[b]), int(dl[p[b]]) + ctx.lo,
                          int(size[b]), int(pos[b]) + (row0 + b) * L)
        return
    if exp is not None:
        k = 1 if row0 == 0 else 0
        if n > k:
            exp.boundaries(row0 + k, dl[p[k:]], off[k:])


def _regen_check(ctx: _Ctx, doc_r: NpyReader, sh_r: NpyReader, epochs: int, s_first: int | None) -> None:
    """Small indexes: doc_idx and shuffle_idx must be exactly what the seed builds (numpy RandomState)."""
    rep = ctx.rep
    if rep.seed is None or rep.seed < 0:
        return
    docs = np.arange(ctx.lo, ctx.hi, dtype=np.int32)
    rng = np.random.RandomState(rep.seed)
    separate = bool(ctx.expected_separate)

    def tiled(e: int) -> np.ndarray:
        out = np.tile(docs, e).astype(np.int32)
        rng.shuffle(out)
        return out

    doc = np.concatenate((tiled(epochs - 1), tiled(1))) if separate and epochs > 1 else tiled(epochs)
    got = doc_r.read(0, doc_r.info.rows)
    if got.shape != doc.shape or not np.array_equal(got, doc):
        where = int(np.argmax(got != doc)) if got.shape == doc.shape else min(got.shape[0], doc.shape[0])
        _finding(rep, doc_r.info.path, "document index vs seed",
                 f"the order random_seed {rep.seed} builds for documents [{ctx.lo}, {ctx.hi}) x {epochs} epochs",
                 f"a different order from entry {where}", "the index was built with other parameters or data: " + STALE_HINT)
        return
    S = ctx.S
    dt = np.uint32 if S < np.iinfo(np.uint32).max - 1 else np.int64
    n1 = s_first if (separate and s_first is not None and 0 < s_first < S) else S
    first = np.arange(n1, dtype=dt)
    rng.shuffle(first)
    if n1 < S:
        second = np.arange(n1, S, dtype=dt)
        rng.shuffle(second)
        first = np.concatenate((first, second))
    got_s = sh_r.read(0, sh_r.info.rows)
    if got_s.shape != first.shape or not np.array_equal(got_s.astype(np.int64), first.astype(np.int64)):
        where = int(np.argmax(got_s != first)) if got_s.shape == first.shape else 0
        _finding(rep, sh_r.info.path, "shuffle index vs seed", f"the permutation random_seed {rep.seed} builds",
                 f"a different permutation from entry {where}", STALE_HINT)


def audit_index(
    group: names.CacheGroup,
    resolve_prefix: Callable[[str | None], str | None] | None = None,
    add_extra_token: int | None = None,
    consumption_for: Callable[[IndexReport], Consumption | None] | None = None,
    manifest: Callable[[IndexReport, ManifestChunk], None] | None = None,
    progress: Progress | None = None,
    iteration_of: Callable[[int], int | None] | None = None,
) -> IndexReport:
    """Audit one GPT index; never raises for a damaged file (findings instead)."""
    for allow_sparse in (True, False):
        rep = IndexReport(kind=group.kind, path=group.stem, split=group.split, files=dict(group.files),
                          digest=group.digest)
        ctx = _Ctx(rep=rep, group=group, allow_sparse=allow_sparse)
        try:
            _audit(ctx, resolve_prefix, add_extra_token, consumption_for, manifest, progress or Progress(), iteration_of)
        except _SparseFailed:
            continue
        except FileProblem as p:
            rep.findings.append(p.finding)
            rep.exposure_ok = False
        break
    if not rep.exposure_ok and rep.exposure is not None:
        rep.exposure = None
    return rep


def _audit(ctx: _Ctx, resolve_prefix: Callable[[str | None], str | None] | None, add_extra_token: int | None,
           consumption_for: Callable[[IndexReport], Consumption | None] | None,
           manifest: Callable[[IndexReport, ManifestChunk], None] | None, progress: Progress,
           iteration_of: Callable[[int], int | None] | None) -> None:
    rep, g = ctx.rep, ctx.group
    for role in g.missing_roles():
        _finding(rep, g.stem, "missing file", f"the {role} file of this index", "no such file",
                 "an incomplete cache: the framework would rebuild it (or fail)")
    if g.missing_roles():
        rep.exposure_ok = False
        return
    prefix = _describe(ctx, resolve_prefix)
    if add_extra_token is not None and g.kind == names.MCORE:
        ctx.a, ctx.a_known = int(add_extra_token), True
        rep.add_extra_token = ctx.a
    if rep.pack_impl not in (None, "packed"):
        rep.notes.append(f"pack_impl {rep.pack_impl}: only headers and document ids are audited (no exposure)")
    ctx.doc, ctx.sample, ctx.shuffle = (read_header(g.files[r]) for r in names.GPT_ROLES)
    packed = rep.pack_impl in (None, "packed")
    # NeoX's unpacked / pack_until_overflow save Python lists: int64 document ids
    ok = _check_dtype(rep, ctx.doc, _DOC_DTYPES if packed else ("int32", "int64"), 1, "document index")
    ok &= _check_dtype(rep, ctx.sample, _SAMPLE_DTYPES, 2, "sample index")
    ok &= _check_dtype(rep, ctx.shuffle, _SHUFFLE_DTYPES, 1, "shuffle index")
    if ok and ctx.sample.shape[1] != 2:
        _finding(rep, ctx.sample.path, "sample index shape", "[N+1, 2]", list(ctx.sample.shape))
        ok = False
    if not ok:
        rep.exposure_ok = False
        return
    ctx.S = S = max(0, ctx.sample.rows - 1)
    rep.samples = S
    rep.length = S - 1 if g.kind == names.NEOX else S
    if rep.seq_length is None or rep.seq_length <= 0:
        _finding(rep, g.files.get(names.DESCRIPTION, g.stem), "sequence length", "a positive integer", rep.seq_length)
        rep.exposure_ok = False
        return
    ctx.L = L = int(rep.seq_length)
    if not prefix:
        _finding(rep, g.files.get(names.DESCRIPTION, g.stem), "data prefix", "the path of the .bin/.idx",
                 "none", "pass --data-prefix")
        rep.exposure_ok = False
        return
    rep.data_prefix = prefix
    try:
        ctx.header = idxmod.read_header(prefix, check_bin=True)
    except IndexFileError as err:
        _finding(rep, idxmod.normalize_prefix(prefix) + ".idx", "data", "the .bin/.idx the index was built from", str(err),
                 "point --data-prefix at the data (the cache files are checked against its sizes)")
        rep.exposure_ok = False
        return
    n_seq = ctx.header.sequence_count
    desc = rep.description or {}
    book = desc.get("_bookends")
    if book is not None:
        ctx.expected_range = mcore_sem.split_range(book, n_seq)
    elif g.kind == names.MCORE and desc.get("split_matrix", 0) is None:
        ctx.expected_range = (0, n_seq)
    with NpyReader(ctx.doc) as doc_r, NpyReader(ctx.sample) as sample_r, NpyReader(ctx.shuffle) as sh_r:
        if not _doc_prepass(ctx, doc_r, progress):
            rep.exposure_ok = False
            return
        lo, hi = ctx.lo, ctx.hi
        rep.document_range = [lo, hi]
        if ctx.expected_range is not None and (lo, hi) != ctx.expected_range and ctx.expected_range[1] > ctx.expected_range[0]:
            _finding(rep, ctx.doc.path, "document range",
                     f"[{ctx.expected_range[0]}, {ctx.expected_range[1]}) from split_matrix and {n_seq} sequences",
                     f"[{lo}, {hi})", "the corpus or split changed since the build: " + STALE_HINT)
        D = hi - lo
        consumption = None
        if consumption_for is not None and rep.exposure_ok and packed:
            consumption = consumption_for(rep)
        ext = accelerated()
        E_est = ctx.doc.rows // D if D else 0
        bound = max(E_est, 1) * (max(consumption.max_count, 0) + 1 if consumption else 1)
        wide = not (bound < (1 << 15) and E_est < (1 << 15))
        shift = 32 if wide else 16
        # one record per document (its .idx size, copy/base counts and, with the C extension and a
        # consumption, the head of its log): a document copy in the stream pass touches one cache line
        fields: list[tuple[str, Any]] = [("acc", np.uint64 if wide else np.uint32)]
        if ext is not None and consumption is not None:  # log entries: at most one a sample
            idt = np.int32 if max(2 * ctx.S + 4, D) < (1 << 31) - 1 else np.int64  # two log regions
            fields.append(("head", idt))
        fields.append(("size", np.int32))
        if ext is not None and consumption is not None:
            # the document's first log entry, packed (0: none): 16-byte records (with 32-bit counts), and
            # most documents need no log read in the last pass
            fields.append(("inl", idt))
        rdt = np.dtype(fields, align=True)
        init = np.zeros(1, dtype=rdt)
        if "head" in rdt.names:
            init["head"] = -1  # no log entry yet
        # with the C extension, a validation, or a consumption where nearly every sample is drawn the same
        # number of times, counts no copies: the stream pass reads the .idx sizes in place and the copies are
        # checked by a hash sum of the ids (counted only when it does not match)
        sparse = False
        if consumption is not None and ext is not None and manifest is None and ctx.allow_sparse \
                and ctx.doc_hash is not None and hasattr(ext, "stream_aff"):
            default, minority = consumption.majority(S)
            n_minor = sum(b_ - a_ for a_, b_, _ in minority)
            # the copies to list: about (copies a sample overlaps + 1) per such sample; bounded, so that their
            # exact exposure (a Python loop over them) stays cheap for corpora of very short documents too
            if n_minor <= SPARSE_SAMPLES and n_minor * (ctx.doc.rows / max(S, 1) + 2) <= SPARSE_COPIES:
                sparse = True
                cap = 64 + n_minor * (L + 2)  # a sample overlaps at most L + 2 copies; untouched rows cost nothing
                ctx.aff = _Affected(ids=np.zeros(0, dtype=np.int64), counts=np.zeros(0, dtype=np.int64),
                                    default=default, rows=np.empty((2 * cap, 3), dtype=np.int64), n2=cap)
        pre: _DocStats | None = None  # the copies by the hash sum, when known before the stream pass
        if consumption is not None and ext is not None and manifest is None and not sparse \
                and applies(E_est) and ctx.doc.rows == E_est * D:
            # every document once or twice (by the hash sum): each one's exposure at its last copy
            sizes = _map_sizes(ctx.header, lo, hi)
            pre = _copies_by_hash(ctx, ctx.doc.rows, D, *_size_totals(sizes))
            if pre is not None:
                ctx.pairs = make_pairs(ext, sizes, pre.epochs, pre.tokens, consumption.max_count)
        by_hash = (consumption is None or sparse or ctx.pairs is not None) and ctx.doc_hash is not None
        acc: np.ndarray | None = None
        if by_hash and ctx.pairs is None:
            sizes = _map_sizes(ctx.header, lo, hi)
        elif not by_hash:
            rec = zeroed(D, rdt, fill=init)
            stats: list[int] = []
            sizes, acc = _load_sizes(ctx.header, lo, hi, rec["size"], stats), rec["acc"]
        T_est, max_size = stats if acc is not None else (0, 0)
        empty = 0
        if acc is None:  # the mapped .idx sizes (contiguous)
            T_est, empty = (pre.tokens, pre.empty) if pre is not None else _size_totals(sizes)
        s_first: int | None = None
        if g.kind != names.NEOX and rep.num_samples_requested is not None and E_est > 1 and T_est > 0 \
                and ctx.doc.rows == E_est * D:
            a = ctx.a
            per_epoch = (T_est - a) // L
            sans = ((E_est - 1) * T_est - a) // L
            ctx.expected_separate = (rep.num_samples_requested - sans) < int(SEPARATE_THRESHOLD * per_epoch)
            s_first = sans
        elif g.kind != names.NEOX and E_est > 1 and T_est > 0:
            s_first = ((E_est - 1) * T_est - ctx.a) // L
        c_ext, first_s, last_s = _shuffle_pass(ctx, sh_r, consumption, s_first,
                                               manifest is not None and consumption is not None, progress)
        if ctx.expected_separate is None and ctx.files_separate is not None:
            ctx.expected_separate = ctx.files_separate
        exp: ExposureState | None = None
        if ctx.pairs is not None and (c_ext is None or not rep.exposure_ok):
            ctx.pairs = None  # no exposure (the findings say why): the stream pass validates only
        if ctx.pairs is not None:
            ctx.pairs.c = c_ext
        elif consumption is not None and c_ext is not None and rep.exposure_ok:
            head = inl = None
            if ext is not None:
                head, inl = rec["head"], rec["inl"]  # -1 (none) and 0 (none) from the fill above
            exp = ExposureState(c_ext, L, D, max_size if D else 1, first_s, last_s, ext=ext, head=head,
                                inl=inl, top=consumption.max_count)
        tail: tuple[int, np.ndarray] | None = None
        if ctx.expected_separate and E_est > 1 and ctx.doc.rows == E_est * D:
            tail = ((E_est - 1) * D, np.zeros(D, dtype=bool))
        if not packed:
            return
        st = _stream_pass(ctx, doc_r, sample_r, sizes, acc, shift, exp, tail, progress)
        if acc is None:
            ds = pre or _copies_by_hash(ctx, ctx.doc.rows, D, T_est, empty) or _count_copies(ctx, doc_r, D, sizes)
            if sparse and rep.exposure_ok and (not ds.by_hash or ctx.aff is None or ctx.aff.copies() is None):
                raise _SparseFailed
        else:
            ds = _doc_stats(acc, acc.dtype.type((1 << shift) - 1), sizes, shift)
        rep.documents, T, E = ds.documents, ds.tokens, ds.epochs
        rep.tokens = T
        ok_copies = True
        if rep.documents != D:
            _finding(rep, ctx.doc.path, "documents of the split", f"every id in [{lo}, {hi})",
                     f"document {lo + ds.first_absent} absent ({D - rep.documents} absent)",
                     "the index is damaged or mixed: " + STALE_HINT)
            ok_copies = False
        if ds.first_other is not None:
            _finding(rep, ctx.doc.path, "epochs", f"every document {E} times",
                     f"document {lo + ds.first_other[0]} {ds.first_other[1]} times",
                     "the document index is damaged or mixed: " + STALE_HINT)
            ok_copies = False
        rep.epochs = E
        if tail is not None and not tail[1].all():
            _finding(rep, ctx.doc.path, "final-epoch separation", "each document once in the last epoch block",
                     f"{int(np.count_nonzero(~tail[1]))} documents missing from it", STALE_HINT)
        if st.total_tokens != E * T and ok_copies:
            _finding(rep, ctx.doc.path, "stream tokens", f"{E} x {T}", st.total_tokens)
        ET = st.total_tokens
        # the final boundary: S*L (drop last) or E*T - a (partial last sample kept)
        if st.pos_last is not None and not st.diverged:
            cands = [S * L] + [ET - a for a in (1, 0) if S * L > ET - a]
            if st.pos_last not in cands:
                _finding(rep, ctx.sample.path, "sample boundary", f"stream token {cands[0]} for the last row {S}",
                         f"token {st.pos_last}", "first divergence: " + STALE_HINT)
                rep.exposure_ok = False
            elif st.pos_last != S * L and g.kind == names.MCORE and not ctx.a_known:
                ctx.a, ctx.a_known = ET - st.pos_last, True
        if g.kind == names.MCORE and not ctx.a_known:
            s1, s0 = (ET - 1) // L, ET // L
            if S == s1 and S != s0:
                ctx.a, ctx.a_known = 1, True
            elif S == s0 and S != s1:
                ctx.a, ctx.a_known = 0, True
            else:
                ctx.a = 1
                if T % L == 0:
                    rep.notes.append("add_extra_token_to_sequence is not recorded in the cache and not inferable "
                                     "from it; samples_per_epoch assumes 1 (the default): pass --add-extra-token 0 "
                                     "if the run used 0")
        rep.add_extra_token = ctx.a
        a = ctx.a
        if g.kind == names.NEOX:
            rep.samples_per_epoch = neox_sem.samples_per_epoch(T, L)
            built = (E * T - 1) // L if E else 0
            rep.separated_final_epoch = False
            if rep.num_samples_requested is not None and T > 0:
                exp_e = neox_sem.num_epochs(T, L, rep.num_samples_requested)
                if exp_e != E:
                    _finding(rep, ctx.doc.path, "epochs for the request",
                             f"{exp_e} (smallest E with (E*{T} - 1) // {L} >= {rep.num_samples_requested})", E, STALE_HINT)
        else:
            rep.samples_per_epoch = max(0, (T - a) // L)
            built = (E * T - a) // L if E else 0
            ns = rep.num_samples_requested
            if ns is not None and T > 0:
                exp_e = mcore_sem.num_epochs(T, L, ns, a) if g.kind == names.MCORE else neox_sem.num_epochs(T, L, ns)
                if exp_e != E:
                    _finding(rep, ctx.doc.path, "epochs for the request",
                             f"{exp_e} (for num_samples {ns}, seq_length {L}, {T} tokens)", E, STALE_HINT)
                if S < ns:
                    _finding(rep, ctx.sample.path, "samples built", f">= num_samples {ns}", S, STALE_HINT)
            elif g.kind == names.MCORE and ns is None and E != 1:
                _finding(rep, ctx.doc.path, "epochs", "1 (num_samples null: one epoch)", E, STALE_HINT)
            rep.separated_final_epoch = bool(ctx.expected_separate) if E > 1 else False
        if S not in (built, built + 1) and not st.diverged and ok_copies:
            _finding(rep, ctx.sample.path, "samples built", f"{built} from {E} epochs of {T} tokens", S, STALE_HINT)
        small = ctx.doc.rows + S <= REGEN_LIMIT
        if small and ok_copies and not st.diverged and rep.exposure_ok and E > 0:
            _regen_check(ctx, doc_r, sh_r, E, s_first if s_first is not None else None)
        if sparse and rep.exposure_ok and consumption is not None and ctx.aff is not None:
            aff, copies = ctx.aff, ctx.aff.copies()
            assert copies is not None
            rep.exposure = sparse_exposure(copies, sizes, aff.ids, aff.counts, aff.default, S, L, E, T, D, ds.empty,
                                           consumption.consumed)
        elif ctx.pairs is not None and rep.exposure_ok and consumption is not None:
            rep.exposure = ctx.pairs.report(consumption.consumed)
        elif exp is not None and rep.exposure_ok and consumption is not None:
            if st.pos_last == S * L and st.last_row is not None and S * L < ET:
                exp.end_event(*st.last_row)
            cb = None
            if manifest is not None:
                def cb(chunk: ManifestChunk) -> None:
                    manifest(rep, chunk)
            rep.exposure = exp.finalize(acc, shift, sizes, lo, consumption.consumed, cb, max_copies=E)
        if rep.exposure is not None and consumption is not None:
            if rep.samples_per_epoch and consumption.consumed > rep.samples_per_epoch:
                rep.exposure.second_pass_sample = _second_pass(consumption, rep.samples_per_epoch)
                if iteration_of is not None and rep.exposure.second_pass_sample is not None:
                    rep.exposure.second_pass_iteration = iteration_of(rep.exposure.second_pass_sample)
            if consumption.consumed > (rep.length or 0):
                rep.exposure.notes.append(
                    f"{consumption.consumed} samples drawn from a dataset of len {rep.length}: "
                    + ("NeoX wraps the index silently (index % len)" if g.kind == names.NEOX
                       else "megatron would run out of samples (or a blend raises)"))


@dataclass
class _DocStats:
    """Per-document copy counts summarized."""

    documents: int = 0
    """Documents present at least once."""
    tokens: int = 0
    """Their tokens."""
    epochs: int = 0
    """The most copies of a document."""
    first_absent: int = 0
    """First local id absent from the document index."""
    first_other: tuple[int, int] | None = None
    """(local id, copies) of the first document present another number of times than ``epochs``."""
    by_hash: bool = False
    """Every document is there ``epochs`` times, by the hash sum (no counts)."""
    empty: int = 0
    """Documents without tokens (known with ``by_hash``)."""


def _doc_stats(acc: np.ndarray, mask: Any, sizes: np.ndarray, shift: int) -> _DocStats:
    """Documents present, their tokens, the epochs (most copies) and the first irregular document, in chunks."""
    ext = accelerated()
    if ext is not None:
        docs, toks, epochs, absent, other, other_c = (int(x) for x in ext.doc_stats(acc, shift, sizes))
        return _DocStats(documents=docs, tokens=toks, epochs=epochs, first_absent=max(absent, 0),
                         first_other=(other, other_c) if other >= 0 else None)
    out = _DocStats(first_absent=-1)
    n = acc.shape[0]
    step = 1 << 20
    for a in range(0, n, step):
        c = acc[a : a + step] & mask
        present = c > 0
        k = int(np.count_nonzero(present))
        out.documents += k
        out.tokens += int(sizes[a : a + step][present].sum(dtype=np.int64))
        if k:
            out.epochs = max(out.epochs, int(c.max()))
        if k < c.shape[0] and out.first_absent < 0:
            out.first_absent = a + int(np.argmax(~present))
    for a in range(0, n, step):
        c = acc[a : a + step] & mask
        odd = (c > 0) & (c != out.epochs)
        if odd.any():
            b = int(np.argmax(odd))
            out.first_other = (a + b, int(c[b]))
            break
    out.first_absent = max(out.first_absent, 0)
    return out


def _second_pass(consumption: Consumption, per_epoch: int) -> int | None:
    """Global position of the draw that exceeds one epoch's samples (draw number ``per_epoch``, 0-based)."""
    if consumption.positions is not None:
        if per_epoch < consumption.positions.shape[0]:
            return int(consumption.positions[per_epoch])
        return None
    if consumption.period <= 0:  # a blend's source: the blend knows the global position
        return None
    return per_epoch if consumption.consumed > per_epoch else None


def stat_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
