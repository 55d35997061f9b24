"""Torch-free reader for Megatron/NeoX MMIDIDX ``.idx`` files (and the size check of their ``.bin``).

Layout (identical in GPT-NeoX and megatron-core)::

    offset  0  b"MMIDIDX\\x00\\x00"          magic, 9 bytes
    offset  9  <Q version                     must be 1
    offset 17  <B dtype code                  token dtype of the .bin (see DTYPE_CODES)
    offset 18  <Q sequence_count              S: entries of ``sizes`` and ``pointers``
    offset 26  <Q document_count              D: entries of ``document_indices`` (documents + 1)
    offset 34  int32 sizes[S], int64 pointers[S], int64 document_indices[D]
               (megatron-core may append int8 modes[S] for multimodal data)

Only numpy is used. Arrays are read through ``numpy.memmap`` or in bounded chunks, so an index of
100M+ sequences never becomes Python objects and the resident memory stays bounded.
"""

from __future__ import annotations

import io
import os
import struct
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from neox_epoch.errors import IndexFileError
from neox_epoch.util.inputs import check_input, open_input

MAGIC = b"MMIDIDX\x00\x00"
HEADER_BYTES = 34
#: dtype codes of megatron-core's ``DType`` enum. GPT-NeoX's table swaps 6 and 7 (float32/float64);
#: token data never uses them, but both readings are accepted when the .bin size decides.
DTYPE_CODES: dict[int, type] = {
    1: np.uint8,
    2: np.int8,
    3: np.int16,
    4: np.int32,
    5: np.int64,
    6: np.float64,
    7: np.float32,
    8: np.uint16,
}
NEOX_DTYPE_CODES: dict[int, type] = {**DTYPE_CODES, 6: np.float32, 7: np.float64}

#: entries per chunk when streaming the sizes array (64 MiB of int32)
CHUNK = 1 << 24
#: entries per chunk when summing ranges of the sizes array (4 MiB of int32): the plan's peak memory is this
#: buffer, not the index (and the 8-source / 100M-document plan takes half the CPU it took with 1 << 24)
SUM_CHUNK = 1 << 20
#: entries per chunk of validate_arrays (about 32 MiB of arrays at a time)
VALIDATE_CHUNK = 1 << 20


@dataclass(frozen=True)
class IdxHeader:
    """The validated header of one ``.idx`` file and the geometry of its arrays."""

    prefix: str
    """The path prefix: ``prefix + '.idx'`` and ``prefix + '.bin'``."""
    version: int
    """Format version (always 1)."""
    dtype_code: int
    """The raw dtype code from the header."""
    dtype: str
    """numpy name of the token dtype of the ``.bin`` (megatron-core's table)."""
    sequence_count: int
    """Number of sequences (the ``sizes`` entries); NeoX calls these documents."""
    document_count: int
    """Number of ``document_indices`` entries (documents + 1)."""
    idx_bytes: int
    """Size of the .idx file in bytes."""
    bin_bytes: int
    """Size of the .bin file in bytes."""

    @property
    def sizes_offset(self) -> int:
        return HEADER_BYTES

    @property
    def pointers_offset(self) -> int:
        return HEADER_BYTES + 4 * self.sequence_count

    @property
    def document_indices_offset(self) -> int:
        return self.pointers_offset + 8 * self.sequence_count

    @property
    def itemsize(self) -> int:
        return int(np.dtype(self.dtype).itemsize)


def normalize_prefix(path: str) -> str:
    """Accept ``x``, ``x.idx``, ``x.bin`` or ``x.`` and return the prefix ``x``."""
    for ext in (".idx", ".bin"):
        if path.endswith(ext):
            return path[: -len(ext)]
    return path


def read_header(prefix: str, check_bin: bool = True) -> IdxHeader:
    """Read and validate the header of ``prefix.idx`` field by field.

    Checks the magic, version, dtype code, that the file is long enough for the arrays the header
    announces, and (``check_bin``) that ``prefix.bin`` exists and its size equals the last pointer
    plus the last sequence's bytes. Raises :class:`IndexFileError` naming the file, the field, the
    value found and what was expected.
    """
    prefix = normalize_prefix(os.fspath(prefix))
    idx_path, bin_path = prefix + ".idx", prefix + ".bin"
    idx_bytes, head = _read_head(prefix, idx_path, bin_path)
    version, dtype_code, sequence_count, document_count = _parse_head(idx_path, head)
    _check_idx_size(idx_path, idx_bytes, sequence_count, document_count)
    header = IdxHeader(
        prefix=prefix,
        version=int(version),
        dtype_code=int(dtype_code),
        dtype=np.dtype(DTYPE_CODES[dtype_code]).name,
        sequence_count=int(sequence_count),
        document_count=int(document_count),
        idx_bytes=int(idx_bytes),
        bin_bytes=-1,
    )
    if check_bin:
        header = _check_bin(header, idx_path, bin_path)
    return header


def _missing(path: str) -> bool:
    """True when ``path`` does not exist (a directory we may not search is not "missing": open_input says so)."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return False


def _read_head(prefix: str, idx_path: str, bin_path: str) -> tuple[int, bytes]:
    """The size of ``idx_path`` and its first HEADER_BYTES bytes (the file must exist and hold a whole header)."""
    if _missing(idx_path):
        hint = " (a .bin is there; re-run the tokenizer to write the .idx)" if os.path.isfile(bin_path) else ""
        raise IndexFileError(
            f"{idx_path}: file not found{hint}; expected the .idx of a tokenized dataset "
            f"(prefix {prefix!r}): check the data path in your config"
        )
    with open_input(idx_path, f".idx of the tokenized dataset {prefix!r}", error=IndexFileError) as f:
        idx_bytes = os.fstat(f.fileno()).st_size
        head = f.read(HEADER_BYTES)
    if len(head) < HEADER_BYTES:
        raise IndexFileError(
            f"{idx_path}: truncated header: {len(head)} bytes, expected at least {HEADER_BYTES}; "
            "the file is damaged: re-run the tokenizer (preprocess_data.py)"
        )
    return idx_bytes, head


def _parse_head(idx_path: str, head: bytes) -> tuple[int, int, int, int]:
    """Version, dtype code, sequence count and document count of a header, its magic, version and dtype checked."""
    if head[:9] != MAGIC:
        raise IndexFileError(
            f"{idx_path}: magic is {head[:9]!r}, expected {MAGIC!r} (MMIDIDX); this is not a "
            "Megatron/NeoX mmap index: re-tokenize with dataset_impl/data_impl 'mmap'"
        )
    (version,) = struct.unpack("<Q", head[9:17])
    if version != 1:
        raise IndexFileError(
            f"{idx_path}: version is {version}, expected 1; the file is damaged or of an unknown format"
        )
    dtype_code = head[17]
    if dtype_code not in DTYPE_CODES:
        raise IndexFileError(
            f"{idx_path}: dtype code is {dtype_code}, expected one of {sorted(DTYPE_CODES)} "
            "(1 uint8 .. 8 uint16); the header is damaged: re-run the tokenizer"
        )
    sequence_count, document_count = struct.unpack("<QQ", head[18:34])
    return version, dtype_code, sequence_count, document_count


def _check_idx_size(idx_path: str, idx_bytes: int, sequence_count: int, document_count: int) -> None:
    """Raise unless the .idx holds exactly the arrays its header announces (plus optional multimodal modes)."""
    needed = HEADER_BYTES + 12 * sequence_count + 8 * document_count
    if idx_bytes < needed:
        raise IndexFileError(
            f"{idx_path}: truncated: {idx_bytes} bytes, expected at least {needed} for "
            f"{sequence_count} sequences and {document_count} document indices; re-run the tokenizer"
        )
    if idx_bytes not in (needed, needed + sequence_count):
        raise IndexFileError(
            f"{idx_path}: {idx_bytes} bytes, expected {needed} (or {needed + sequence_count} with "
            f"multimodal modes) for sequence_count={sequence_count}, document_count={document_count}; "
            "the header does not match the arrays: re-run the tokenizer"
        )


def _check_bin(header: IdxHeader, idx_path: str, bin_path: str) -> IdxHeader:
    if _missing(bin_path):
        raise IndexFileError(
            f"{bin_path}: file not found; expected the token file next to {idx_path}: "
            "copy the .bin beside the .idx or fix the data path"
        )
    bin_bytes = check_input(bin_path, f".bin (tokens) beside {idx_path}", error=IndexFileError).st_size
    expected = 0
    if header.sequence_count:
        with open(idx_path, "rb") as f:
            f.seek(header.pointers_offset - 4)
            (last_size,) = struct.unpack("<i", f.read(4))
            f.seek(header.document_indices_offset - 8)
            (last_pointer,) = struct.unpack("<q", f.read(8))
        itemsizes = {header.itemsize}
        if header.dtype_code in (6, 7):
            itemsizes.add(int(np.dtype(NEOX_DTYPE_CODES[header.dtype_code]).itemsize))
        candidates = sorted(last_pointer + last_size * s for s in itemsizes)
        if bin_bytes not in candidates:
            raise IndexFileError(
                f"{bin_path}: {bin_bytes} bytes, expected {candidates[0]} (last pointer {last_pointer} + "
                f"last size {last_size} x {header.itemsize} bytes of {header.dtype}) from {idx_path}; "
                ".bin and .idx come from different tokenizer runs or one is truncated: re-tokenize"
            )
        expected = candidates[0]
    elif bin_bytes != 0:
        raise IndexFileError(f"{bin_path}: {bin_bytes} bytes, expected 0 for an index with no sequences")
    del expected
    return IdxHeader(**{**header.__dict__, "bin_bytes": int(bin_bytes)})


def sizes_memmap(header: IdxHeader) -> np.ndarray:
    """The int32 ``sizes`` array (tokens per sequence) as a read-only memmap."""
    return np.memmap(
        header.prefix + ".idx", dtype=np.int32, mode="r", offset=header.sizes_offset, shape=(header.sequence_count,)
    )


def pointers_memmap(header: IdxHeader) -> np.ndarray:
    """The int64 ``pointers`` array (byte offsets into the .bin) as a read-only memmap."""
    return np.memmap(
        header.prefix + ".idx", dtype=np.int64, mode="r", offset=header.pointers_offset, shape=(header.sequence_count,)
    )


def document_indices_memmap(header: IdxHeader) -> np.ndarray:
    """The int64 ``document_indices`` array as a read-only memmap."""
    return np.memmap(
        header.prefix + ".idx",
        dtype=np.int64,
        mode="r",
        offset=header.document_indices_offset,
        shape=(header.document_count,),
    )


def tokens_memmap(header: IdxHeader) -> np.ndarray:
    """All tokens of the .bin, as a read-only memmap of the header's dtype."""
    n = header.bin_bytes // header.itemsize if header.bin_bytes >= 0 else None
    return np.memmap(header.prefix + ".bin", dtype=np.dtype(header.dtype), mode="r", shape=(n,) if n else None)


def range_token_sums(header: IdxHeader, bounds: list[tuple[int, int]]) -> list[int]:
    """Sum of ``sizes[lo:hi]`` for each ``(lo, hi)``, streaming the array in bounded chunks.

    Reads the .idx with ``readinto`` into one reused buffer of :data:`SUM_CHUNK` entries, so peak memory is
    that buffer (4 MiB) whatever the number of sequences, and no page of the file stays mapped.
    """
    for lo, hi in bounds:
        if not 0 <= lo <= hi <= header.sequence_count:
            raise IndexFileError(
                f"{header.prefix}.idx: sequence range [{lo}, {hi}) is outside [0, {header.sequence_count})"
            )
    sums = [0] * len(bounds)
    buf = np.empty(min(SUM_CHUNK, max((hi - lo for lo, hi in bounds), default=0)), dtype=np.int32)
    raw = buf.data.cast("B")
    with open(header.prefix + ".idx", "rb", buffering=0) as f:
        for k, (lo, hi) in enumerate(bounds):
            total = 0
            pos = lo
            while pos < hi:
                n = min(SUM_CHUNK, hi - pos)
                f.seek(header.sizes_offset + 4 * pos)
                chunk = buf[:n]
                if _read_full(f, raw[: 4 * n]) != 4 * n:
                    raise IndexFileError(f"{header.prefix}.idx: truncated while reading sizes at sequence {pos}")
                if int(chunk.min()) < 0:
                    bad = pos + int(np.argmax(chunk < 0))
                    raise IndexFileError(
                        f"{header.prefix}.idx: sizes[{bad}] = {int(chunk[bad - pos])}, expected >= 0; "
                        "the index is damaged"
                    )
                total += int(chunk.sum(dtype=np.int64))
                pos += n
            sums[k] = total
    return sums


def _read_full(f: io.RawIOBase, out: memoryview) -> int:
    """Fill ``out`` from ``f`` (an unbuffered file may return fewer bytes per call); the bytes read."""
    got = 0
    while got < len(out):
        k = f.readinto(out[got:])
        if not k:
            break
        got += k
    return got


def validate_arrays(header: IdxHeader) -> None:
    """Deep check: pointers consistent with sizes, document indices start at 0, end at S, non-decreasing; with the
    header's .bin size checked (:func:`read_header`), the sizes then add up to the tokens the .bin holds.

    Streams the arrays in chunks through one open file (a plan checks every source: no memmap per file). Raises
    :class:`IndexFileError` at the first inconsistency. Used by ``plan`` (plan.builds.read_sources).
    """
    item = header.itemsize
    prev_end = 0
    with open(header.prefix + ".idx", "rb") as f:
        for start in range(0, header.sequence_count, VALIDATE_CHUNK):
            n = min(VALIDATE_CHUNK, header.sequence_count - start)
            s = _read_array(f, header, header.sizes_offset + 4 * start, np.int32, n).astype(np.int64)
            p = _read_array(f, header, header.pointers_offset + 8 * start, np.int64, n)
            expect = np.empty_like(p)
            expect[0] = prev_end
            np.cumsum(s[:-1] * item, out=expect[1:])
            expect[1:] += prev_end
            bad = np.nonzero(expect != p)[0]
            if bad.size:
                i = start + int(bad[0])
                raise IndexFileError(
                    f"{header.prefix}.idx: pointers[{i}] = {int(p[bad[0]])}, expected {int(expect[bad[0]])} "
                    "(previous pointer + previous size x itemsize); the index is damaged: re-tokenize"
                )
            prev_end = int(p[-1] + s[-1] * item)
        _check_document_indices(f, header)


def _read_array(f: BinaryIO, header: IdxHeader, offset: int, dtype: type, count: int) -> np.ndarray:
    f.seek(offset)
    raw = f.read(count * np.dtype(dtype).itemsize)
    if len(raw) != count * np.dtype(dtype).itemsize:
        raise IndexFileError(
            f"{header.prefix}.idx: truncated at byte {offset + len(raw)} while checking its arrays; "
            "the file changed or is damaged: re-tokenize"
        )
    return np.frombuffer(raw, dtype=dtype)


def _check_document_indices(f: BinaryIO, header: IdxHeader) -> None:
    if not header.document_count:
        return
    first = int(_read_array(f, header, header.document_indices_offset, np.int64, 1)[0])
    last = int(_read_array(f, header, header.document_indices_offset + 8 * (header.document_count - 1), np.int64, 1)[0])
    if first != 0 or last != header.sequence_count:
        raise IndexFileError(
            f"{header.prefix}.idx: document_indices run from {first} to {last}, "
            f"expected 0 to {header.sequence_count}; the index is damaged: re-tokenize"
        )
    for start in range(0, header.document_count, VALIDATE_CHUNK):
        n = min(VALIDATE_CHUNK + 1, header.document_count - start)
        d = _read_array(f, header, header.document_indices_offset + 8 * start, np.int64, n)
        if d.size > 1 and bool(np.any(np.diff(d) < 0)):
            i = start + int(np.argmax(np.diff(d) < 0)) + 1
            raise IndexFileError(f"{header.prefix}.idx: document_indices decrease at entry {i}; the index is damaged")
