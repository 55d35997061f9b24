"""The document and sample orders a seed builds: numpy ``RandomState`` shuffles, as GPT-NeoX and
megatron-core (and legacy Megatron-LM) do, and as neox-epoch's epoch-separated NeoX indexes do.

One place for both readers of these orders: the audit (:mod:`neox_epoch.audit.validate` checks that an
index is exactly what its seed builds) and the NeoX hooks (:mod:`neox_epoch.semantics.neox_index` builds
epoch-separated indexes).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def document_order(documents: np.ndarray, epoch_blocks: Sequence[int], rng: np.random.RandomState) -> np.ndarray:
    """For each block of ``k`` epochs, the documents tiled ``k`` times and shuffled; the blocks in order
    (int32). One block of ``E``: NeoX, and megatron when its 80% rule does not apply; ``E - 1`` then 1: the
    80% rule; ``E`` blocks of 1: neox-epoch's separated epochs."""
    parts = []
    for epochs in epoch_blocks:
        block = np.tile(np.asarray(documents, dtype=np.int32), epochs)
        rng.shuffle(block)
        parts.append(block)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)


def sample_order(starts: Sequence[int], rng: np.random.RandomState) -> np.ndarray:
    """The samples ``[starts[k], starts[k+1])`` of each block shuffled on their own, the blocks in order
    (uint32, int64 past its range, as the frameworks)."""
    total = int(starts[-1])
    dtype = np.uint32 if total < np.iinfo(np.uint32).max - 1 else np.int64
    parts = []
    for first, stop in zip(starts[:-1], starts[1:]):
        block = np.arange(first, stop, dtype=np.int64)
        rng.shuffle(block)
        parts.append(block.astype(dtype))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


def seeded_orders(
    documents: np.ndarray, epoch_blocks: Sequence[int], sample_starts: Sequence[int], seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """The document order then the sample order from one ``RandomState(seed)``, in the order both frameworks'
    builders draw them (building the sample index in between draws nothing)."""
    rng = np.random.RandomState(seed=seed)
    return document_order(documents, epoch_blocks, rng), sample_order(sample_starts, rng)
