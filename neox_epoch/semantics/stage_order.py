"""The sample order of a staged run: each source's own order, pass by pass, and the interleave of a stage.

**A source's own order** (what the hooks build for a train source of a staged run, as NeoX index files):
pass ``k`` (0-based) shuffles the source's documents with ``RandomState([seed, k])``, cuts that
document stream into ``N = (T - 1) // seq_length`` samples of ``seq_length + 1`` tokens (NeoX's sample
shape; the stream's last ``T - N * seq_length`` tokens are not drawn in that pass) and shuffles those
``N`` samples with the same generator. Position ``p`` of the order is sample ``p % N`` of pass
``p // N``. A pass depends only on the seed and its number, never on how many passes are built, so a
run whose later stages change keeps every sample it already drew at the same position; and a pass
holds only its own epoch's tokens, so no sample repeats before every sample of the pass was drawn.

**A stage's interleave**: the stage's per-source draw counts ``c_s`` (summing to the stage's length
``L``) are spread evenly: the ``t``-th draw of source ``s`` sits at key ``(2t + 1) * L / (2 c_s)``,
ties to the earlier source. Every source gets exactly ``c_s`` positions; stages follow each other.

Pure numpy (NeoX's compiled helpers are not needed).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from neox_epoch.semantics.neox_index import sample_rows

#: appended to NeoX's dataset name in the cache file names of a staged run's train indices
STAGES_SUFFIX = "-stages"


def samples_per_pass(tokens: int, seq_length: int) -> int:
    """Samples one pass gives: ``(T - 1) // seq_length`` (each sample reads ``seq_length + 1`` tokens)."""
    return max(0, (int(tokens) - 1) // int(seq_length))


def pass_rng(seed: int, k: int) -> np.random.RandomState:
    """The generator of pass ``k``: its document shuffle, then its sample shuffle."""
    return np.random.RandomState([int(seed) & 0xFFFFFFFF, int(k)])


def build_passes(
    documents: np.ndarray, sizes: np.ndarray, passes: int, seq_length: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """NeoX's three index arrays for ``passes`` passes of a source's own order.

    ``doc_idx``: pass k's documents at ``[k*D, (k+1)*D)``; ``sample_idx``: ``N + 1`` rows per pass (row
    ``k*(N+1) + i`` starts sample i of pass k, row ``k*(N+1) + N`` ends its last sample); ``shuffle_idx``:
    position ``k*N + j`` -> a row of pass k, plus one trailing entry (NeoX's ``len`` is
    ``shuffle_idx.shape[0] - 1``), so the dataset has exactly ``passes * N`` items.
    """
    docs = np.asarray(documents, dtype=np.int32)
    n_docs = int(docs.shape[0])
    tokens = int(np.sum(sizes[docs], dtype=np.int64))
    n = samples_per_pass(tokens, seq_length)
    doc_parts, row_parts, shuffle_parts = [], [], []
    for k in range(passes):
        rng = pass_rng(seed, k)
        order = docs.copy()
        rng.shuffle(order)
        rows = sample_rows(sizes, order, seq_length, n).astype(np.int64)
        rows[:, 0] += k * n_docs
        perm = np.arange(n, dtype=np.int64)
        rng.shuffle(perm)
        doc_parts.append(order)
        row_parts.append(rows)
        shuffle_parts.append(perm + k * (n + 1))
    doc_idx = np.concatenate(doc_parts) if doc_parts else np.zeros(0, np.int32)
    rows_all = np.concatenate(row_parts) if row_parts else np.zeros((0, 2), np.int64)
    big = rows_all.size and int(rows_all.max()) >= np.iinfo(np.int32).max
    sample_idx = rows_all.astype(np.int64 if big else np.int32)
    shuffle = np.concatenate([*shuffle_parts, [shuffle_parts[-1][-1] if shuffle_parts and n else 0]])
    return doc_idx, sample_idx, shuffle.astype(np.int64)


def interleave(counts: Sequence[int]) -> np.ndarray:
    """Source index of each of a stage's ``sum(counts)`` positions, ``counts[s]`` of source ``s``, spread evenly."""
    total = int(sum(counts))
    if total == 0:
        return np.zeros(0, dtype=np.uint8)
    keys, who = [], []
    for s, c in enumerate(counts):
        if c:
            t = np.arange(int(c), dtype=np.float64)
            keys.append((2 * t + 1) * total / (2 * int(c)))
            who.append(np.full(int(c), s, dtype=np.int64))
    key, src = np.concatenate(keys), np.concatenate(who)
    order = np.lexsort((src, key))
    return src[order].astype(np.uint8)


def draw_order(stage_counts: Sequence[Sequence[int]], starts: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """``(dataset_index, dataset_sample_index)`` of a staged run, as NeoX's BlendableDataset holds them: per stage
    (``stage_counts[k][s]`` draws of source s starting at its own position ``starts[k][s]``), its interleave."""
    idx_parts, pos_parts = [], []
    for counts, first in zip(stage_counts, starts):
        which = interleave(counts)
        pos = np.zeros(which.shape[0], dtype=np.int64)
        for s, c in enumerate(counts):
            mask = which == s
            pos[mask] = int(first[s]) + np.arange(int(c), dtype=np.int64)
        idx_parts.append(which)
        pos_parts.append(pos)
    if not idx_parts:
        return np.zeros(0, np.uint8), np.zeros(0, np.int64)
    return np.concatenate(idx_parts), np.concatenate(pos_parts)
