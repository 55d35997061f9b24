"""The per-source table the hooks log at build time: names in full (columns as wide as their widest cell), and a
prefix listed more than once in the train blend as one row, merged as the plan's table merges it
(:mod:`neox_epoch.plan.repeated`: requested, built and drawn added; the distinct samples when the copies share
one index)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from neox_epoch.util.text import table as text_table

if TYPE_CHECKING:
    from neox_epoch.neox.planning import RunPlan

COLUMNS = ("source", "tokens", "samples/epoch", "requested", "epochs built", "drawn", "passes", "target")


def merged_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per train prefix, in the order first listed; copies of one prefix merged (``copies``, and
    ``samples_distinct``: the largest copy's draws when NeoX gives the copies one index, else None)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(os.path.normpath(str(r["prefix"])), []).append(r)
    out = []
    for same in groups.values():
        first = dict(same[0])
        if len(same) > 1:
            one_index = len({(r["epochs_built"], r["samples_built"], r["separate_epochs"]) for r in same}) == 1
            drawn = sum(r["samples_drawn"] for r in same)
            first.update(
                copies=len(same),
                samples_drawn=drawn,
                epochs_built=max(r["epochs_built"] for r in same),
                samples_requested=sum(r["samples_requested"] for r in same),
                passes=drawn / first["samples_per_epoch"] if first["samples_per_epoch"] else 0.0,
                samples_distinct=min(max(r["samples_drawn"] for r in same), first["length"]) if one_index else None,
            )
        out.append(first)
    return out


def _cells(r: dict[str, Any]) -> list[str]:
    """A row's cells, formatted."""
    name, drawn = str(r["name"]), str(r["samples_drawn"])
    if r.get("copies", 1) > 1:
        name += f" (listed {r['copies']}x)"
        distinct = r.get("samples_distinct")
        drawn += f" ({distinct} distinct)" if distinct is not None else " (own shuffles)"
    target = "-" if r["target_passes"] is None else str(r["target_passes"])
    return [
        name,
        str(r["tokens"]),
        str(r["samples_per_epoch"]),
        str(r["samples_requested"]),
        str(r["epochs_built"]),
        drawn,
        f"{r['passes']:.6f}",
        target,
    ]


def render_table(rp: RunPlan, rows: list[dict[str, Any]], eval_note: str) -> str:
    """The per-source table logged at build time."""
    head = (
        f"neox_epoch: {'exact' if rp.targets is not None else 'observed'} plan: train_iters={rp.train_iters} "
        f"train_batch_size={rp.train_batch_size} seq_length={rp.plan.seq_length}"
        f"{' separate_epochs' if rp.separate_epochs else ''}"
    )
    lines = [head, *text_table(COLUMNS, [_cells(r) for r in merged_rows(rows)], left=1, indent="  ")]
    lines.append(
        f"  remainder: {rp.plan.remainder_samples} samples ({rp.plan.remainder_tokens} tokens) under one "
        "global batch are not drawn"
    )
    lines.append(f"  valid/test: {eval_note}")
    return "\n".join(lines)
