"""A prefix listed more than once in one split's blend, as NeoX builds and draws it.

NeoX's ``build_weighted_datasets`` builds one GPT2Dataset per listed path, each with the run's seed and the
same documents. Checked with NeoX's own data code (scripts/neox_repeated_prefix.py): copies built for the same
number of epochs get the same ``doc_idx``/``sample_idx``/``shuffle_idx``, and the blend draws each copy's
samples from its first on, so together they cover only the largest copy's draws; copies built for different
epochs are shuffled differently. The plan's table and JSON show such a prefix as one row.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from neox_epoch.plan.model import Plan, SourcePlan


def group_repeats(sources: Sequence[SourcePlan]) -> Iterator[tuple[str, list[SourcePlan]]]:
    """(prefix, its rows) for each prefix listed more than once in one split, in the order first listed."""
    groups: dict[tuple[str, str], list[SourcePlan]] = {}
    for s in sources:
        groups.setdefault((s.split, os.path.normpath(s.prefix)), []).append(s)
    for (_, prefix), same in groups.items():
        if len(same) > 1:
            yield prefix, same


def _same_index(same: Sequence[SourcePlan]) -> bool:
    """NeoX gives the copies one index: same documents, epochs and final-epoch handling (the seed is the run's)."""
    keys = {(s.document_range, s.epochs_built, s.separate_final_epoch, s.samples_built) for s in same}
    return len(keys) == 1


def merged_distinct(same: Sequence[SourcePlan]) -> int | None:
    """Distinct samples the copies draw together: the largest copy's draws when they share one index, else None."""
    if not _same_index(same):
        return None
    return min(max(s.samples_drawn for s in same), same[0].length)


def merge_rows(same: Sequence[SourcePlan]) -> SourcePlan:
    """One row for a repeated prefix: what the copies request, build and draw together."""
    first = same[0]
    drawn = sum(s.samples_drawn for s in same)
    distinct = merged_distinct(same)
    covering = min(same, key=lambda s: s.tokens_unseen)  # the copy whose draws cover the most
    requested = [s.samples_requested for s in same]
    return replace(
        first,
        samples_requested=None if None in requested else sum(r for r in requested if r is not None),
        epochs_built=max(s.epochs_built for s in same),
        samples_built=sum(s.samples_built for s in same),
        length=sum(s.length for s in same),
        separate_final_epoch=any(s.separate_final_epoch for s in same),
        samples_drawn=drawn,
        passes=round(drawn / first.samples_per_epoch, 6) if first.samples_per_epoch else 0.0,
        tokens_unseen=covering.tokens_unseen,
        tokens_unseen_exact=covering.tokens_unseen_exact and distinct is not None,
        target_samples=None,
        formula=" + ".join(s.formula for s in same if s.formula),
        copies=len(same),
        samples_distinct=distinct,
    )


def merge_repeated(plan: Plan) -> Plan:
    """``plan`` with each repeated prefix of a split shown as one row (the copies' rows merged)."""
    merged = {id(same[0]): merge_rows(same) for _, same in group_repeats(plan.sources)}
    if not merged:
        return plan
    dropped = {id(s) for _, same in group_repeats(plan.sources) for s in same[1:]}
    rows = tuple(merged.get(id(s), s) for s in plan.sources if id(s) not in dropped)
    return replace(plan, sources=rows)
