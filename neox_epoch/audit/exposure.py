"""Per-token and per-document exposure of one index: how often each token was an *input* token.

Definition. Sample ``i`` covers the ``seq_length`` input tokens at positions ``[i*L, i*L + L)`` of the
stream (the documents of ``doc_idx`` concatenated): the first ``L`` of the ``L+1`` tokens it returns;
the last one is a label only (megatron-core with ``add_extra_token_to_sequence=False`` returns exactly
``L`` tokens, the same inputs). Coverage stops at ``min(S*L, E*T)``. A token's exposure is the number of
consumed samples that cover one of its ``E`` copies in the stream.

Computation, streamed and without a per-sample or per-token Python loop:

1. the shuffle pass stores, per sample ``i``, how often training drew it: ``c[i]`` (one byte a sample);
2. the stream pass walks ``doc_idx`` in chunks with the cumulative token positions of its entries
   (``np.cumsum`` of the gathered .idx sizes). For each copy of a document it adds ``c`` of the sample
   containing the copy's first token to the document's base count ``B[d]`` (one ``np.add.at``); each
   sample boundary that falls strictly inside a copy (``sample_idx`` offset > 0) where ``c`` changes
   becomes an event (document, offset, +/-1): a difference array over the document's token offsets;
3. the events are sorted by (document, offset); walking them per document (``np.cumsum`` of the
   deltas, ``np.minimum.reduceat``) gives every document's exposure as a step function over its
   tokens, hence the token histogram ``{times: tokens}`` (``np.bincount`` weighted by step lengths),
   and per document the minimum / maximum / total exposure.

With the C extension ``neox_epoch._exposure`` (optional, see :func:`accelerated`) steps 2-3 have no
sort: the stream pass walks ``doc_idx`` once, reading ``c`` sequentially, and logs every sample boundary
strictly inside a document copy where ``c`` changes as an entry (offset, change) linked per document
(``head[d]`` -> newest entry -> older ones); the final pass walks the documents in order, sorts each
document's few entries and sweeps them into the same histograms and per-document minimum / maximum /
total. Both paths give identical reports (``tests/test_audit_paths.py``); the C path keeps 8 bytes an
entry, 12 when offsets are too large to pack (at most one entry per change of ``c`` between consecutive
samples), and 4 bytes a document for ``head`` (plus, packed, 4 for the document's first entry, kept in its
record instead of the log: most documents then need no log read).

When every document is in the document index exactly once or twice (one epoch, or the two NeoX builds for
a "one epoch" request; checked by the hash sum of the ids), :mod:`neox_epoch.audit.pairs` computes each
document's exposure at its last copy during the stream pass instead: no log and no last pass.

When nearly every sample is drawn the same number of times ``q`` (whole passes give or take a few
samples, or only a few samples drawn), :func:`sparse_exposure` needs neither ``c`` nor per-document
counts: every token is seen ``E * q`` times except in the copies that overlap one of the few other
samples, which the stream pass lists and which are computed exactly.

Memory: ``c`` (1 byte a sample), the per-document counts (4 or 8 bytes a document), the .idx sizes of
the split (4 bytes a document) and the events (8 bytes each, at most one per sample boundary where the
draw count changes). ``--manifest`` adds the first/last draw position per sample and per document.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

_ext: ModuleType | None
try:
    from neox_epoch import _exposure as _ext
except ImportError:  # the optional C extension is not built: numpy does the same work
    _ext = None


def accelerated() -> ModuleType | None:
    """The C extension when it is built and not disabled (``NEOX_EPOCH_AUDIT_NUMPY=1``), else None."""
    if _ext is None or os.environ.get("NEOX_EPOCH_AUDIT_NUMPY", "") not in ("", "0"):
        return None
    return _ext

#: documents per chunk when finalizing
DOC_CHUNK = 1 << 18
#: C path: two integers a log entry (offset and change packed) when they fit; False: always three (tests)
PACK_LOG = True
_BIG = np.iinfo(np.int64).max
#: log entries between the stream threads' two regions (more than a cache line of entries)
LOG_GAP = 32
#: the change points of the draw counts are listed for the stream pass when there are at most S / this
SPARSE_CHANGES = 64
#: with at most this many samples drawn another number of times than most (whole passes, a few samples
#: more or less), the exposure is computed from the copies overlapping them (:func:`sparse_exposure`)
SPARSE_SAMPLES = 4096
#: ... and at most about this many copies overlapping them (estimated from the copies per sample)
SPARSE_COPIES = 65536


@dataclass
class ExposureReport:
    """Exposure of one index (or the sum over a blend's sources) for a given consumption."""

    consumed_samples: int
    """Samples of this dataset drawn by training."""
    tokens: dict[int, int]
    """Token histogram ``{times seen: tokens}`` over the split's tokens (one epoch of documents)."""
    documents: dict[int, int]
    """Document histogram ``{times: documents}``, a document counted at the *minimum* exposure of its
    tokens (the number of times it was seen whole); documents without tokens are left out."""
    documents_unseen: int
    """Documents none of whose tokens was an input."""
    documents_partial: int
    """Documents whose tokens were seen a different number of times (e.g. some once, some never)."""
    tokens_unseen: int
    """Tokens never an input (``tokens[0]``)."""
    token_exposures: int
    """Sum of all token exposures (input tokens trained on from this index)."""
    second_pass_sample: int | None = None
    """0-based global sample index at which this dataset's draws exceed one epoch's samples (None: never)."""
    second_pass_iteration: int | None = None
    """1-based iteration containing ``second_pass_sample`` (needs the global batch size)."""
    notes: list[str] = field(default_factory=list)
    """Remarks (draws past the end, wraps)."""

    def to_json(self) -> dict[str, Any]:
        total = sum(self.tokens.values())
        return {
            "consumed_samples": self.consumed_samples,
            "tokens": {str(k): v for k, v in sorted(self.tokens.items())},
            "documents": {str(k): v for k, v in sorted(self.documents.items())},
            "documents_unseen": self.documents_unseen,
            "documents_partial": self.documents_partial,
            "tokens_unseen": self.tokens_unseen,
            "fraction_tokens_unseen": round(self.tokens_unseen / total, 6) if total else 0.0,
            "token_exposures": self.token_exposures,
            "second_pass_sample": self.second_pass_sample,
            "second_pass_iteration": self.second_pass_iteration,
            "notes": list(self.notes),
        }

    @staticmethod
    def combine(parts: list[ExposureReport]) -> ExposureReport:
        """Sum of several sources' exposures (a blend)."""
        out = ExposureReport(0, {}, {}, 0, 0, 0, 0)
        for p in parts:
            out.consumed_samples += p.consumed_samples
            for k, v in p.tokens.items():
                out.tokens[k] = out.tokens.get(k, 0) + v
            for k, v in p.documents.items():
                out.documents[k] = out.documents.get(k, 0) + v
            out.documents_unseen += p.documents_unseen
            out.documents_partial += p.documents_partial
            out.tokens_unseen += p.tokens_unseen
            out.token_exposures += p.token_exposures
        return out


@dataclass
class ManifestChunk:
    """Per-document exposure of a range of documents, for ``--manifest``."""

    documents: np.ndarray
    """Document ids (sequence indices in the .idx)."""
    tokens: np.ndarray
    """Tokens of each document."""
    min_exposure: np.ndarray
    """Minimum exposure over the document's tokens."""
    max_exposure: np.ndarray
    """Maximum exposure over the document's tokens."""
    token_exposures: np.ndarray
    """Sum of the exposures of the document's tokens."""
    first: np.ndarray
    """Global sample index of the first draw that covered the document (-1: never)."""
    last: np.ndarray
    """Global sample index of the last draw that covered the document (-1: never)."""


def _change_points(c: np.ndarray, step: int = 1 << 24) -> np.ndarray:
    """Sorted ``k`` (int64) with ``c[k] != c[k-1]``, in pieces (no temporary of ``c``'s size)."""
    parts = []
    for a in range(1, c.shape[0], step):
        seg = c[a - 1 : min(a + step, c.shape[0])]
        parts.append(np.flatnonzero(seg[1:] != seg[:-1]).astype(np.int64) + a)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _hist_add(h: dict[int, int], values: np.ndarray, weights: np.ndarray | None = None) -> None:
    if values.size == 0:
        return
    if weights is None:
        b = np.bincount(values)
    else:
        b = np.rint(np.bincount(values, weights=weights.astype(np.float64))).astype(np.int64)
    for k in np.flatnonzero(b):
        h[int(k)] = h.get(int(k), 0) + int(b[k])


def report_from_counts(tokens: dict[int, int], documents: dict[int, int], unseen: int, partial: int,
                       consumed: int) -> ExposureReport:
    """The report from the tokens and the documents (at each document's minimum) by times seen, and the
    unseen / partially seen document counts: zero entries dropped, keys in order, the token totals derived
    (every exposure path ends here)."""
    tok = {int(k): int(v) for k, v in sorted(tokens.items()) if v}
    docs = {int(k): int(v) for k, v in sorted(documents.items()) if v}
    return ExposureReport(
        consumed_samples=consumed, tokens=tok, documents=docs, documents_unseen=int(unseen),
        documents_partial=int(partial), tokens_unseen=tok.get(0, 0),
        token_exposures=sum(k * v for k, v in tok.items()),
    )


def report_from_histograms(ht: np.ndarray, hd: np.ndarray, unseen: int, partial: int, consumed: int) -> ExposureReport:
    """:func:`report_from_counts` from histogram arrays indexed by times seen."""
    return report_from_counts({int(k): int(ht[k]) for k in np.flatnonzero(ht)},
                              {int(k): int(hd[k]) for k in np.flatnonzero(hd)}, unseen, partial, consumed)


class ExposureState:
    """Accumulates exposure during the stream pass of one index (see the module docstring)."""

    def __init__(self, c_ext: np.ndarray, seq_length: int, num_docs: int, max_size: int,
                 first_s: np.ndarray | None = None, last_s: np.ndarray | None = None,
                 ext: ModuleType | None = None, head: np.ndarray | None = None, cap: int | None = None,
                 inl: np.ndarray | None = None, top: int | None = None) -> None:
        self.c = c_ext
        """Draw count per sample, with ``c[S] = 0`` for the uncovered tail."""
        self.S = int(c_ext.shape[0]) - 1
        self.top = int(top) if top is not None else (int(c_ext.max()) if c_ext.shape[0] else 0)
        """The largest draw count (an upper bound given by the caller, else ``c.max()``)."""
        self.L = int(seq_length)
        self.ext = ext
        """The C extension (see :func:`accelerated`): non-uniform copies instead of events."""
        self.qbits = max(1, int(max_size).bit_length())
        self.shift = self.qbits + 1
        self.n_events = 0
        self.n_log = 0
        self.pack = 0
        self.bias = 0
        if ext is not None:
            # each non-uniform copy holds a change of the draw count strictly inside it: at most one a change
            if cap is None:
                cap = int(ext.changes(c_ext))
            self.kchg = _change_points(c_ext) if cap <= max(self.S, 1) // SPARSE_CHANGES else None
            """Every k with c[k] != c[k-1] when they are few (a whole number of passes, a short run): the
            stream pass then skips its logging steps for the copies without one."""
            idt = np.int32 if max(2 * cap + 4, num_docs) < (1 << 31) - 1 else np.int64
            if head is None:
                head = np.full(num_docs, -1, dtype=idt)
            self.head = head
            """Newest non-uniform copy of each document (an entry of the log), -1: none; may be a field
            of the per-document records (a strided view)."""
            top = self.top
            if idt is np.int32 and top >= (1 << 31) - 1:
                idt = np.int64
            # two integers an entry when the offset and the change share one: (offset << pack) + change + top
            self.pack = (2 * top).bit_length() or 1
            """Bits of the change in a packed log entry (0: three integers an entry)."""
            self.bias = top
            # (+ 2: a packed entry v may be kept in a head as -(v + 2), which must fit as well)
            if not PACK_LOG or (max(int(max_size), 1) << self.pack) + 2 * top + 2 >= int(np.iinfo(idt).max):
                self.pack = 0
            # empty, not zeros: numpy asks for transparent huge pages for its uninitialized allocations
            # only (calloc's 4 kB pages made every random access into the log a TLB miss); an entry is
            # always written before it is read
            # two regions of cap + 2 entries (+ 2: scratch entries), one for each thread of the stream pass,
            # each filled from its start: only the entries written are ever touched (faulted in). Each
            # thread writes its scratch entry on every copy: LOG_GAP entries between the first region's
            # end and the second's start keep the two threads off one cache line when cap is small
            rows = 2 * (cap + 2 + LOG_GAP)
            self.log = np.empty((rows, 3 if self.pack == 0 else 2), dtype=idt)
            self.n_log2 = cap + 2 + 2 * LOG_GAP
            """Next free entry of the second region (the stream pass's second thread)."""
            """Changes of the draw count inside a document copy: (offset, change, the document's previous
            entry or -1), the first two packed into one integer when ``pack``."""
            self.inl = inl if self.pack and inl is not None and inl.dtype.itemsize >= self.log.dtype.itemsize else None
            """Each document's first log entry, packed (0: none; a packed entry is > 0), when the records hold
            one (a zeroed field of them) and entries are packed: most documents then need no log read."""
            self.events = np.empty(0, dtype=np.int64)
        else:
            self.inl = None
            self.kchg = None
            if (max(num_docs, 1).bit_length() + self.shift) > 63:
                raise ValueError("index too large for 64-bit exposure events")
            self.events = np.empty(self._event_bound(), dtype=np.int64)
        self.first_s, self.last_s = first_s, last_s
        self.doc_first: np.ndarray | None = None
        self.doc_last: np.ndarray | None = None
        if first_s is not None:
            self.doc_first = np.full(num_docs, _BIG, dtype=np.int64)
            self.doc_last = np.full(num_docs, -1, dtype=np.int64)

    def _event_bound(self) -> int:
        """At most one event per unit change of the draw count between consecutive samples."""
        changes = 0
        step = 1 << 24
        for a in range(0, self.S, step):
            seg = self.c[a : min(a + step + 1, self.S + 1)]
            changes += int(np.count_nonzero(seg[1:] != seg[:-1]))
        return changes * max(1, int(self.c.max()) if self.S else 1)

    def base_counts(self, cum_before: np.ndarray) -> np.ndarray:
        """``c`` of the sample containing each copy's first token (0 past the covered stream)."""
        if self.L & (self.L - 1) == 0:
            k = cum_before >> (self.L.bit_length() - 1)
        else:
            k = cum_before // self.L
        np.minimum(k, self.S, out=k)
        return self.c[k]

    def copies(self, dl: np.ndarray, sizes: np.ndarray, cum_before: np.ndarray) -> None:
        """Manifest only: first/last draw over the samples each copy's tokens fall in."""
        if self.first_s is None or self.doc_first is None or self.doc_last is None or self.last_s is None:
            return
        keep = (sizes > 0) & (cum_before < self.S * self.L)
        if not keep.any():
            return
        dl, sizes, cb = dl[keep], sizes[keep], cum_before[keep]
        a = cb // self.L
        b = np.minimum((cb + sizes - 1) // self.L, self.S - 1)
        lo, hi = int(a[0]), int(b[-1]) + 1
        fseg = np.where(self.first_s[lo:hi] < 0, _BIG, self.first_s[lo:hi])
        lseg = self.last_s[lo:hi]
        starts = a - lo
        fmin = np.minimum(np.minimum.reduceat(fseg, starts), fseg[b - lo])
        lmax = np.maximum(np.maximum.reduceat(lseg, starts), lseg[b - lo])
        np.minimum.at(self.doc_first, dl, fmin)
        np.maximum.at(self.doc_last, dl, lmax)

    def boundaries(self, row0: int, docs: np.ndarray, off: np.ndarray) -> None:
        """Events for the consecutive sample boundaries ``row0, row0+1, ...`` (all ``1 <= row < S``) at
        (local document ``docs``, offset ``off``): where the draw count changes inside a document."""
        n = off.shape[0]
        seg = self.c[row0 - 1 : row0 + n].astype(np.int16)
        delta = seg[1:] - seg[:-1]
        sel = np.flatnonzero((delta != 0) & (off > 0))
        if not sel.size:
            return
        dv = delta[sel]
        keys = (docs[sel].astype(np.int64) << self.shift) | (off[sel].astype(np.int64) << 1) | (dv > 0)
        reps = np.abs(dv)
        if int(reps.max()) > 1:
            keys = np.repeat(keys, reps)
        self.add_keys(keys)

    def end_event(self, dl: int, off: int) -> None:
        """The end of coverage at ``S*L`` inside a document: the last sample's count drops to 0."""
        if self.ext is not None:  # the C path reads c[S] = 0 past S*L
            return
        cnt = int(self.c[self.S - 1]) if self.S else 0
        if off > 0 and cnt > 0:
            self.add_keys(np.full(cnt, (dl << self.shift) | (off << 1), dtype=np.int64))

    def add_keys(self, keys: np.ndarray) -> None:
        n = keys.shape[0]
        if self.n_events + n > self.events.shape[0]:  # cannot happen with a correct bound; stay safe
            grown = np.empty(max(self.events.shape[0] * 2, self.n_events + n), dtype=np.int64)
            grown[: self.n_events] = self.events[: self.n_events]
            self.events = grown
        self.events[self.n_events : self.n_events + n] = keys
        self.n_events += n

    def _first_last(self, d0: int, d1: int, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Manifest: the first and last draw covering documents ``d0 + ids`` (-1: none or unknown)."""
        if self.doc_first is None or self.doc_last is None:
            none = np.full(ids.shape[0], -1, dtype=np.int64)
            return none, none
        first = self.doc_first[d0:d1][ids]
        return np.where(first == _BIG, -1, first), self.doc_last[d0:d1][ids]

    def _manifest_chunk(self, acc: np.ndarray, mask: Any, sizes: np.ndarray, d0: int, d1: int, doc_offset: int,
                        mn: np.ndarray, mx: np.ndarray, tot: np.ndarray) -> ManifestChunk:
        present = (acc[d0:d1] & mask) > 0
        ids = np.flatnonzero(present)
        first, last = self._first_last(d0, d1, ids)
        return ManifestChunk(
            documents=ids + d0 + doc_offset, tokens=sizes[d0:d1].astype(np.int64)[ids], min_exposure=mn[ids],
            max_exposure=mx[ids], token_exposures=tot[ids], first=first, last=last,
        )

    def _finalize_c(self, acc: np.ndarray, shift: int, sizes: np.ndarray, doc_offset: int, consumed: int,
                    manifest: Callable[[ManifestChunk], None] | None, max_copies: int | None) -> ExposureReport:
        ext = self.ext
        assert ext is not None
        n = acc.shape[0]
        mask = acc.dtype.type((1 << shift) - 1)
        if max_copies is None:
            max_copies = int(ext.doc_stats(acc, shift, sizes)[2])
        top = self.top
        ht = np.zeros(max(1, max_copies) * max(1, top) + 1, dtype=np.int64)
        hd = np.zeros_like(ht)
        unseen = partial = 0
        step = DOC_CHUNK if manifest is not None else max(n, 1)
        for d0 in range(0, n, step):
            d1 = min(n, d0 + step)
            if manifest is not None:
                mn, mx, tot = (np.empty(d1 - d0, dtype=np.int64) for _ in range(3))
                u, p = ext.finalize(sizes, acc, shift, self.head, self.log, d0, d1, ht, hd, mn, mx, tot,
                                    self.pack, self.bias, self.inl)
                manifest(self._manifest_chunk(acc, mask, sizes, d0, d1, doc_offset, mn, mx, tot))
            else:
                u, p = ext.finalize(sizes, acc, shift, self.head, self.log, d0, d1, ht, hd, None, None, None,
                                    self.pack, self.bias, self.inl)
            unseen += int(u)
            partial += int(p)
        return report_from_histograms(ht, hd, unseen, partial, consumed)

    def finalize(self, acc: np.ndarray, shift: int, sizes: np.ndarray, doc_offset: int,
                 consumed: int, manifest: Callable[[ManifestChunk], None] | None = None,
                 max_copies: int | None = None) -> ExposureReport:
        """Histograms from the per-document counts (``acc``: copies in the low ``shift`` bits, base count
        above) and the sorted events (or, with the C extension, the non-uniform copies), documents in
        chunks. ``max_copies``: the most copies of a document, when known."""
        if self.ext is not None:
            return self._finalize_c(acc, shift, sizes, doc_offset, consumed, manifest, max_copies)
        ev = self.events[: self.n_events]
        ev.sort()
        tokens: dict[int, int] = {}
        documents: dict[int, int] = {}
        unseen = partial = 0
        qmask = (1 << self.qbits) - 1
        n = acc.shape[0]
        mask = acc.dtype.type((1 << shift) - 1)
        for d0 in range(0, n, DOC_CHUNK):
            d1 = min(n, d0 + DOC_CHUNK)
            a = acc[d0:d1]
            present = (a & mask) > 0
            b = (a >> acc.dtype.type(shift)).astype(np.int64)
            sz = sizes[d0:d1].astype(np.int64)
            keep = present & (sz > 0)
            b[sz == 0] = 0  # an empty document has no token to see
            mn, mx, tot = b.copy(), b.copy(), b * sz
            e0, e1 = np.searchsorted(ev, [d0 << self.shift, d1 << self.shift])
            _hist_add(tokens, b[keep], sz[keep])
            if e1 > e0:
                k = ev[e0:e1]
                m = k.shape[0]
                d = (k >> self.shift) - d0
                q = (k >> 1) & qmask
                delta = (k & 1).astype(np.int32)
                delta *= 2
                delta -= 1
                brk = np.flatnonzero(d[1:] != d[:-1])
                starts = np.empty(brk.shape[0] + 1, dtype=np.int64)
                starts[0] = 0
                starts[1:] = brk + 1
                ends = np.empty_like(starts)
                ends[:-1] = brk
                ends[-1] = m - 1
                g = d[starts]
                bg = b[g]
                csum = np.cumsum(delta, dtype=np.int64)
                # value after each event: the document's base + the deltas of its events so far
                val = csum
                val += np.repeat(bg - (csum[starts] - delta[starts]), ends - starts + 1)
                if int(val.min()) < 0:
                    raise ValueError("negative exposure: inconsistent events")
                seg = np.empty(m, dtype=np.int64)  # tokens until the next event (or the document's end)
                seg[:-1] = q[1:]
                seg[ends] = sz[g]
                seg -= q
                qf = q[starts]
                # replace the docs' whole-length entry at their base by the first step and the events' steps
                sub: dict[int, int] = {}
                _hist_add(sub, bg, sz[g] - qf)
                for key, v in sub.items():
                    tokens[key] -= v
                _hist_add(tokens, val, seg)
                if bool((seg > 0).all()):
                    vmin = np.minimum.reduceat(val, starts)
                    vmax = np.maximum.reduceat(val, starts)
                else:
                    nz = seg > 0
                    vmin = np.minimum.reduceat(np.where(nz, val, _BIG), starts)
                    vmax = np.maximum.reduceat(np.where(nz, val, -1), starts)
                first_piece = qf > 0
                mn[g] = np.where(first_piece, np.minimum(vmin, bg), vmin)
                mx[g] = np.where(first_piece, np.maximum(vmax, bg), vmax)
                if manifest is not None:
                    val *= seg
                    tot[g] = bg * qf + np.add.reduceat(val, starts)
            _hist_add(documents, mn[keep])
            unseen += int(np.count_nonzero(mx[keep] == 0))
            partial += int(np.count_nonzero(mn[keep] != mx[keep]))
            if manifest is not None:
                ids = np.flatnonzero(present)
                first, last = self._first_last(d0, d1, ids)
                manifest(ManifestChunk(
                    documents=ids + d0 + doc_offset, tokens=sz[ids], min_exposure=mn[ids], max_exposure=mx[ids],
                    token_exposures=tot[ids], first=first, last=last,
                ))
        return report_from_counts(tokens, documents, unseen, partial, consumed)


def sparse_exposure(copies: np.ndarray, sizes: np.ndarray, minor_ids: np.ndarray, minor_counts: np.ndarray,
                    default: int, S: int, L: int, E: int, tokens: int, documents: int, empty: int,
                    consumed: int) -> ExposureReport:
    """Exposure when nearly every sample was drawn the same number of times (``default``).

    ``copies``: ``[n, 3]`` (local document, stream position, size) of every copy that overlaps one of the
    samples ``minor_ids`` (sorted, drawn ``minor_counts`` times) or the uncovered stream past ``S * L``;
    every other copy is seen ``default`` times over all its tokens. Each of the ``documents`` documents
    (``empty`` of them without tokens; ``tokens`` tokens in all) is in the document index exactly ``E``
    times (checked by the caller). Same definitions and results as :meth:`ExposureState.finalize`."""
    counts = dict(zip(minor_ids.tolist(), minor_counts.tolist()))
    ids = minor_ids.tolist()

    def c(k: int) -> int:
        return 0 if k >= S else counts.get(k, default)

    starts: dict[int, list[int]] = {}  # per document: the first value of each listed copy
    steps: dict[int, list[tuple[int, int]]] = {}  # per document: (offset, change) inside its listed copies
    for d, base, z in copies.tolist():
        if z <= 0:
            continue
        kb = max(base, 0) // L
        kl = (base + z - 1) // L
        prev = c(kb)
        starts.setdefault(d, []).append(prev)
        st = steps.setdefault(d, [])
        # the count can change only at a listed sample, right after one, and at S
        cand = set()
        for m in ids[bisect.bisect_left(ids, kb) : bisect.bisect_right(ids, kl)]:
            cand.update((m, m + 1))
        cand.add(S)
        for k in sorted(x for x in cand if kb < x <= kl):
            v = c(k)
            if v != prev:
                st.append((k * L - base, v - prev))
                prev = v
    v0 = E * default
    tok: dict[int, int] = {}
    docs: dict[int, int] = {}
    unseen = partial = aff_tokens = 0
    for d, first in starts.items():
        z = int(sizes[d])
        aff_tokens += z
        cur = sum(first) + (E - len(first)) * default
        lo_v = hi_v = cur
        at = 0
        for off, dv in sorted(steps[d]) + [(z, 0)]:
            if off > at:
                tok[cur] = tok.get(cur, 0) + off - at
                lo_v, hi_v = min(lo_v, cur), max(hi_v, cur)
                at = off
            cur += dv
        docs[lo_v] = docs.get(lo_v, 0) + 1
        unseen += hi_v == 0
        partial += lo_v != hi_v
    rest_docs = documents - empty - len(starts)
    if tokens > aff_tokens:
        tok[v0] = tok.get(v0, 0) + tokens - aff_tokens
    if rest_docs > 0:
        docs[v0] = docs.get(v0, 0) + rest_docs
        unseen += rest_docs if v0 == 0 else 0
    return report_from_counts(tok, docs, unseen, partial, consumed)
