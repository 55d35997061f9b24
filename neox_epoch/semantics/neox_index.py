"""Epoch-separated NeoX index files (``separate_epochs``): pass k ends at a known sample.

NeoX shuffles the documents of all E epochs together and then all samples together, so a run that
stops part-way through the index sees some tokens twice and others never. With ``separate_epochs``
the hooks build the three index files themselves, in numpy, before NeoX looks for them:

* ``doc_idx``: the split's documents, permuted once per epoch (epoch k occupies positions
  ``[k*D, (k+1)*D)``), int32 as NeoX's;
* ``sample_idx``: NeoX's own compiled ``helpers.build_sample_idx_int32/int64`` over that doc_idx (the
  same dtype rule as NeoX);
* ``shuffle_idx``: samples grouped by the epoch their first token falls in, each group permuted on its
  own, groups in epoch order (uint32, int64 when NeoX would use int64).

NeoX then loads them through its own ``_build_index_mappings`` (barrier, mmap, logging). The files use
NeoX's naming scheme with the dataset name suffixed by :data:`NAME_SUFFIX`, so a jointly shuffled index
of the same request is never reused for a separated one (NeoX's names carry no such distinction).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from neox_epoch.semantics.orders import sample_order, seeded_orders

#: appended to NeoX's dataset name in the cache file names of epoch-separated indices
NAME_SUFFIX = "-sepep"


def cache_prefix(
    data_prefix: str,
    name: str,
    num_samples: int | None,
    seq_length: int,
    seed: int,
    pack_impl: str,
    allow_chopped: bool,
) -> str:
    """NeoX's cache file stem ``{prefix}_{name}_indexmap_{ns}ns_{sl}sl_{seed}s_{pi}pi[_ac]``."""
    stem = f"{data_prefix}_{name}_indexmap_{num_samples}ns_{seq_length}sl_{seed}s_{pack_impl}pi"
    return stem + ("_ac" if allow_chopped else "")


def epoch_starts(tokens: int, seq_length: int, epochs: int) -> list[int]:
    """First sample of each epoch: sample j (input tokens from stream position j*seq) belongs to epoch
    ``floor(j*seq / T)``; epoch k starts at ``ceil(k*T / seq)``, capped at the samples built."""
    built = (epochs * tokens - 1) // seq_length
    return [min(-(-k * tokens // seq_length), built) for k in range(epochs)] + [built]


def pass_boundaries(tokens: int, seq_length: int, epochs: int, separate: bool, samples_per_epoch: int) -> list[int]:
    """Draw counts after which a source starts its next pass (pass 2, 3, ...).

    Epoch-separated: the exact group ends; jointly shuffled: nominal multiples of samples per epoch.
    """
    if separate and epochs > 1:
        return epoch_starts(tokens, seq_length, epochs)[1:-1]
    return [k * samples_per_epoch for k in range(1, max(epochs, 1))]


#: the shuffle of epoch-grouped samples (one shared definition with the audit)
separated_shuffle = sample_order


def build_separated(
    documents: np.ndarray,
    sizes: np.ndarray,
    epochs: int,
    seq_length: int,
    seed: int,
    build_sample_idx: Callable[..., Any],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The three arrays for ``epochs`` separated epochs. ``build_sample_idx(sizes, doc_idx, seq, E, T)``
    is NeoX's compiled helper (int32 or int64 variant, chosen by the caller with NeoX's rule)."""
    docs = np.asarray(documents, dtype=np.int32)
    tokens = int(np.sum(sizes[docs], dtype=np.int64))
    starts = epoch_starts(tokens, seq_length, epochs)
    doc_idx, shuffle_idx = seeded_orders(docs, [1] * epochs, starts, seed)
    sample_idx = build_sample_idx(sizes, doc_idx, seq_length, epochs, tokens)
    built = sample_idx.shape[0] - 1
    if starts[-1] != built:
        raise AssertionError(f"sample index has {built} samples, expected {starts[-1]}")
    return doc_idx, sample_idx, shuffle_idx


def sample_rows(sizes: np.ndarray, doc_idx: np.ndarray, seq_length: int, samples: int) -> np.ndarray:
    """NeoX's ``sample_idx`` in numpy: row ``i`` is the (doc_idx entry, offset) of stream position
    ``i * seq_length`` (its documents in ``doc_idx`` order concatenated), for ``i = 0 .. samples``; int32, or int64
    where NeoX's rule (``2 * (samples + 1)`` past int32) switches its compiled helper."""
    ends = np.cumsum(sizes[doc_idx], dtype=np.int64)
    positions = np.arange(samples + 1, dtype=np.int64) * seq_length
    entries = np.searchsorted(ends, positions, side="right")
    rows = np.stack([entries, positions - ends[entries] + sizes[doc_idx[entries]]], axis=1)
    return rows.astype(np.int32 if 2 * (samples + 1) < np.iinfo(np.int32).max else np.int64)


def build_joint(
    documents: np.ndarray, sizes: np.ndarray, epochs: int, seq_length: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The three arrays GPT-NeoX's ``_build_index_mappings`` builds for ``epochs`` epochs shuffled together (the
    documents of all epochs in one shuffle, then all samples): what a run will build before it has built it."""
    tokens = int(np.sum(sizes[documents], dtype=np.int64))
    built = (epochs * tokens - 1) // seq_length
    doc_idx, shuffle_idx = seeded_orders(np.asarray(documents, dtype=np.int32), [epochs], [0, built], seed)
    return doc_idx, sample_rows(sizes, doc_idx, seq_length, built), shuffle_idx


def save_atomic(path: str, array: np.ndarray) -> None:
    """``np.save`` to ``path`` through the output policy (atomic: readers never see half a file; never over a
    special file; the umask's mode)."""
    from neox_epoch.util.output import Output, write_output

    write_output(
        Output(path, "the index cache", example=os.path.basename(path), own=(".npy",)),
        lambda f: np.save(f, array, allow_pickle=True),
    )
