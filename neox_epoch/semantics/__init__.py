"""Framework semantics: pure functions that mirror, number for number, how each framework turns
(documents, split, seq_length, requested samples, weights) into the index it builds.

One module per framework; each function names the framework function it mirrors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DatasetBuild:
    """What one framework builds for one source and split (one GPT2Dataset / GPTDataset)."""

    tokens: int
    """T: tokens of the split's documents (one epoch)."""
    samples_per_epoch: int
    """Samples one pass over the split gives on its own."""
    samples_requested: int | None
    """num_samples the framework asks this dataset for (None: one epoch)."""
    epochs: int
    """E: epochs of documents in the document index."""
    samples_built: int
    """Entries of the sample index minus one."""
    length: int
    """len(dataset) as the framework reports it (NeoX: samples_built - 1)."""
    separate_final_epoch: bool
    """The last epoch is shuffled on its own (megatron 80% rule); else all epochs jointly."""
    formula: str
    """The arithmetic, written out, for traceable output."""


@dataclass(frozen=True)
class TrainBuild:
    """How one train dataset was built, as a checkpoint records it: the part of a :class:`DatasetBuild` that decides
    which sample a position names (NeoX's ``_build_index_mappings`` arguments and result)."""

    num_samples: int | None
    epochs: int
    samples_built: int
    separate_final_epoch: bool = False  # megatron-core's 80% rule (NeoX shuffles its epochs together).


class Semantics:
    """Common interface of the framework semantics modules (duck-typed; see neox.py, mcore.py, legacy.py)."""


def normalize(weights: Sequence[float]) -> list[float]:
    """float64 ``w / sum(w)`` with numpy, as megatron-core's ``utils.normalize`` and NeoX's blend do."""
    w = np.asarray(weights, dtype=np.float64)
    return (w / np.sum(w)).tolist()
