"""The train data Megatron-LM built, checked against the plan before the first step.

Reads only attributes of megatron-core's built objects (``BlendedDataset.datasets``, ``dataset_index``,
``GPTDataset.dataset_path``, ``len()``); no torch import. Returns one line per difference.
"""

from __future__ import annotations

import os
from typing import Any

from neox_epoch.errors import NeoxEpochError
from neox_epoch.plan.model import Plan


class BuildMismatch(NeoxEpochError):
    """The train data Megatron-LM built differs from the plan (the run stops before its first step)."""


def built_sources(train_ds: Any) -> list[Any]:
    """The per-source datasets of a built train split (a blend's, or the one GPTDataset)."""
    if hasattr(train_ds, "dataset_index") and hasattr(train_ds, "datasets"):
        return list(train_ds.datasets)
    return [train_ds]


def differences(plan: Plan, train_ds: Any) -> list[str]:
    """What the built train split does differently from ``plan`` (sources, samples per source and per epoch,
    epochs built, the blend's size and draws per source); empty when it matches."""
    train = [s for s in plan.sources if s.split == "train"]
    datasets = built_sources(train_ds)
    if len(datasets) != len(train):
        return [f"train sources: built {len(datasets)}, planned {len(train)} ({', '.join(s.name for s in train)})"]
    out: list[str] = []
    for ds, sp in zip(datasets, train):
        path = getattr(ds, "dataset_path", None)
        if path is not None and os.path.realpath(str(path)) != os.path.realpath(sp.prefix):
            out.append(f"{sp.name}: built from {path}, planned {sp.prefix}")
            continue
        if len(ds) != sp.samples_built:
            out.append(
                f"{sp.name}: {len(ds)} samples built, planned {sp.samples_built} "
                f"({sp.epochs_built} epoch(s) of {sp.samples_per_epoch})"
            )
        per_epoch = _samples_per_epoch(ds)
        if per_epoch is not None and per_epoch != sp.samples_per_epoch:
            out.append(f"{sp.name}: {per_epoch} samples per epoch, planned {sp.samples_per_epoch}")
    blend = next((b for b in plan.blends if b.split == "train"), None)
    if blend is not None and blend.size is not None and hasattr(train_ds, "dataset_index"):
        if len(train_ds) != blend.size:
            out.append(f"train blend: {len(train_ds)} samples built, planned {blend.size}")
        else:
            import numpy as np

            drawn = np.bincount(
                np.asarray(train_ds.dataset_index[: blend.consumed], dtype=np.int64), minlength=len(train)
            )
            for sp, want, got in zip(train, blend.draws, drawn):
                if int(got) != int(want):
                    out.append(
                        f"train blend: {sp.name}: {int(got)} of the first {blend.consumed} positions, "
                        f"planned {int(want)}"
                    )
    return out


def _samples_per_epoch(ds: Any) -> int | None:
    """Samples one epoch of a GPTDataset gives (megatron-core's own count), None when it cannot be read."""
    fn = getattr(ds, "_get_num_tokens_per_epoch", None)
    if not callable(fn):
        return None
    try:
        tokens = int(fn())
        seq = int(ds.config.sequence_length)
        add = int(getattr(ds.config, "add_extra_token_to_sequence", True))
    except (AttributeError, TypeError, ValueError):
        return None
    return (tokens - add) // seq


def check(plan: Plan, train_ds: Any) -> None:
    """Raise :class:`BuildMismatch` listing the differences, one per line."""
    found = differences(plan, train_ds)
    if found:
        raise BuildMismatch(
            "the train data Megatron-LM built differs from the plan:\n  "
            + "\n  ".join(found)
            + "\n(the run stops before its first step; plan the line again with neox-epoch plan)"
        )
