"""The deterministic random corpora of scripts/neox_golden.py and their records."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class CorpusSpec:
    """Parameters of one deterministic random corpus (``neox_epoch.formats.corpus.write_random_corpus``)."""

    label: str
    seed: int
    num_documents: int
    min_len: int
    max_len: int


@dataclass
class Corpus:
    """A written corpus: its spec, where it lives, and its tokens read back without NeoX."""

    spec: CorpusSpec
    prefix: str
    sizes: np.ndarray
    """int64 document lengths."""
    offsets: np.ndarray
    """int64 token offset of each document in ``tokens`` (len = documents + 1)."""
    tokens: np.ndarray
    """All tokens, concatenated in document order (int64)."""


def write_corpus(spec: CorpusSpec, directory: str) -> Corpus:
    """Write ``spec`` as ``directory/<label>.bin/.idx`` and read it back with the project's reader."""
    from neox_epoch.formats.corpus import write_random_corpus
    from neox_epoch.formats.idx import read_header, sizes_memmap, tokens_memmap

    prefix = os.path.join(directory, spec.label)
    write_random_corpus(prefix, spec.seed, spec.num_documents, spec.min_len, spec.max_len)
    header = read_header(prefix)
    sizes = np.array(sizes_memmap(header), dtype=np.int64)
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    tokens = np.array(tokens_memmap(header), dtype=np.int64)
    assert tokens.shape[0] == offsets[-1], "token count of .bin disagrees with the .idx sizes"
    return Corpus(spec=spec, prefix=prefix, sizes=sizes, offsets=offsets, tokens=tokens)


def file_sha1(path: str) -> str:
    """sha1 of a file's bytes."""
    with open(path, "rb") as f:
        return hashlib.sha1(f.read()).hexdigest()


def array_sha1(array: np.ndarray) -> str:
    """sha1 of an array's C-ordered bytes."""
    return hashlib.sha1(np.ascontiguousarray(array).tobytes()).hexdigest()


def corpus_record(corpus: Corpus) -> dict[str, Any]:
    """JSON record of a corpus: how to regenerate it and checksums to verify the regeneration."""
    s = corpus.spec
    return {
        "seed": s.seed,
        "num_documents": s.num_documents,
        "min_len": s.min_len,
        "max_len": s.max_len,
        "dtype": "uint16",
        "num_tokens": int(corpus.offsets[-1]),
        "sha1_bin": file_sha1(corpus.prefix + ".bin"),
        "sha1_idx": file_sha1(corpus.prefix + ".idx"),
    }
