"""Write tokenized MMIDIDX corpora (.bin/.idx): the bundled demo corpus and test fixtures.

The files are byte-compatible with what NeoX's and megatron-core's ``preprocess_data.py`` write
(one sequence per document), so the real frameworks load them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import IO

import numpy as np

from neox_epoch.formats.idx import DTYPE_CODES, MAGIC
from neox_epoch.util.output import Output, write_output

_CODE_OF = {np.dtype(t).name: c for c, t in DTYPE_CODES.items()}


def _write_pair(
    prefix: str, write_bin: Callable[[IO[bytes]], None], write_idx: Callable[[IO[bytes]], None], option: str
) -> None:
    """``prefix.bin`` then ``prefix.idx`` through the output policy (their own kinds: .bin and .idx)."""
    for ext, write in ((".bin", write_bin), (".idx", write_idx)):
        write_output(Output(prefix + ext, option, example="corpus" + ext, own=(".bin", ".idx")), write)


def write_corpus(prefix: str, documents: Sequence[np.ndarray], dtype: str = "uint16", option: str = "corpus") -> None:
    """Write ``prefix.bin`` and ``prefix.idx`` holding ``documents`` (each a 1-D token array); ``option``: how
    messages name the output (the command's option)."""
    dt = np.dtype(dtype)
    sizes = np.array([len(d) for d in documents], dtype=np.int32)
    pointers = np.zeros(len(documents), dtype=np.int64)
    if len(documents) > 1:
        np.cumsum(sizes[:-1].astype(np.int64) * dt.itemsize, out=pointers[1:])
    doc_idx = np.arange(len(documents) + 1, dtype=np.int64)

    def write_bin(f: IO[bytes]) -> None:
        for d in documents:
            f.write(np.asarray(d, dtype=dt).tobytes())

    def write_idx(f: IO[bytes]) -> None:
        f.write(MAGIC)
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", _CODE_OF[dt.name]))
        f.write(struct.pack("<Q", len(sizes)))
        f.write(struct.pack("<Q", len(doc_idx)))
        f.write(sizes.tobytes())
        f.write(pointers.tobytes())
        f.write(doc_idx.tobytes())

    _write_pair(prefix, write_bin, write_idx, option)


def write_sized_corpus(prefix: str, sizes: Sequence[int], dtype: str = "uint16") -> None:
    """A corpus of documents of ``sizes`` tokens, all token 0: the .idx as written by preprocessing, the .bin a
    sparse file of the right size (for planning and config tests that read document sizes, never tokens)."""
    dt = np.dtype(dtype)
    lengths = np.asarray(sizes, dtype=np.int32)
    pointers = np.zeros(len(lengths), dtype=np.int64)
    if len(lengths) > 1:
        np.cumsum(lengths[:-1].astype(np.int64) * dt.itemsize, out=pointers[1:])
    doc_idx = np.arange(len(lengths) + 1, dtype=np.int64)
    total = int(lengths.astype(np.int64).sum()) * dt.itemsize

    def write_bin(f: IO[bytes]) -> None:
        f.truncate(total)

    def write_idx(f: IO[bytes]) -> None:
        f.write(MAGIC + struct.pack("<Q", 1) + struct.pack("<B", _CODE_OF[dt.name]))
        f.write(struct.pack("<Q", len(lengths)) + struct.pack("<Q", len(doc_idx)))
        f.write(lengths.tobytes() + pointers.tobytes() + doc_idx.tobytes())

    _write_pair(prefix, write_bin, write_idx, "corpus")


def random_documents(
    seed: int, num_documents: int, min_len: int = 1, max_len: int = 200, vocab: int = 50000
) -> list[np.ndarray]:
    """Deterministic random documents: lengths uniform in [min_len, max_len], tokens < vocab."""
    rng = np.random.RandomState(seed)
    lengths = rng.randint(min_len, max_len + 1, size=num_documents)
    return [rng.randint(0, vocab, size=int(n)).astype(np.int64) for n in lengths]


def write_random_corpus(
    prefix: str, seed: int, num_documents: int, min_len: int = 1, max_len: int = 200, option: str = "corpus"
) -> None:
    """Write a deterministic random corpus of ``num_documents`` documents (uint16 tokens)."""
    write_corpus(prefix, random_documents(seed, num_documents, min_len, max_len), dtype="uint16", option=option)
