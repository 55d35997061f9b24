"""The torch-free .idx reader: exact header fields, token sums, and one clear error per kind of damage."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from neox_epoch.errors import IndexFileError
from neox_epoch.formats import idx
from neox_epoch.formats.corpus import write_corpus


def test_header_fields_and_token_sums(fixed_corpus):
    """Sizes [5, 7, 9] in uint16: 3 sequences, 4 document indices, 21 tokens, .bin = 42 bytes."""
    p = fixed_corpus("c", [5, 7, 9])
    h = idx.read_header(p)
    assert (h.version, h.dtype_code, h.dtype, h.sequence_count, h.document_count) == (1, 8, "uint16", 3, 4)
    assert h.idx_bytes == 34 + 3 * 4 + 3 * 8 + 4 * 8
    assert h.bin_bytes == 42
    assert idx.range_token_sums(h, [(0, 3), (1, 3), (2, 2)]) == [21, 16, 0]
    assert list(idx.sizes_memmap(h)) == [5, 7, 9]
    assert list(idx.pointers_memmap(h)) == [0, 10, 24]
    idx.validate_arrays(h)


@pytest.mark.parametrize(
    "dtype,code",
    [
        ("uint8", 1),
        ("int8", 2),
        ("int16", 3),
        ("int32", 4),
        ("int64", 5),
        ("float64", 6),
        ("float32", 7),
        ("uint16", 8),
    ],
)
def test_every_dtype_code(tmp_path, dtype, code):
    """All eight dtype codes of megatron-core's table are read, and the .bin size check uses the item size."""
    p = str(tmp_path / "d")
    write_corpus(p, [np.arange(3), np.arange(4)], dtype=dtype)
    h = idx.read_header(p)
    assert h.dtype_code == code and h.bin_bytes == 7 * np.dtype(dtype).itemsize


def test_prefix_forms(fixed_corpus):
    """x, x.idx and x.bin name the same dataset."""
    p = fixed_corpus("c", [3])
    assert idx.read_header(p + ".idx").prefix == idx.read_header(p + ".bin").prefix == p


def _patch(path: str, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


@pytest.mark.parametrize(
    "damage,expected",
    [
        (lambda p: _patch(p + ".idx", 0, b"XXXXXXX"), r"magic is b'XXXXXXX\\x00\\x00', expected"),
        (lambda p: _patch(p + ".idx", 9, struct.pack("<Q", 2)), "version is 2, expected 1"),
        (lambda p: _patch(p + ".idx", 17, bytes([9])), r"dtype code is 9, expected one of \[1, 2, 3, 4, 5, 6, 7, 8\]"),
        (lambda p: open(p + ".idx", "r+b").truncate(40), "truncated: 40 bytes, expected at least 82"),
        (lambda p: open(p + ".idx", "r+b").truncate(20), "truncated header: 20 bytes, expected at least 34"),
        (lambda p: open(p + ".bin", "r+b").truncate(10), r"\.bin: 10 bytes, expected 24"),
        (lambda p: _patch(p + ".idx", 18, struct.pack("<Q", 99)), "expected at least 1246 for 99 sequences"),
    ],
)
def test_damaged_files_name_the_field(fixed_corpus, damage, expected):
    """Each kind of damage gives one IndexFileError naming the file, the value found and what was expected."""
    p = fixed_corpus("c", [5, 7])
    damage(p)
    with pytest.raises(IndexFileError, match=expected):
        idx.read_header(p)


def test_missing_files(fixed_corpus, tmp_path):
    with pytest.raises(IndexFileError, match="file not found"):
        idx.read_header(str(tmp_path / "nope"))
    p = fixed_corpus("c", [5])
    import os

    os.remove(p + ".bin")
    with pytest.raises(IndexFileError, match=r"c\.bin: file not found"):
        idx.read_header(p)


def test_validate_arrays_finds_bad_pointer(fixed_corpus):
    """A pointer that does not follow from the sizes is reported with its position and expected value."""
    p = fixed_corpus("c", [5, 7, 9])
    _patch(p + ".idx", 34 + 12 + 8, struct.pack("<q", 11))
    with pytest.raises(IndexFileError, match=r"pointers\[1\] = 11, expected 10"):
        idx.validate_arrays(idx.read_header(p, check_bin=False))


def test_token_sums_stream_in_chunks(fixed_corpus, monkeypatch):
    """Chunked reading gives the same sums as one pass (chunk forced to 2 entries)."""
    lengths = [3, 1, 4, 1, 5, 9, 2, 6]
    p = fixed_corpus("c", lengths)
    monkeypatch.setattr(idx, "SUM_CHUNK", 2)
    h = idx.read_header(p)
    assert idx.range_token_sums(h, [(0, 8), (1, 6), (3, 4)]) == [31, 20, 1]
    assert idx.range_token_sums(h, []) == []


def test_token_sums_name_a_negative_size_in_a_later_chunk(fixed_corpus, monkeypatch):
    """The reused buffer still names the damaged entry by its index in the whole array."""
    p = fixed_corpus("c", [3, 1, 4, 1, 5, 9, 2, 6])
    h = idx.read_header(p)
    _patch(p + ".idx", h.sizes_offset + 4 * 5, struct.pack("<i", -7))
    monkeypatch.setattr(idx, "SUM_CHUNK", 2)
    with pytest.raises(IndexFileError, match=r"sizes\[5\] = -7, expected >= 0"):
        idx.range_token_sums(h, [(0, 8)])
