"""``resume-check --exposure``: how often each token of each source is an input token in the run as resumed,
against the same draws continuing where the saved run stopped, from the audit's own exposure computation.

A source of a GPT-NeoX run draws the items of its train index in order: the saved run items
``0 .. drawn_before - 1``, the resumed run items ``first .. first + drawn - 1`` (a skip when ``first`` is past
``drawn_before``, a repeat when before it). The audit counts the input tokens of those items in the index
files the run builds (:func:`neox_epoch.audit.validate.audit_index`); continuing unchanged would draw items
``0 .. drawn_before + drawn - 1`` of the saved run's index.

When the resumed run builds another index for the source (other epochs, hence another order, or another
seq_length), the resumed items are those of the new index: the audit adds each token's exposure of both
passes, the saved run's index for its items and the new index for the resumed run's, token by token
(:func:`from_tokens`). A new index not yet on disk is built in memory as NeoX will
build it (:func:`neox_epoch.semantics.neox_index.build_joint`) and audited from a temporary directory.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from neox_epoch.audit.exposure import ExposureReport, StreamPass, from_histograms
from neox_epoch.audit.validate import audit_index
from neox_epoch.errors import AuditError, NeoxEpochError
from neox_epoch.formats import cache_names as names
from neox_epoch.formats import idx
from neox_epoch.resume.model import NewRun, SavedBuild, SourceDelta, SourceExposure
from neox_epoch.semantics.built import MCORE, index_numbers
from neox_epoch.semantics.consumption import Consumption
from neox_epoch.semantics.neox_index import build_joint, cache_prefix, save_atomic
from neox_epoch.semantics.orders import seeded_orders

if TYPE_CHECKING:
    from neox_epoch.plan.model import SourcePlan

#: tokens of the documents whose exposures are summed in memory at a time (4 bytes a token): a larger source is
#: summed window by window, each a pass over both indexes
WINDOW_TOKENS = 1 << 28


def windows(sizes: np.ndarray, limit: int | None = None) -> list[tuple[int, int]]:
    """Consecutive ranges ``[first, stop)`` of the documents of ``sizes``, each of at most ``limit`` tokens (default
    WINDOW_TOKENS; a longer document alone)."""
    ends, out, first, limit = np.cumsum(sizes, dtype=np.int64), [], 0, limit or WINDOW_TOKENS
    while first < sizes.shape[0]:
        stop = max(first + 1, int(np.searchsorted(ends, ends[first] - sizes[first] + limit, side="right")))
        out.append((first, stop))
        first = stop
    return out or [(0, 0)]


def _joined(parts: list[ExposureReport], consumed: int) -> ExposureReport:
    """The windows' reports of one source as one."""
    return replace(ExposureReport.combine(parts), consumed_samples=consumed)


def _window_note(count: int) -> str:
    return (
        f"summed in {count} windows of documents of at most {WINDOW_TOKENS} tokens (a pass each)" if count > 1 else ""
    )


def from_tokens(exposure: np.ndarray, sizes: np.ndarray, consumed: int) -> ExposureReport:
    """The report of per-token exposures (``exposure``: one per token of the documents of ``sizes``, in order), as
    the stream pass's ``tokens_out`` holds them after one or more passes."""
    documents = np.flatnonzero(sizes)
    starts = (np.cumsum(sizes, dtype=np.int64) - sizes)[documents]
    low = np.minimum.reduceat(exposure, starts) if starts.size else np.zeros(0, np.int32)
    high = np.maximum.reduceat(exposure, starts) if starts.size else np.zeros(0, np.int32)
    stats = np.array([np.count_nonzero(high == 0), np.count_nonzero(low != high)])
    return from_histograms(np.bincount(exposure), np.bincount(low), stats, consumed)


def _key(source: SourcePlan, name: str, num_samples: int | None, seq_length: int, seed: int) -> names.NeoxName:
    """What names the NeoX train index of ``source`` (its cache name; pack_impl packed, the only one planned and
    built here)."""
    return names.NeoxName(source.prefix, name, num_samples, seq_length, seed, "packed", True)


def _on_disk(key: names.NeoxName) -> names.CacheGroup | None:
    """The NeoX index ``key`` beside its data (NeoX names it by the samples asked, seq_length and seed)."""
    try:
        groups = names.discover([key.prefix])
    except AuditError:
        return None
    return next(
        (
            g
            for g in groups
            if g.kind == names.NEOX
            and g.neox is not None
            and g.split == key.name
            and (g.neox.num_samples, g.neox.seq_length, g.neox.seed) == (key.num_samples, key.seq_length, key.seed)
        ),
        None,
    )


def _audit(
    group: names.CacheGroup,
    prefix: str,
    prefixes: list[tuple[int, int]],
    tokens_out: np.ndarray | None = None,
    window: tuple[int, int] | None = None,
) -> tuple[ExposureReport | None, str]:
    """The audit's exposure of the items ``prefixes`` (signed prefixes) of one index, and what it said (with
    ``tokens_out``: each token's exposure added there, for the documents ``window``)."""

    def consumption(split: str, length: int) -> Consumption:
        return replace(Consumption.from_prefixes(length, prefixes), tokens_out=tokens_out, tokens_window=window)

    report = audit_index(group, resolve_prefix=lambda _: prefix, consumption_for=consumption)
    return report.exposure, "; ".join([str(f) for f in report.findings] + report.notes)


def _index(
    key: names.NeoxName, source: SourcePlan, sizes: np.ndarray, epochs: int, directory: str
) -> tuple[names.CacheGroup, str]:
    """The NeoX index ``key`` beside the data when it is there, else built as NeoX will build it (``epochs``
    shuffled together) into ``directory`` under NeoX's name; (the index, a note when built here). ``sizes``: the
    .idx sizes of all documents."""
    group = _on_disk(key)
    if group is not None:
        return group, ""
    arrays = build_joint(np.arange(*source.document_range), sizes, epochs, key.seq_length, key.seed)
    stem = cache_prefix(
        os.path.join(directory, os.path.basename(source.prefix)),
        key.name,
        key.num_samples,
        key.seq_length,
        key.seed,
        "packed",
        True,
    )
    for role, array in zip(("doc_idx", "sample_idx", "shuffle_idx"), arrays):
        save_atomic(f"{stem}_{role}.npy", array)
    (group,) = [g for g in names.discover([directory]) if g.stem == stem]
    return group, (
        f"{os.path.basename(stem)} is not beside {source.prefix} yet: built here as NeoX will build it "
        f"({epochs} epochs, seed {key.seed})"
    )


def _summed(
    old: names.CacheGroup,
    new: names.CacheGroup,
    source: SourcePlan,
    sizes: np.ndarray,
    delta: SourceDelta,
) -> tuple[ExposureReport | None, str]:
    """The saved run's items of its index and the resumed run's items of the new one, summed token by token
    (``sizes``: the split's documents), window by window."""
    parts, consumed, spans = [], delta.drawn_before + delta.drawn, windows(sizes)
    for first, stop in spans:
        out = np.zeros(int(np.sum(sizes[first:stop], dtype=np.int64)), np.int32)
        before, said_old = _audit(old, source.prefix, [(delta.drawn_before, 1)], out, (first, stop))
        after, said_new = _audit(
            new, source.prefix, [(delta.first + delta.drawn, 1), (delta.first, -1)], out, (first, stop)
        )
        said = "; ".join(s for s in (said_old, said_new, _window_note(len(spans))) if s)
        if before is None or after is None:
            return None, said or "the audit withheld the exposure of an index"
        parts.append(from_tokens(out, sizes[first:stop], consumed))
    return _joined(parts, consumed), said


def _exposure(
    new: NewRun, saved: SavedBuild | None, key: str, source: SourcePlan, delta: SourceDelta, directory: str
) -> SourceExposure:
    """One source: the resumed run's draws from its index (the saved run's, or a new one), and continuing."""
    sizes = np.asarray(idx.sizes_memmap(idx.read_header(source.prefix)))  # read once: both indexes share them
    new_key = _key(source, key, new.builds[key].num_samples, new.plan.seq_length, new.seed)
    group, built = _index(new_key, source, sizes, new.builds[key].epochs, directory)
    if delta.skipped is not None:  # the same index (same epochs and seq_length): its items before and after
        resumed, said = _audit(
            group, source.prefix, [(delta.drawn_before, 1), (delta.first + delta.drawn, 1), (delta.first, -1)]
        )
        continued, _ = _audit(group, source.prefix, [(delta.drawn_before + delta.drawn, 1)])
        return SourceExposure(
            delta.name, os.path.basename(group.stem), resumed, continued, "; ".join(s for s in (said, built) if s)
        )
    was = saved.builds.get(key) if saved is not None else None
    if saved is None or was is None or not saved.seq_length:
        return SourceExposure(
            delta.name,
            None,
            None,
            None,
            "its index is rebuilt in another order and the saved "
            "run's build is not known (no neox-epoch state or config files in the checkpoint)",
        )
    old_key = _key(source, key, was.num_samples, saved.seq_length, new.seed if saved.seed is None else saved.seed)
    old, built_old = _index(old_key, source, sizes, was.epochs, directory)
    resumed, said = _summed(old, group, source, sizes[slice(*source.document_range)], delta)
    more = delta.drawn * new_key.seq_length // old_key.seq_length  # as many input tokens, in whole samples
    continued, _ = _audit(old, source.prefix, [(delta.drawn_before + more, 1)])
    notes = [said, built_old, built]
    if new_key.seq_length != old_key.seq_length:
        notes.append(
            f"continued: {delta.drawn_before} + {delta.drawn} * {new_key.seq_length} // "
            f"{old_key.seq_length} = {delta.drawn_before + more} items of the saved run's index (about as "
            "many input tokens)"
        )
    return SourceExposure(
        delta.name, os.path.basename(group.stem), resumed, continued, "; ".join(s for s in notes if s)
    )


def source_exposures(
    new: NewRun,
    sources: tuple[SourceDelta, ...],
    saved: SavedBuild | None,
) -> tuple[SourceExposure, ...]:
    """Per source, the audit's exposure of its train indexes for the resumed and the continued draws."""
    train = [s for s in new.plan.sources if s.split == "train"]
    out = []
    with tempfile.TemporaryDirectory(prefix="neox-epoch-index-") as directory:
        for key, plan, delta in zip(new.builds, train, sources):
            try:
                out.append(_exposure(new, saved, key, plan, delta, directory))
            except (AuditError, NeoxEpochError, OSError, ValueError) as err:
                out.append(SourceExposure(delta.name, None, None, None, f"not computed: {err}"))
    return tuple(out)


def mcore_orders(
    document_range: tuple[int, int],
    tokens: int,
    epochs: int,
    separate: bool,
    seq_length: int,
    seed: int,
    add_extra_token: int,
) -> tuple[np.ndarray, np.ndarray]:
    """megatron-core's GPTDataset orders as its builder makes them (no file needed): the documents of ``epochs``
    epochs shuffled (the last on its own under the 80% rule, ``separate``), then the samples (the final epoch's
    again on their own); ``(document_index, shuffle_index)``."""
    separate = separate and epochs > 1
    numbers = index_numbers(MCORE, tokens, seq_length, epochs, None, add_extra_token)
    return seeded_orders(
        np.arange(*document_range, dtype=np.int32),
        [epochs - 1, 1] if separate else [epochs],
        [0, numbers.first_block, numbers.built] if separate else [0, numbers.built],
        seed,
    )


def predicted_orders(
    source: SourcePlan,
    seq_length: int,
    seed: int,
    add_extra_token: int,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`mcore_orders` of a planned source."""
    return mcore_orders(
        source.document_range,
        source.tokens,
        source.epochs_built,
        source.separate_final_epoch,
        seq_length,
        seed,
        add_extra_token,
    )


def item_draws(shuffle: np.ndarray, items: tuple[int, int]) -> np.ndarray:
    """Each sample's draws when the items ``items[0] .. items[1] - 1`` are drawn (item ``j`` is sample
    ``shuffle[j]``)."""
    return np.bincount(shuffle[items[0] : items[1]], minlength=shuffle.shape[0]).astype(np.uint32)


def stream_exposure(
    out: np.ndarray,
    source: SourcePlan,
    sizes: np.ndarray,
    doc_idx: np.ndarray,
    draws: np.ndarray,
    seq_length: int,
    window: tuple[int, int] | None = None,
) -> None:
    """Add into ``out`` (one per token of the split's documents ``window``, default all) each token's exposure as an
    input token of the samples drawn ``draws`` times (:func:`item_draws`): the audit's stream pass. ``sizes``: the
    .idx sizes of the split's documents."""
    walker = StreamPass(
        sizes, source.document_range[0], source.epochs_built, draws, seq_length, tokens_out=out, tokens_window=window
    )
    for at in range(0, doc_idx.shape[0], 1 << 22):
        walker.advance(doc_idx[at : at + (1 << 22)])


def megatron_exposures(
    new: NewRun,
    old_sources: list[SourcePlan],
    saved_seq: int,
    saved_seed: int,
    sources: tuple[SourceDelta, ...],
    add_extra_token: int,
) -> tuple[SourceExposure, ...]:
    """Megatron-LM: per source, its saved GPTDataset's items ``0 .. drawn_before - 1`` and the new one's
    ``first .. first + drawn - 1``, summed token by token, both orders as megatron-core's builder makes them; and
    the saved one continued for as many input tokens."""
    train = [s for s in new.plan.sources if s.split == "train"]
    out = []
    for now, was, delta in zip(train, old_sources, sources):
        if now.document_range != was.document_range:
            out.append(SourceExposure(delta.name, None, None, None, "not computed: other documents in the split"))
            continue
        sizes = np.asarray(idx.sizes_memmap(idx.read_header(now.prefix)))[slice(*now.document_range)]
        old_doc, old_shuffle = predicted_orders(was, saved_seq, saved_seed, add_extra_token)
        new_doc, new_shuffle = predicted_orders(now, new.plan.seq_length, new.seed, add_extra_token)
        more, resumed, continued = delta.drawn * new.plan.seq_length // saved_seq, [], []
        # each sample's draws once per source (the windows share them): before, after the resume, and continuing
        before = item_draws(old_shuffle, (0, delta.drawn_before))
        after = item_draws(new_shuffle, (delta.first, delta.first + delta.drawn))
        unchanged = item_draws(old_shuffle, (0, delta.drawn_before + more))
        spans = windows(sizes)
        for window in spans:
            tokens = np.zeros(int(np.sum(sizes[slice(*window)], dtype=np.int64)), np.int32)
            stream_exposure(tokens, was, sizes, old_doc, before, saved_seq, window)
            stream_exposure(tokens, now, sizes, new_doc, after, new.plan.seq_length, window)
            resumed.append(from_tokens(tokens, sizes[slice(*window)], delta.drawn_before + delta.drawn))
            tokens[...] = 0
            stream_exposure(tokens, was, sizes, old_doc, unchanged, saved_seq, window)
            continued.append(from_tokens(tokens, sizes[slice(*window)], delta.drawn_before + more))
        note = "; ".join(
            s
            for s in (
                "orders as megatron-core's builder makes them from the seed (no index file read)",
                _window_note(len(spans)),
            )
            if s
        )
        out.append(
            SourceExposure(
                delta.name,
                None,
                _joined(resumed, delta.drawn_before + delta.drawn),
                _joined(continued, delta.drawn_before + more),
                note,
            )
        )
    return tuple(out)
