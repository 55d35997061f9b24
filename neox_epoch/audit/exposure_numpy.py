"""The audit's stream pass in numpy: the compiled ``neox_epoch._exposure``'s five functions, same arguments, same
results, for an install without a C compiler (slower, not poorer: the audit's exposure JSON is the kernel's).

The kernel walks the document index copy by copy; here a chunk is handled at once: the copies' positions by a
cumulative sum, each copy's rank among its document's copies from the records and a stable sort, the earlier copies'
positions written into the records, and the documents whose last copy is in the chunk completed together from their
copies' pieces (a piece ends at every sample boundary inside a copy; a token's exposure is constant on a piece). The
kernel's two threads (``splits``) and its packed first-copy steps (``STEPS``) are speed only and not needed here: the
positions and the exposure are exact either way. See ``neox_epoch/_exposure.c`` for the contracts.
"""

from __future__ import annotations

import numpy as np

_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_CHUNK = 1 << 20
_LOW24 = np.int64(0xFFFFFF)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer of uint64 values (wrapping, as the kernel's)."""
    x = (x ^ (x >> _S30)) * _M1
    x = (x ^ (x >> _S27)) * _M2
    return x ^ (x >> _S31)


def _mix_sum(ids: np.ndarray) -> int:
    total = 0
    with np.errstate(over="ignore"):
        for start in range(0, ids.shape[0], _CHUNK):
            part = ids[start : start + _CHUNK].astype(np.int64).view(np.uint64)
            total += int(_mix(part).sum(dtype=np.uint64))
    return total % (1 << 64)


def _signed(value: int) -> int:
    value %= 1 << 64
    return value - (1 << 64) if value >= 1 << 63 else value


def mixed(first: int | np.ndarray, stop: int | None = None) -> int:
    """The sum mod 2^64 of mix over ``[first, stop)``, or over the ids of an array."""
    if stop is None:
        assert isinstance(first, np.ndarray)
        return _mix_sum(np.ascontiguousarray(first).reshape(-1))
    assert isinstance(first, int)
    total = 0
    for lo in range(first, stop, _CHUNK):
        total += _mix_sum(np.arange(lo, min(stop, lo + _CHUNK), dtype=np.int64))
    return total % (1 << 64)


def scan(ids: np.ndarray) -> tuple[int, int, int, int]:
    """(smallest, largest, mix sum as int64, sum mod 2^64 as int64) of int32/int64 ids."""
    flat = np.ascontiguousarray(ids).reshape(-1)
    if not flat.size:
        return (1 << 63) - 1, -(1 << 63), 0, 0
    with np.errstate(over="ignore"):
        plain = int(flat.astype(np.int64).view(np.uint64).sum(dtype=np.uint64))
    return int(flat.min()), int(flat.max()), _signed(_mix_sum(flat)), _signed(plain)


def scatter(ids: np.ndarray, store: np.ndarray, value: int, bound: int) -> tuple[int, int, int]:
    """``store[id] = value`` for the ids up to the first outside ``[0, bound)``: (its position or -1, the mix sum of
    the ids before it, the largest id as unsigned)."""
    flat = np.ascontiguousarray(ids).reshape(-1)
    if not flat.size:
        return -1, 0, 0
    bits = store.dtype.itemsize == 8
    if bound > (store.size * 64 if bits else store.size):
        bound = -1
    wide = flat.astype(np.int64)
    top = int(np.max(wide.view(np.uint64)))
    bad = -1
    if bound < 0 or top >= bound:
        outside = (wide < 0) | (wide >= bound)
        bad = int(np.argmax(outside))
        wide = wide[:bad]
    if value and wide.size:
        if bits:
            np.bitwise_or.at(store, wide >> 6, np.left_shift(np.uint64(1), (wide & 63).astype(np.uint64)))
        else:
            store[wide] = value
    return bad, _mix_sum(wide), top


def rows(
    positions: np.ndarray, sample_rows: np.ndarray, start: int, first_row: int, seq_length: int, samples: int
) -> int:
    """The first row of ``sample_rows`` off its copy or its boundary (see the kernel's ``rows``), or -1."""
    if not sample_rows.shape[0]:
        return -1
    entries, offsets = sample_rows[:, 0].astype(np.int64), sample_rows[:, 1].astype(np.int64)
    copies = positions.shape[0] - 1
    local = entries - start
    inside = (local >= 0) & (local < copies)
    safe = np.where(inside, local, 0)
    at = positions[safe] + offsets
    row = np.arange(first_row, first_row + entries.shape[0], dtype=np.int64)
    bad = ~inside | (offsets < 0) | (at > positions[safe + 1]) | ((row != samples) & (at != row * seq_length))
    return int(np.argmax(bad)) if bad.any() else -1


def stream(
    documents: np.ndarray,
    first_id: int,
    sizes: np.ndarray | None,
    records: np.ndarray | None,
    position: int,
    epochs: int,
    draws: np.ndarray | None,
    seq_length: int,
    samples: int,
    positions: np.ndarray,
    tokens_hist: np.ndarray,
    documents_hist: np.ndarray,
    stats: np.ndarray,
    sample_draws: np.ndarray | None,
    per_document: np.ndarray | None,
    tokens_out: np.ndarray | None,
    token_starts: np.ndarray | None,
    splits: np.ndarray | None = None,
) -> int:
    """The stream positions of a chunk's copies into ``positions`` (and, with ``draws``, the exposure of the documents
    whose last copy is in the chunk); returns the position after the chunk."""
    docs = documents.astype(np.int64) - first_id
    count = docs.shape[0]
    known = records.shape[0] if records is not None else sizes.shape[0] if sizes is not None else 0
    outside = (docs < 0) | (docs >= known)
    if outside.any():  # (the kernel's refusal: the index changed since its ids were scanned)
        bad = int(np.argmax(outside))
        raise IndexError(
            f"document id {int(documents[bad])} at entry {bad} of the chunk is outside [{first_id}, {first_id + known})"
        )
    packed = records is not None and records.ndim == 2 and records.shape[1] < epochs
    if records is None:
        assert sizes is not None
        size = sizes[docs].astype(np.int64)
    else:
        size = records[docs, 0] & _LOW24 if packed else records[docs, 0]
    np.cumsum(size, out=positions[1 : count + 1])
    positions[1 : count + 1] += position
    positions[0] = position
    end = int(positions[count]) if count else position
    if draws is not None and records is not None and count:
        pass_ = _Pass(records, packed, epochs, draws, seq_length, samples, tokens_hist, documents_hist, stats)
        pass_.extras(sample_draws, per_document, tokens_out, token_starts)
        pass_.chunk(docs, size, positions[:count].copy())
    return end


class _Pass:
    """One chunk's exposure: the records' earlier copies, then the documents completed (the kernel's ``complete``)."""

    def __init__(
        self,
        records: np.ndarray,
        packed: bool,
        epochs: int,
        draws: np.ndarray,
        seq_length: int,
        samples: int,
        tokens_hist: np.ndarray,
        documents_hist: np.ndarray,
        stats: np.ndarray,
    ) -> None:
        self.records, self.packed, self.epochs, self.draws = records, packed, epochs, draws
        self.seq_length, self.samples, self.bins = seq_length, samples, tokens_hist.shape[0]
        self.tokens_hist, self.documents_hist, self.stats = tokens_hist, documents_hist, stats
        self.sample_draws: np.ndarray | None = None
        self.per_document: np.ndarray | None = None
        self.tokens_out: np.ndarray | None = None
        self.token_starts: np.ndarray | None = None

    def extras(
        self,
        sample_draws: np.ndarray | None,
        per_document: np.ndarray | None,
        tokens_out: np.ndarray | None,
        token_starts: np.ndarray | None,
    ) -> None:
        self.sample_draws, self.per_document = sample_draws, per_document
        self.tokens_out, self.token_starts = tokens_out, token_starts

    def seen(self, docs: np.ndarray, copy: int) -> np.ndarray:
        """The earlier copy ``copy``'s position + 1 of each document (0: not seen yet)."""
        if self.packed:
            word = self.records[docs, copy] if copy else self.records[docs, 0].view(np.uint64) >> np.uint64(24)
            return word.astype(np.int64)
        return self.records[docs, copy + 1]

    def keep(self, docs: np.ndarray, copy: int, at: np.ndarray) -> None:
        if self.packed and not copy:
            self.records[docs, 0] = (self.records[docs, 0] & _LOW24) | ((at + 1) << 24)
        elif self.packed:
            self.records[docs, copy] = at + 1
        else:
            self.records[docs, copy + 1] = at + 1

    def chunk(self, docs: np.ndarray, size: np.ndarray, at: np.ndarray) -> None:
        """Each copy's rank among its document's copies: earlier copies kept, the last ones completed."""
        slots = self.epochs - 1
        order = np.argsort(docs, kind="stable")
        ordered = docs[order]
        group = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
        rank = np.empty(docs.shape[0], np.int64)
        rank[order] = np.arange(docs.shape[0]) - np.repeat(group, np.diff(np.r_[group, docs.shape[0]]))
        before = np.zeros(docs.shape[0], np.int64)
        for copy in range(slots):  # (slots fill in order: the seen ones are a prefix)
            before += self.seen(docs, copy) != 0
        rank += before
        for copy in range(slots):
            take = rank == copy
            self.keep(docs[take], copy, at[take])
        last = np.flatnonzero(rank >= slots)
        if last.size:
            self.complete(docs[last], size[last], at[last])

    def counts(self, sample: np.ndarray) -> np.ndarray:
        """The draw count of each sample (0 past ``samples``)."""
        inside = sample < self.samples
        safe = np.where(inside, sample, 0)
        if self.draws.dtype == np.uint64:
            got = (self.draws[safe >> 6] >> (safe & 63).astype(np.uint64)) & np.uint64(1)
        else:
            got = self.draws[safe]
        return np.where(inside, got.astype(np.int64), 0)

    def complete(self, docs: np.ndarray, size: np.ndarray, last: np.ndarray) -> None:
        """The exposure of documents ``docs`` (sizes ``size``) whose last copy is at ``last``: histograms, stats and,
        when asked, the manifest's rows and each token's exposure."""
        copies = np.stack([self.seen(docs, copy) - 1 for copy in range(self.epochs - 1)] + [last], axis=1)
        piece_doc, start = self.pieces(copies, size)
        value = np.zeros(start.shape[0], np.int64)
        for copy in range(copies.shape[1]):
            value += self.counts((copies[piece_doc, copy] + start) // self.seq_length)
        following = np.r_[start[1:], 0]
        ends = np.where(np.r_[piece_doc[1:] != piece_doc[:-1], True], size[piece_doc], following)
        length = ends - start
        real = length > 0
        bad = np.zeros(docs.shape[0], bool)
        bad[piece_doc[real & (value >= self.bins)]] = True
        self.stats[2] += int(bad.sum())
        good = real & ~bad[piece_doc]
        np.add.at(self.tokens_hist, value[good], length[good])
        heads = np.flatnonzero(np.r_[True, piece_doc[1:] != piece_doc[:-1]])
        big = np.iinfo(np.int64).max
        low = np.minimum.reduceat(np.where(good, value, big), heads)
        high = np.maximum.reduceat(np.where(good, value, -1), heads)
        total = np.add.reduceat(np.where(good, value * length, 0), heads)
        shown = (size > 0) & ~bad
        np.add.at(self.documents_hist, low[shown], 1)
        self.stats[0] += int((high[shown] == 0).sum())
        self.stats[1] += int((low[shown] != high[shown]).sum())
        if self.tokens_out is not None and self.token_starts is not None:
            self.add_tokens(docs[piece_doc[good]], start[good], length[good], value[good])
        if self.per_document is not None:
            self.manifest_rows(docs[~bad], size[~bad], copies[~bad], low[~bad], high[~bad], total[~bad])

    def pieces(self, copies: np.ndarray, size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each document's piece starts (0 and every copy's sample boundaries inside it), sorted by document then
        offset: (the document's row, the offset)."""
        seq = self.seq_length
        rows_, starts = [np.arange(size.shape[0])], [np.zeros(size.shape[0], np.int64)]
        for copy in range(copies.shape[1]):
            first = (copies[:, copy] // seq + 1) * seq - copies[:, copy]
            many = np.where(first < size, (size - first - 1) // seq + 1, 0)
            owner = np.repeat(np.arange(size.shape[0]), many)
            heads = np.cumsum(many) - many
            step = np.arange(owner.shape[0]) - np.repeat(heads, many)
            rows_.append(owner)
            starts.append(first[owner] + step * seq)
        row, start = np.concatenate(rows_), np.concatenate(starts)
        order = np.lexsort((start, row))
        return row[order], start[order]

    def add_tokens(self, docs: np.ndarray, start: np.ndarray, length: np.ndarray, value: np.ndarray) -> None:
        """Each token's exposure added into ``tokens_out`` (documents whose tokens it holds)."""
        assert self.tokens_out is not None and self.token_starts is not None
        base = self.token_starts[docs]
        held = base >= 0
        base, start, length, value = base[held], start[held], length[held], value[held]
        heads = np.cumsum(length) - length
        where = np.repeat(base + start - heads, length) + np.arange(int(length.sum()))
        np.add.at(self.tokens_out, where, np.repeat(value, length).astype(np.int32))

    def manifest_rows(
        self,
        docs: np.ndarray,
        size: np.ndarray,
        copies: np.ndarray,
        low: np.ndarray,
        high: np.ndarray,
        total: np.ndarray,
    ) -> None:
        """The manifest's row of each document: least and most exposure, token exposures, first and last draw."""
        assert self.per_document is not None and self.sample_draws is not None
        seq, first, last = self.seq_length, np.full(docs.shape[0], -1, np.int64), np.full(docs.shape[0], -1, np.int64)
        for copy in range(copies.shape[1]):
            k0 = copies[:, copy] // seq
            k1 = np.minimum(self.samples, -(-(copies[:, copy] + size) // seq))
            many = np.where(size > 0, np.maximum(k1 - k0, 0), 0)
            owner = np.repeat(np.arange(docs.shape[0]), many)
            sample = np.repeat(k0 - (np.cumsum(many) - many), many) + np.arange(owner.shape[0])
            f, lst = self.sample_draws[sample, 0], self.sample_draws[sample, 1]
            np.maximum.at(last, owner, lst)
            drawn = f >= 0
            least = np.full(docs.shape[0], np.iinfo(np.int64).max, np.int64)
            np.minimum.at(least, owner[drawn], f[drawn])
            first = np.where((least != np.iinfo(np.int64).max) & ((first < 0) | (least < first)), least, first)
        seen = size > 0
        self.per_document[docs] = np.stack(
            [np.where(seen, low, 0), np.where(seen, high, 0), total, first, last], axis=1
        )
