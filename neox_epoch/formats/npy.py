"""Read .npy files in bounded pieces: the header, and rows ``[start, stop)`` read on demand.

Index arrays reach gigabytes, and a memory map of a whole file keeps every page it touched resident, so each
read maps just the pages of its rows (read-only; ``np.fromfile`` where a file cannot be mapped). A truncated
file or a pickled object array becomes a :class:`~neox_epoch.errors.FileProblem`, never a traceback.
"""

from __future__ import annotations

import ast
import math
import mmap
import os
import stat
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

import numpy as np
from numpy.lib import format as npformat

from neox_epoch.errors import FileProblem
from neox_epoch.util import mapguard
from neox_epoch.util.inputs import kind_of

#: rows per chunk when streaming: 4M rows of an int64 [N, 2] array is 64 MiB
CHUNK_ROWS = 1 << 22
#: .npy format version -> (struct format of the header length, encoding of the header text), as numpy writes them
HEADER_FORMATS = {(1, 0): ("<H", "latin1"), (2, 0): ("<I", "latin1"), (3, 0): ("<I", "utf8")}
#: the longest header text parsed: numpy's own bound for a safe ``ast.literal_eval`` of a header
MAX_HEADER_CHARS = 10_000
#: the keys of a .npy header dictionary
HEADER_KEYS = {"descr", "fortran_order", "shape"}


class Progress:
    """Progress sink (see :class:`neox_epoch.audit.report.TtyProgress`); this one ignores everything."""

    def describe(self, what: str) -> None:
        """The index or blend the next passes are about."""

    def start(self, label: str, total: int) -> None:
        """Begin a pass of ``total`` units."""

    def advance(self, units: int) -> None:
        """``units`` more done."""

    def done(self) -> None:
        """The pass ended."""


@dataclass(frozen=True)
class NpyInfo:
    """The header of one .npy file and where its data starts."""

    path: str  # The file.
    shape: tuple[int, ...]  # Array shape from the header.
    dtype: np.dtype  # Array dtype from the header.
    fortran_order: bool  # Column-major data (np.save of a Fortran-ordered array).
    data_offset: int  # Byte offset of the first element.

    @property
    def rows(self) -> int:
        return int(self.shape[0]) if self.shape else 1


def _read_exactly(f: IO[bytes], size: int, what: str) -> bytes:
    """``size`` bytes of ``f``; ValueError (numpy's wording) when the file ends first."""
    data = f.read(size)
    if len(data) != size:
        raise ValueError(f"EOF: reading {what}, expected {size} bytes got {len(data)}")
    return data


def _header_dict(text: str) -> dict[str, object]:
    """The header text as the literal dictionary it must be (``ast.literal_eval``: no code runs)."""
    try:
        header = ast.literal_eval(text)
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        raise ValueError(f"Cannot parse header: {text!r}") from None
    if not isinstance(header, dict):
        raise ValueError(f"Header is not a dictionary: {header!r}")
    if header.keys() != HEADER_KEYS:
        raise ValueError(f"Header does not contain the correct keys: {sorted(map(str, header.keys()))!r}")
    return header


def parse_header(f: IO[bytes], version: tuple[int, int]) -> tuple[tuple[int, ...], bool, np.dtype]:
    """Shape, Fortran order and dtype of the .npy header (format 1.0, 2.0 or 3.0) that follows the magic in ``f``.

    Parsed here with the public ``numpy.lib.format.descr_to_dtype`` (numpy has no public reader of 3.0 headers),
    with numpy's checks and messages; ValueError says what is wrong. ``f`` is left at the first data byte.
    """
    if version not in HEADER_FORMATS:
        raise ValueError(f"Invalid version {version!r}")
    length_format, encoding = HEADER_FORMATS[version]
    (length,) = struct.unpack(length_format, _read_exactly(f, struct.calcsize(length_format), "array header length"))
    if length > MAX_HEADER_CHARS * 4:  # why: a damaged length field must not make the read allocate gigabytes
        raise ValueError(f"Header length ({length}) is larger than the {MAX_HEADER_CHARS} characters of a .npy header")
    text = _read_exactly(f, length, "array header").decode(encoding)
    if len(text) > MAX_HEADER_CHARS:
        raise ValueError(f"Header info length ({len(text)}) is large and may not be safe to load securely")
    header = _header_dict(text)
    shape, fortran = header["shape"], header["fortran_order"]
    if not isinstance(shape, tuple) or not all(isinstance(x, int) and x >= 0 for x in shape):
        raise ValueError(f"shape is not valid: {shape!r}")
    if not isinstance(fortran, bool):
        raise ValueError(f"fortran_order is not a valid bool: {fortran!r}")
    try:
        # numpy 2's stub takes only the list form; the function also takes a dtype string such as "<i8"
        dtype = npformat.descr_to_dtype(header["descr"])  # type: ignore[arg-type]
    except (TypeError, ValueError, KeyError, IndexError):
        raise ValueError(f"descr is not a valid dtype descriptor: {header['descr']!r}") from None
    return shape, fortran, dtype


def read_header(path: str) -> NpyInfo:
    """Read and check the header of ``path``; raise :class:`FileProblem` if it is not a complete .npy."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise FileProblem(
                path,
                "file type",
                "a .npy index file",
                f"is {kind_of(st.st_mode)}",
                "give the cache's own files (a named pipe or device is never read)",
            )
        size = st.st_size
        with open(path, "rb") as f:
            try:
                version = npformat.read_magic(f)
            except ValueError as err:
                raise FileProblem(
                    path,
                    "format",
                    "a .npy file (magic \\x93NUMPY)",
                    f"not a .npy file ({err})",
                    "the file is damaged or not an index file",
                ) from None
            try:
                shape, fortran, dtype = parse_header(f, version)
            except (ValueError, OSError) as err:
                raise FileProblem(
                    path,
                    "header",
                    "a readable .npy header",
                    f"a damaged header ({err})",
                    "the file is truncated or damaged: delete it so the framework rebuilds it",
                ) from None
            offset = f.tell()
    except OSError as err:
        raise FileProblem(path, "read", "a readable file", f"{type(err).__name__}: {err.strerror or err}") from None
    dtype = np.dtype(dtype)
    if dtype.hasobject:
        raise FileProblem(
            path,
            "dtype",
            "an integer array",
            f"a pickled object array ({dtype})",
            "index files hold integers; this file was written by something else",
        )
    info = NpyInfo(
        path=path, shape=tuple(int(x) for x in shape), dtype=dtype, fortran_order=bool(fortran), data_offset=int(offset)
    )
    end = offset + math.prod(info.shape) * dtype.itemsize  # why Python ints: a damaged shape may pass 2^63
    if size < end:
        raise FileProblem(
            path,
            "size",
            f"{end} bytes for shape {info.shape} of {dtype}",
            f"{size} bytes",
            "the file is truncated (an interrupted build or copy): delete it so the framework rebuilds it",
        )
    return info


class NpyReader:
    """Row reads from one .npy file without mapping or loading it whole."""

    def __init__(self, info: NpyInfo) -> None:
        self.info = info
        self.file: IO[bytes] | None = None

    def __enter__(self) -> NpyReader:
        return self

    def __exit__(self, *exception: object) -> None:
        self.close()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None

    def _file(self) -> IO[bytes]:
        self.file = self.file or open(self.info.path, "rb")
        return self.file

    def _read(self, offset: int, count: int) -> np.ndarray:
        """``count`` elements from element ``offset``: a read-only view of a mapped window (or a copy)."""
        start = self.info.data_offset + offset * self.info.dtype.itemsize
        nbytes, f = count * self.info.dtype.itemsize, self._file()
        if nbytes > 0:
            # a mapped page past the end of a file that shrank since its header was checked would stop the
            # process (SIGBUS) instead of giving a finding: the size is checked again for every window
            size = os.fstat(f.fileno()).st_size
            if size < start + nbytes:
                raise FileProblem(
                    self.info.path,
                    "size",
                    f"at least {start + nbytes} bytes",
                    f"{size} bytes (the file shrank during the audit)",
                    "the file is being rewritten or truncated: audit it once it is complete",
                )
            lo, mm = start - start % mmap.ALLOCATIONGRANULARITY, None
            try:  # (mapped only where a page gone under it reads zeros: util/mapguard; else copied)
                if mapguard.AVAILABLE:
                    mm = mmap.mmap(
                        f.fileno(), start - lo + nbytes, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ, offset=lo
                    )
            except (OSError, ValueError):  # not mappable (a pipe, some network file systems): copy it
                mm = None
            if mm is not None:
                return np.frombuffer(mm, dtype=self.info.dtype, count=count, offset=start - lo)
        f.seek(start)
        out = np.fromfile(f, dtype=self.info.dtype, count=count)
        if out.shape[0] != count:
            raise FileProblem(
                self.info.path,
                "size",
                f"{count} more elements at element {offset}",
                f"{out.shape[0]}",
                "the file is truncated",
            )
        return out

    def read(self, start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)`` as a C-ordered, read-only array (1-D, or 2-D ``[rows, cols]``)."""
        info = self.info
        start, stop = max(0, start), min(stop, info.rows)
        if stop <= start:
            return np.zeros((0, *info.shape[1:]), dtype=info.dtype)
        if len(info.shape) <= 1:
            return self._read(start, stop - start)
        cols = math.prod(info.shape[1:])
        if not info.fortran_order:
            return self._read(start * cols, (stop - start) * cols).reshape((stop - start, *info.shape[1:]))
        out = np.empty((stop - start, cols), dtype=info.dtype)
        for j in range(cols):
            out[:, j] = self._read(j * info.rows + start, stop - start)
        return out.reshape((stop - start, *info.shape[1:]))

    def chunks(
        self, stop: int | None = None, rows: int = CHUNK_ROWS, progress: Progress | None = None, label: str = ""
    ) -> Iterator[tuple[int, np.ndarray]]:
        """Yield ``(first_row, array)`` for consecutive chunks of ``rows`` rows, a pass ``label`` of ``progress``."""
        stop = self.info.rows if stop is None else min(stop, self.info.rows)
        progress = progress or Progress()
        progress.start(label, stop)
        for first in range(0, stop, rows):
            chunk = self.read(first, min(first + rows, stop))
            yield first, chunk
            progress.advance(chunk.shape[0])
        progress.done()
