"""What an index's files say against what the framework builds (:mod:`neox_epoch.semantics.built`): the documents
and their copies, the epochs and samples, the orders the seed builds."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from neox_epoch.audit.findings import Finding, finding
from neox_epoch.audit.index_report import STALE_HINT
from neox_epoch.formats import cache_names as names
from neox_epoch.formats.npy import NpyReader
from neox_epoch.semantics.built import IndexNumbers
from neox_epoch.semantics.orders import seeded_orders

# ---- stage 4: what the files say against what the framework builds ---------------------------------------


@dataclass(frozen=True)
class Copies:
    """Documents of the split in the document index and their copies."""

    documents: int
    tokens: int
    epochs: int
    findings: tuple[Finding, ...]


def count_copies(
    path: str, copies: np.ndarray | None, tokens: int, sizes: np.ndarray, first_id: int, epochs: int
) -> Copies:
    """Every document of ``[first_id, first_id + D)`` present the same number of times (the epochs);
    ``tokens``: the sum of ``sizes``; ``copies`` None: the stream pass found them all ``epochs`` times."""
    if copies is None:
        return Copies(sizes.shape[0], tokens, epochs, ())
    low, epochs = (int(copies.min()), int(copies.max())) if copies.size else (0, 0)
    if low == epochs > 0:
        return Copies(copies.shape[0], tokens, epochs, ())
    present = copies > 0
    documents, found = int(np.count_nonzero(present)), []
    if documents != copies.shape[0]:
        found.append(
            finding(
                path,
                "documents of the split",
                f"every id in [{first_id}, {first_id + copies.shape[0]})",
                f"document {first_id + int(np.argmin(present))} absent ({copies.shape[0] - documents} absent)",
                "the index is damaged or mixed: " + STALE_HINT,
            )
        )
    other = np.flatnonzero(present & (copies != epochs))
    if other.size:
        found.append(
            finding(
                path,
                "epochs",
                f"every document {epochs} times",
                f"document {first_id + int(other[0])} {int(copies[other[0]])} times",
                "the document index is damaged or mixed: " + STALE_HINT,
            )
        )
    return Copies(documents, int(sizes[present].sum(dtype=np.int64)), epochs, tuple(found))


@dataclass(frozen=True)
class Built:
    """What one index's files hold, as its name or description and its sample index say."""

    doc_path: str
    sample_path: str
    kind: str  # names.NEOX, names.MCORE or names.LEGACY
    samples: int  # The sample index's rows - 1.
    requested: int | None  # num_samples (None: not recorded, or null).
    seq_length: int


def number_findings(built: Built, numbers: IndexNumbers, copies: Copies, trusted: bool) -> list[Finding]:
    """The files' epochs and samples against the framework's (``trusted``: the copies and boundaries are)."""
    doc_path, sample_path, kind = built.doc_path, built.sample_path, built.kind
    samples, requested, seq_length = built.samples, built.requested, built.seq_length
    epochs, tokens, found = copies.epochs, copies.tokens, []
    if numbers.epochs_for_request is not None and numbers.epochs_for_request != epochs:
        expected = (
            f"{numbers.epochs_for_request} (smallest E with (E*{tokens} - 1) // {seq_length} >= {requested})"
            if kind == names.NEOX
            else f"{numbers.epochs_for_request} (for num_samples {requested}, seq_length {seq_length}, {tokens} tokens)"
        )
        found.append(finding(doc_path, "epochs for the request", expected, epochs, STALE_HINT))
    if kind != names.NEOX and requested is not None and tokens > 0 and samples < requested:
        found.append(finding(sample_path, "samples built", f">= num_samples {requested}", samples, STALE_HINT))
    if kind == names.MCORE and requested is None and epochs != 1:
        found.append(finding(doc_path, "epochs", "1 (num_samples null: one epoch)", epochs, STALE_HINT))
    if trusted and samples not in (numbers.built, numbers.built + 1):
        found.append(
            finding(
                sample_path,
                "samples built",
                f"{numbers.built} from {epochs} epochs of {tokens} tokens",
                samples,
                STALE_HINT,
            )
        )
    return found


@dataclass(frozen=True)
class SeedOrder:
    """What the orders of one index are built from: the seed, the split's documents and their epochs."""

    seed: int
    first_id: int
    stop_id: int
    epochs: int
    first_block: int | None  # Samples in the shuffle's first block (None: the last epoch not shuffled on its own).


def seed_findings(doc_r: NpyReader, shuffle_r: NpyReader, order: SeedOrder) -> list[Finding]:
    """doc_idx and shuffle_idx exactly what the seed builds (:mod:`neox_epoch.semantics.orders`)."""
    seed, first_id, stop_id, epochs = order.seed, order.first_id, order.stop_id, order.epochs
    first_block = order.first_block
    blocks = [epochs - 1, 1] if first_block is not None and epochs > 1 else [epochs]
    samples = shuffle_r.info.rows
    cut = first_block if first_block is not None and 0 < first_block < samples else samples
    expected, expected_shuffle = seeded_orders(
        np.arange(first_id, stop_id, dtype=np.int32), blocks, [0, cut, samples] if cut < samples else [0, samples], seed
    )
    got = doc_r.read(0, doc_r.info.rows)
    if got.shape != expected.shape or not np.array_equal(got, expected):
        where = int(np.argmax(got != expected)) if got.shape == expected.shape else min(got.shape[0], expected.shape[0])
        return [
            finding(
                doc_r.info.path,
                "document index vs seed",
                f"the order random_seed {seed} builds for documents [{first_id}, {stop_id}) x {epochs} epochs",
                f"a different order from entry {where}",
                "the index was built with other parameters or data: " + STALE_HINT,
            )
        ]
    got = shuffle_r.read(0, samples)
    if not np.array_equal(got.astype(np.int64), expected_shuffle.astype(np.int64)):
        return [
            finding(
                shuffle_r.info.path,
                "shuffle index vs seed",
                f"the permutation random_seed {seed} builds",
                f"a different permutation from entry {int(np.argmax(got != expected_shuffle))}",
                STALE_HINT,
            )
        ]
    return []
