"""The warnings of a plan: a split consumed past its end, a source's draws, the run's schedule checks, a prefix
listed twice, NeoX's index caches. Pure functions over the planned sources; no I/O."""

from __future__ import annotations

import os

from neox_epoch.plan.builds import Dataset, framework_of
from neox_epoch.plan.inputs import PlanInput, PlanWarning
from neox_epoch.plan.model import SourcePlan
from neox_epoch.plan.unseen import spillover


def past_end_warning(inp: PlanInput, split: str, consumed: int, size: int, full: str) -> PlanWarning:
    """More samples consumed than the split's dataset offers: NeoX's loader starts over; Megatron-LM's sampler
    ends, and the run stops with an error in that iteration (or evaluation)."""
    if framework_of(inp).sampler_ends(inp):
        return PlanWarning(
            "runs-out",
            f"{split}: {consumed} samples consumed but the {split} dataset offers {size}: "
            "Megatron-LM's sampler has no batch left and its data iterator stops the run "
            "with StopIteration",
            split,
        )
    return PlanWarning(
        "loader-restart",
        f"{split}: {consumed} samples consumed but the {split} dataset offers "
        f"{size}{full}; NeoX's loader starts over from its first sample (the same "
        "order again)",
        split,
    )


def source_warnings(inp: PlanInput, past_end: str, d: Dataset, drawn: int) -> list[PlanWarning]:
    b, split, label = d.build, d.split, d.source.spec.label
    out = []
    if b.samples_per_epoch <= 0:
        out.append(
            PlanWarning(
                "zero-samples-per-epoch",
                f"{split}: {label}: 0 samples per epoch: its {d.tokens:,d} tokens are fewer than one sample needs "
                f"(seq_length {inp.seq_length} + 1); the framework repeats the split {b.epochs} times to build "
                f"{b.samples_built} samples that each span the whole split; lower seq_length or add data",
                split,
                label,
            )
        )
    if drawn > b.samples_built:
        out.append(
            PlanWarning(
                "oversampled",
                f"{split}: {label} is drawn {drawn} times but has {b.samples_built} samples: {past_end}",
                split,
                label,
            )
        )
    if inp.neox.separate_epochs:
        return out
    sp = spillover(b, drawn)
    if sp is not None and drawn + inp.global_batch_size <= b.samples_built:
        unseen, more = sp
        passes = drawn / max(1, b.samples_per_epoch)
        out.append(
            PlanWarning(
                "spillover",
                f"{split}: {label}: index built for {b.epochs} epochs ({b.samples_built} samples) shuffled jointly, "
                f"{drawn} drawn ({passes:.3f} passes): expected {unseen:.1%} of its tokens never seen and {more:.1%} "
                "seen more often than the passes suggest (cross-epoch spillover)",
                split,
                label,
            )
        )
    return out


def run_warnings(inp: PlanInput, train_iters: int, sources: list[SourcePlan]) -> list[PlanWarning]:
    out = []
    for s in sources:
        if s.split == "valid" and s.passes > 1.0:
            out.append(
                PlanWarning(
                    "valid-passes",
                    f"valid: {s.name}: evaluation consumes {s.samples_drawn} samples = {s.passes:.2f} passes over the "
                    "validation split (the same samples are evaluated again and again); lower eval_iters or raise "
                    "eval_interval",
                    "valid",
                    s.name,
                )
            )
    if inp.warmup_iters is not None and train_iters > 0 and inp.warmup_iters > inp.warmup_share_limit * train_iters:
        out.append(
            PlanWarning(
                "warmup",
                f"warmup: {inp.warmup_iters} warmup iterations are {inp.warmup_iters / train_iters:.0%} of the "
                f"{train_iters} training iterations (more than {inp.warmup_share_limit:.0%})",
            )
        )
    fw = framework_of(inp)
    if fw.neox_cache_names:
        out.extend(_neox_cache_warnings(inp, sources))
    who = "NeoX" if fw.name == "neox" else fw.name
    return out + _repeated_prefix_warnings(sources, fw.copies_share_order, who)


#: why the plan gives no distinct count for copies of a prefix built for different epochs
DISTINCT_UNKNOWABLE = (
    "the distinct count is not given: each copy's samples are token spans of its own document "
    "order (its document index over all its epochs), so which of them coincide is known "
    "only from both built indices"
)


def _repeated_prefix_warnings(sources: list[SourcePlan], shared: bool, who: str = "NeoX") -> list[PlanWarning]:
    """A prefix listed more than once in one split's blend: NeoX and megatron-core (``who``) build one dataset per
    listing (same seed, same documents), so copies built for the same epochs share one shuffle and the later draws
    repeat the earlier's."""
    from neox_epoch.plan.repeated import group_repeats, merged_distinct

    out = []
    for prefix, same in group_repeats(sources):
        drawn = sum(s.samples_drawn for s in same)
        distinct = merged_distinct(same)
        if not shared:
            what = f"built as {len(same)} datasets, {drawn} samples drawn in all"
        elif distinct is not None:
            what = (
                f"{who} builds {len(same)} datasets with the same shuffle, so the later copies re-train the first "
                f"samples: {distinct} distinct of {drawn} drawn ({distinct / max(1, same[0].samples_per_epoch):.4f}"
                f" of {drawn / max(1, same[0].samples_per_epoch):.4f} passes)"
            )
        else:
            epochs = ", ".join(str(s.epochs_built) for s in same)
            what = (
                f"{who} builds {len(same)} datasets for {epochs} epochs, each its own shuffle: {drawn} samples "
                f"drawn ({drawn / max(1, same[0].samples_per_epoch):.4f} passes), overlapping by chance; "
                f"{DISTINCT_UNKNOWABLE}"
            )
        out.append(
            PlanWarning(
                "repeated-prefix",
                f"{same[0].split}: {prefix} is listed {len(same)} times in the blend: {what}; list it once "
                "with the weights added",
                same[0].split,
                same[0].name,
            )
        )
    return out


def _neox_cache_warnings(inp: PlanInput, sources: list[SourcePlan]) -> list[PlanWarning]:
    """NeoX cache names carry no epochs, split or content hash: flag existing files that do not match."""
    import numpy as np

    out = []
    seen: dict[str, int] = {}  # sources of each split so far: NeoX's {split}_{i} names (linear in the sources)
    for s in sources:
        idx_in_split = seen.get(s.split, 0)
        seen[s.split] = idx_in_split + 1
        if s.samples_requested is None:
            continue
        name = f"{s.split}_{idx_in_split}" if inp.per_split_paths else s.split
        base = f"{s.prefix}_{name}_indexmap_{s.samples_requested}ns_{inp.seq_length}sl_{inp.seed}s"
        base += f"_{inp.neox.pack_impl}pi" + ("_ac" if inp.neox.allow_chopped else "")
        doc = base + "_doc_idx.npy"
        if not os.path.isfile(doc):
            continue
        try:
            arr = np.load(doc, mmap_mode="r")
            n = int(arr.shape[0])
        except (OSError, ValueError) as err:
            out.append(
                PlanWarning(
                    "cache-unreadable",
                    f"cache: {doc} exists but cannot be read ({err}); NeoX would fail or rebuild",
                    s.split,
                    s.name,
                )
            )
            continue
        expect = s.documents * s.epochs_built
        if n != expect:
            out.append(
                PlanWarning(
                    "cache-stale",
                    f"cache: {doc} exists with {n} document entries, expected {s.documents} documents x "
                    f"{s.epochs_built} epochs = {expect}: NeoX will silently reuse this stale index (its cache names "
                    "carry no split, epochs or content hash); delete it or change the seed",
                    s.split,
                    s.name,
                )
            )
    return out
