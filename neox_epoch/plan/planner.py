"""The epoch plan: from .idx files and batch settings to what the framework builds and draws.

Pure functions over numpy and the semantics modules; no torch. ``make_plan`` answers "what will this
config do", ``exact_plan`` answers "which settings give exactly these passes" and returns the plan
under those settings, checked by replaying the framework's own arithmetic. The inputs are in
:mod:`neox_epoch.plan.inputs`, the per-framework builds in :mod:`neox_epoch.plan.builds`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import cast

from neox_epoch.errors import PlanError
from neox_epoch.plan.builds import FRAMEWORKS as _FRAMEWORK_RECORDS
from neox_epoch.plan.builds import SPLITS, Dataset, SplitBuild, TokenCache, framework_of
from neox_epoch.plan.inputs import McoreOptions, NeoxOptions, PlanInput, PlanWarning, SourceSpec
from neox_epoch.plan.model import Plan, SourcePlan, SplitBlend
from neox_epoch.plan.unseen import expected_unseen, spillover
from neox_epoch.semantics import blend, mcore
from neox_epoch.semantics.passes import passes as source_passes
from neox_epoch.util.values import is_whole

FRAMEWORKS = tuple(_FRAMEWORK_RECORDS)
__all__ = [
    "FRAMEWORKS",
    "McoreOptions",
    "NeoxOptions",
    "Plan",
    "PlanInput",
    "PlanWarning",
    "SourcePlan",
    "SourceSpec",
    "SplitBlend",
    "TokenCache",
    "exact_plan",
    "make_plan",
    "passes_per_source",
]


# ----------------------------------------------------------------------------------------------------------
# the plan


def _positive_int(value: object, key: str, allow_zero: bool = False) -> None:
    ok = is_whole(value, 0 if allow_zero else 1)
    if not ok:
        want = "an integer >= 0" if allow_zero else "a positive integer"
        raise PlanError(f"{key}: {value!r}; expected {want}")


def _check_input(inp: PlanInput) -> None:
    fw = framework_of(inp)
    for key in ("seq_length", "global_batch_size", "eval_interval"):
        _positive_int(getattr(inp, key), key)
    _positive_int(inp.eval_iters, "eval_iters", allow_zero=True)
    if inp.train_iters is not None:
        _positive_int(inp.train_iters, "train_iters")
    if inp.train_samples is not None:
        _positive_int(inp.train_samples, "train_samples")
    if not inp.train_sources:
        raise PlanError("no train data: set data_path (or train_data_paths / --data-path)")
    for s in (*inp.train_sources, *inp.valid_sources, *inp.test_sources):
        # NeoX runs a weight of 0 (that source is never drawn); megatron-core is not verified with one
        zero_ok = fw.zero_weight_ok and s.weight == 0
        if s.weight is not None and not (math.isfinite(s.weight) and (s.weight > 0 or zero_ok)):
            raise PlanError(f"weight {s.weight} of {s.prefix}: expected a finite number > 0")
    surplus = inp.mcore.mid_level_dataset_surplus
    if not (math.isfinite(surplus) and surplus >= 0):
        raise PlanError(f"mid_level_dataset_surplus: {surplus}; expected a finite number >= 0")
    bb = inp.neox.blend_buffer
    if bb is not None and not (math.isfinite(bb) and bb >= 1.0):
        raise PlanError(f"blend_buffer: {bb}; expected a finite number >= 1.0")


#: blends larger than this are refused: the framework's blending index takes 9 bytes a sample (90 GB here)
MAX_BLEND_SAMPLES = blend.MAX_DRAWS


#: greedy blend counts by (weights, draws), kept between the plans of one exact-mode search
DrawsMemo = dict[tuple[tuple[float, ...], int], list[int]]


def _draws(sb: SplitBuild, consumed: int, memo: DrawsMemo | None = None) -> tuple[list[int], int]:
    """Per dataset draws among the first ``consumed`` samples of the split (and how many were consumed)."""
    n = min(consumed, sb.size)
    if not sb.blended:
        return [n], n
    if sb.greedy_weights is None:  # exhaustive megatron-core blend
        return [d.build.length for d in sb.datasets], n
    if n > MAX_BLEND_SAMPLES:
        raise PlanError(
            f"{sb.split}: a blend of {n:,d} samples: the framework's blending index would take {9 * n / 1e9:,.0f} GB "
            "(a uint8 and an int64 per sample) and no real run draws that many; check train_iters, eval_interval "
            "and eval_iters"
        )
    if memo is None:
        return blend.greedy_counts(list(sb.greedy_weights), n), n
    key = (tuple(sb.greedy_weights), n)
    if key not in memo:
        memo[key] = blend.greedy_counts(list(sb.greedy_weights), n)
    return list(memo[key]), n


def _epochs_mode(inp: PlanInput) -> bool:
    """NeoX's train_epochs mode: no train_iters or train_samples, train_epochs set."""
    return inp.train_iters is None and inp.train_samples is None and inp.neox.train_epochs is not None


def _loader_batch(inp: PlanInput) -> int:
    """NeoX's loader batch in train_epochs mode: micro * dp (make_data_loader), dp = gbs // (micro * gas)."""
    o = inp.neox
    if o.micro_batch_size is None:
        raise PlanError("train_epochs: train_micro_batch_size_per_gpu is needed to size NeoX's data loader")
    return o.micro_batch_size * (inp.global_batch_size // (o.micro_batch_size * o.gradient_accumulation_steps))


def _train_iters(inp: PlanInput, builds: list[SplitBuild | None] | None = None) -> tuple[int, str]:
    """train_iters and the line of arithmetic that gives it (given, from train_samples, or train_epochs)."""
    gbs = inp.global_batch_size
    if inp.train_iters is not None:
        return inp.train_iters, ""
    if inp.train_samples is not None:
        iters = inp.train_samples // gbs
        return iters, f"train_iters = train_samples // global_batch_size = {inp.train_samples} // {gbs} = {iters}"
    if inp.neox.train_epochs is not None and builds is not None and builds[0] is not None:
        o = inp.neox
        loader_batch = _loader_batch(inp)
        size = builds[0].size
        batches = size // loader_batch
        iters = batches * o.train_epochs // o.gradient_accumulation_steps
        return iters, (
            f"train_epochs: train_iters = len(train_loader) * train_epochs // gradient_accumulation_steps = "
            f"({size} // {loader_batch}) * {o.train_epochs} // {o.gradient_accumulation_steps} = {iters} "
            "(NeoX's update_iterations; the loader batch is micro * dp, drop_last)"
        )
    raise PlanError(
        "train_iters: not set; give train_iters (or --train-samples, or train_epochs), or ask for --epochs N"
    )


def _builds(inp: PlanInput, cache: TokenCache) -> tuple[list[SplitBuild | None], int, str]:
    """The split builds of ``inp``, its train_iters and the line of arithmetic giving them (checked input)."""
    _check_input(inp)
    fw = framework_of(inp)
    builds: list[SplitBuild | None] | None = None
    if _epochs_mode(inp):
        builds = fw.split_builds(inp, fw.requests(inp, 0), cache)
    train_iters, iters_line = _train_iters(inp, builds)
    if train_iters <= 0:
        raise PlanError(f"train_iters: the run gives {train_iters} iterations; expected at least one ({iters_line})")
    if builds is None:
        builds = fw.split_builds(inp, fw.requests(inp, train_iters), cache)
    return builds, train_iters, iters_line


Built = tuple[list[SplitBuild | None], int, str]
"""What :func:`_builds` returns: the split builds, train_iters and its line of arithmetic."""


def _train_screen(inp: PlanInput, built: Built, memo: DrawsMemo) -> tuple[list[int], bool] | None:
    """What :func:`make_plan` would find for the train split alone: per-source draws (the same exact greedy
    replay) and whether each source's build holds its draws. None when the train split is empty (make_plan
    raises). The valid and test splits, warnings and exposure estimates are left out: the exact-mode search
    screens its candidates with this and plans only the one that passes."""
    builds, train_iters, _ = built
    sb = builds[0]
    if sb is None:
        return None
    consumed = framework_of(inp).consumption(inp, train_iters)[0]
    limit = sb.size if not _epochs_mode(inp) else sb.size // _loader_batch(inp) * _loader_batch(inp)
    draws, _ = _draws(sb, min(consumed, limit), memo)
    return draws, all(d.build.samples_built >= n for d, n in zip(sb.datasets, draws))


def make_plan(
    inp: PlanInput, targets: Sequence[int] | None = None, cache: TokenCache | None = None, memo: DrawsMemo | None = None
) -> Plan:
    """Plan ``inp`` as the framework will run it (train_iters, train_samples or NeoX train_epochs required).

    ``cache`` keeps the token sums of (prefix, first, last sequence) between calls, so the exact-mode
    search reads each .idx once; ``memo`` the greedy blend counts, so its winner's plan replays none twice.
    """
    cache = {} if cache is None else cache
    return _plan_from(inp, _builds(inp, cache), targets, memo)


def _plan_from(inp: PlanInput, built: Built, targets: Sequence[int] | None, memo: DrawsMemo | None) -> Plan:
    """:func:`make_plan` once the split builds are known."""
    builds, train_iters, iters_line = built
    fw = framework_of(inp)
    gbs = inp.global_batch_size
    consumed = fw.consumption(inp, train_iters)
    sources: list[SourcePlan] = []
    blends: list[SplitBlend] = []
    warnings: list[PlanWarning] = []
    arithmetic = [iters_line] if iters_line else []
    arithmetic += (
        list(inp.mcore.arithmetic) if inp.mcore.arithmetic is not None else _consumed_lines(inp, train_iters, consumed)
    )
    a = fw.extra_token(inp)
    # train_epochs mode: the loaders (drop_last) are cycled, so at most their full batches are ever drawn
    loader_batch = _loader_batch(inp) if _epochs_mode(inp) else None
    for i, sb in enumerate(builds):
        if sb is None:
            if i == 0:
                raise PlanError("the train split is empty: check split and data paths")
            continue
        limit = sb.size if loader_batch is None else sb.size // loader_batch * loader_batch
        draws, n = _draws(sb, min(consumed[i], limit), memo)
        if consumed[i] > limit:
            full = f" ({limit} in full loader batches of {loader_batch})" if limit != sb.size else ""
            warnings.append(_past_end_warning(inp, sb.split, consumed[i], sb.size, full))
        if sb.blended:
            blends.append(SplitBlend(sb.split, sb.size, sb.greedy_weights, n, tuple(draws), sb.rule))
        for k, (d, drawn) in enumerate(zip(sb.datasets, draws)):
            sources.append(_source_plan(inp, d, drawn, a, targets[k] if targets is not None and i == 0 else None))
            warnings.extend(_source_warnings(inp, fw.past_end, d, drawn))
    warnings.extend(_run_warnings(inp, train_iters, sources))
    requested = fw.train_request(inp)
    return Plan(
        framework=inp.framework,
        framework_version=inp.framework_version,
        seq_length=inp.seq_length,
        global_batch_size=gbs,
        train_iters=train_iters,
        train_samples=requested if requested is not None else train_iters * gbs,
        consumed={s: c for s, c in zip(SPLITS, consumed)},
        sources=tuple(sources),
        blends=tuple(blends),
        warnings=tuple(warnings),
        arithmetic=tuple(arithmetic),
    )


def _consumed_lines(inp: PlanInput, train_iters: int, consumed: Sequence[int]) -> list[str]:
    """The arithmetic of the samples each split draws (builds.eval_consumption's)."""
    gbs, o = inp.global_batch_size, inp.mcore
    eg, name = (
        (o.eval_global_batch_size, "eval_global_batch_size") if o.eval_global_batch_size else (gbs, "global_batch_size")
    )
    if o.start_eval_at_iter is not None:
        valid = (
            f"valid samples = max(0, train_iters // eval_interval + 1 - start_eval_at_iter // eval_interval) * "
            f"eval_iters * {name} = max(0, {train_iters} // {inp.eval_interval} + 1 - {o.start_eval_at_iter} // "
            f"{inp.eval_interval}) * {inp.eval_iters} * {eg} = {consumed[1]}"
        )
    else:
        valid = (
            f"valid samples = (train_iters // eval_interval + 1) * eval_iters * {name} = "
            f"({train_iters} // {inp.eval_interval} + 1) * {inp.eval_iters} * {eg} = {consumed[1]}"
        )
    train = (
        f"train samples consumed = train_iters * global_batch_size = {train_iters} * {gbs} = {consumed[0]}"
        if o.train_consumed is None
        else f"train samples consumed = the batch schedule summed over {train_iters} iterations = {consumed[0]}"
    )
    return [train, valid, f"test samples = eval_iters * {name} = {inp.eval_iters} * {eg} = {consumed[2]}"]


def _past_end_warning(inp: PlanInput, split: str, consumed: int, size: int, full: str) -> PlanWarning:
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


def _source_plan(inp: PlanInput, d: Dataset, drawn: int, a: int, target: int | None) -> SourcePlan:
    b = d.build
    unseen = expected_unseen(b, drawn, inp.seq_length, a, separate_all=inp.neox.separate_epochs)
    passes = source_passes(drawn, b.samples_per_epoch, d.tokens, inp.seq_length) or 0.0  # None only without tokens
    return SourcePlan(
        name=d.source.spec.label,
        prefix=d.source.spec.prefix,
        split=d.split,
        documents=d.doc_range[1] - d.doc_range[0],
        document_range=d.doc_range,
        tokens=d.tokens,
        samples_per_epoch=b.samples_per_epoch,
        samples_requested=b.samples_requested,
        epochs_built=b.epochs,
        samples_built=b.samples_built,
        length=b.length,
        separate_final_epoch=b.separate_final_epoch or (inp.neox.separate_epochs and b.epochs > 1),
        samples_drawn=drawn,
        passes=round(passes, 6),
        tokens_unseen=unseen.tokens,
        tokens_unseen_exact=unseen.exact,
        target_samples=target,
        formula=b.formula,
    )


def _source_warnings(inp: PlanInput, past_end: str, d: Dataset, drawn: int) -> list[PlanWarning]:
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


def _run_warnings(inp: PlanInput, train_iters: int, sources: list[SourcePlan]) -> list[PlanWarning]:
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


# ----------------------------------------------------------------------------------------------------------
# exact mode


def _target_samples(tokens: int, seq_length: int, passes: float, a: int) -> int:
    """Samples to draw for ``passes`` passes: whole passes use every sample of their index.

    ``k`` whole passes give ``(k*T - a) // L`` samples (the epochs' tokens packed back to back, which can be
    one more than ``k * samples_per_epoch``); a fractional part adds ``floor(f * samples_per_epoch)``.
    """
    whole = int(math.floor(passes + 1e-12))
    frac = passes - whole
    per_epoch = (tokens - a) // seq_length
    base = (whole * tokens - a) // seq_length if whole >= 1 else 0
    return base + int(math.floor(frac * per_epoch + 1e-9))


def passes_per_source(epochs: float | Mapping[str, float], sources: Sequence[SourceSpec]) -> dict[str, float]:
    """Passes per source from one number (every source) or a map keyed by source name or prefix."""
    if isinstance(epochs, Mapping):
        return {str(k): float(v) for k, v in epochs.items()}
    if isinstance(epochs, bool) or not isinstance(epochs, (int, float)):
        raise PlanError(f"epochs: {epochs!r}; expected a number or a map {{source name: epochs}}")
    return {s.label: float(epochs) for s in sources}


def exact_plan(
    inp: PlanInput,
    passes: dict[str, float],
    search_seeds: int = 200,
    batches: Callable[[int], tuple[int, int, str]] | None = None,
) -> Plan:
    """Settings for exactly ``passes[name]`` passes over each train source, and the plan under them.

    ``batches``: for a batch that changes from step to step (Megatron-LM 0.19.2's step schedule), total samples ->
    (iterations, the samples they draw: the most that fit, the arithmetic); the run then asks for exactly those
    samples (``train_samples``). None: a constant global batch, train_iters = total // global batch."""
    _check_input(inp)
    _no_repeated_prefix(inp.train_sources)
    labels = [s.label for s in inp.train_sources]
    want = _wanted_passes(inp.train_sources, passes)
    cache: TokenCache = {}
    targets = _exact_targets(inp, want, cache)
    total = sum(targets)
    gbs = inp.global_batch_size
    if batches is None:
        iters = total // gbs
        consumed = iters * gbs
        line = f"train_iters = sum(targets) // global_batch_size = {total} // {gbs} = {iters}"
    else:
        iters, consumed, line = batches(total)
    if iters == 0:
        raise PlanError(f"exact plan: {total} samples are less than one global batch ({gbs}); lower the batch size")
    remainder = total - consumed
    final = _fit_remainder(targets, want, remainder)
    arithmetic = [f"{lab}: target = {w} passes -> {t} samples" for lab, w, t in zip(labels, want, targets)] + [
        f"{line}; remainder = {total} - {consumed} = {remainder} samples not drawn"
    ]
    plan, settings = _exact_run(
        inp, iters, labels, final, search_seeds, cache, consumed if batches is not None else None
    )
    warnings = [*plan.warnings, *_remainder_warnings(labels, targets, final, inp.seq_length)]
    if framework_of(inp).buffered_requests(inp):
        warnings.extend(_without_plugin(inp, iters, cache))
    if settings.get("weight_by_num_documents") is False:
        warnings.append(
            PlanWarning(
                "exact-weights",
                "exact: weight_by_num_documents: true -> false: NeoX's document-count weights "
                f"(weighted_sampler_alpha {inp.neox.weighted_sampler_alpha:g}) do not draw the targets; the blend "
                "weights found for them replace those (written with --write-config)",
                "train",
            )
        )
    return replace(
        plan,
        settings={"train_iters": iters, "train_samples": consumed, **settings},
        remainder_samples=remainder,
        remainder_tokens=remainder * inp.seq_length,
        arithmetic=tuple(arithmetic) + plan.arithmetic,
        warnings=tuple(warnings),
    )


def _no_repeated_prefix(specs: Sequence[SourceSpec]) -> None:
    """Exact mode refuses a prefix listed twice: its copies share one shuffle, so no weights give its passes."""
    seen: dict[str, list[SourceSpec]] = {}
    for s in specs:
        seen.setdefault(os.path.normpath(s.prefix), []).append(s)
    for prefix, same in seen.items():
        if len(same) > 1:
            weights = [s.weight for s in same if s.weight is not None]
            total = f" ({sum(weights):g})" if len(weights) == len(same) else ""
            raise PlanError(
                f"train_data_paths: {prefix} is listed {len(same)} times; expected each prefix once in exact mode "
                f"(NeoX builds one dataset per listing with the same shuffle, so the copies re-train the same "
                f"samples); list it once with the weights added{total}"
            )


def _wanted_passes(specs: Sequence[SourceSpec], passes: Mapping[str, float]) -> list[float]:
    """The passes asked of each train source (by label, else prefix), checked: all named, each finite and > 0."""
    labels = [s.label for s in specs]
    unknown = sorted(set(passes) - set(labels) - {s.prefix for s in specs})
    if unknown:
        raise PlanError(f"--source-epochs: unknown source(s) {unknown}; sources are {labels}")
    want = [passes.get(s.label, passes.get(s.prefix)) for s in specs]
    missing = [lab for lab, w in zip(labels, want) if w is None]
    if missing:
        raise PlanError(f"--source-epochs: no target for {missing}; give --epochs N or NAME=E for every source")
    for lab, w in zip(labels, want):
        if not (isinstance(w, (int, float)) and math.isfinite(w) and w > 0):
            raise PlanError(f"--source-epochs: {lab}={w}: epochs must be a finite number > 0, e.g. 1 or 0.5")
    return cast("list[float]", want)


def _exact_targets(inp: PlanInput, want: Sequence[float], cache: TokenCache) -> list[int]:
    """Samples each train source must give for its wanted passes, from a probe plan's per-source train tokens."""
    fw = framework_of(inp)
    a = fw.extra_token(inp)
    # one plan with a throwaway train_iters gives the per-source train tokens (split-aware)
    probe = make_plan(replace(inp, train_iters=1, train_samples=None, warmup_iters=None), cache=cache)
    by_prefix = {s.prefix: s for s in probe.sources if s.split == "train"}
    targets = []
    for spec, w in zip(inp.train_sources, want):
        sp = by_prefix[spec.prefix]
        t = _target_samples(sp.tokens, inp.seq_length, float(w), a)
        # NeoX's len(dataset) is samples - 1 and its blend size the sum of those lens: one sample per source is unusable
        if fw.len_minus_one:
            t = min(t, ((math.ceil(w) * sp.tokens - 1) // inp.seq_length) - 1)
        if t <= 0:
            raise PlanError(
                f"--source-epochs: {spec.label}={w} gives {t} samples (samples per epoch {sp.samples_per_epoch})"
            )
        targets.append(t)
    return targets


def _fit_remainder(targets: list[int], want: Sequence[float], remainder: int) -> list[int]:
    """The targets less the ``remainder`` under one global batch, taken from fractional-pass sources first."""
    # their pass is partial anyway, so whole-pass sources stay exact
    fractional = [i for i, w in enumerate(want) if float(w) != math.floor(float(w))]
    if not fractional or sum(targets[i] for i in fractional) <= remainder:
        return _shave(targets, remainder)
    final = list(targets)
    for i, t in zip(fractional, _shave([targets[i] for i in fractional], remainder)):
        final[i] = t
    return final


def _exact_run(
    inp: PlanInput,
    iters: int,
    labels: list[str],
    final: list[int],
    search_seeds: int,
    cache: TokenCache,
    samples: int | None = None,
) -> tuple[Plan, dict[str, object]]:
    """The plan drawing exactly ``final`` in ``iters`` iterations (``samples``: a changing batch's draws, asked
    of the builder as train_samples), and the settings besides train_iters it needs."""
    settings: dict[str, object] = {}
    exact_inp = replace(inp, train_iters=iters, train_samples=samples)
    fw = framework_of(inp)
    if fw.exact_surplus_zero:
        exact_inp = replace(exact_inp, mcore=replace(inp.mcore, mid_level_dataset_surplus=0.0, train_consumed=samples))
        settings["mid_level_dataset_surplus"] = 0.0
    if len(final) == 1:
        if fw.buffered_requests(inp):
            exact_inp = replace(exact_inp, neox=replace(inp.neox, blend_buffer=1.0))
            settings["blend_buffer"] = 1.0
        plan = make_plan(exact_inp, final, cache)
    else:
        if inp.neox.weight_by_num_documents:  # NeoX options; the other frameworks leave them at their defaults
            # NeoX's document-count weights give other draws than the targets: explicit weights replace them
            exact_inp = replace(exact_inp, neox=replace(exact_inp.neox, weight_by_num_documents=False))
            settings["weight_by_num_documents"] = False
        plan, weights = _search_weights(exact_inp, final, search_seeds, cache)
        settings["weights"] = weights
        settings["targets"] = {lab: t for lab, t in zip(labels, final)}
        settings.update(fw.exact_block)
    drawn = [s.samples_drawn for s in plan.sources if s.split == "train"]
    if drawn != final:
        raise PlanError(
            f"exact plan: the framework would draw {drawn}, not the targets {final}; this blend cannot be exact"
        )
    return plan, settings


def _remainder_warnings(labels: list[str], targets: list[int], final: list[int], seq_length: int) -> list[PlanWarning]:
    """One warning per source whose target lost samples to the remainder under one global batch."""
    return [
        PlanWarning(
            "exact-remainder",
            f"exact: {lab}: {t0 - t1} of its {t0} target samples fall in the remainder "
            f"under one global batch ({(t0 - t1) * seq_length} tokens not drawn)",
            "train",
            lab,
        )
        for lab, t0, t1 in zip(labels, targets, final)
        if t0 != t1
    ]


def _shave(targets: list[int], remainder: int) -> list[int]:
    """Take ``remainder`` samples off the targets, proportionally (largest share first), keeping each >= 0."""
    out = list(targets)
    total = sum(targets)
    if remainder <= 0:
        return out
    cut = [remainder * t // total for t in targets]
    left = remainder - sum(cut)
    order = sorted(range(len(targets)), key=lambda i: (-(remainder * targets[i] % total), i))
    for i in order[:left]:
        cut[i] += 1
    return [t - c for t, c in zip(out, cut)]


def candidate_weights(targets: Sequence[int], k: int) -> list[float]:
    """The k-th weights the exact search tries: the targets themselves, then seeded perturbations of 1e-9 * k."""
    import numpy as np

    if k == 0:
        return [float(t) for t in targets]
    rng = np.random.RandomState(k)
    return [float(t) * (1.0 + float(u)) for t, u in zip(targets, rng.uniform(-1e-9, 1e-9, len(targets)) * k)]


def _search_weights(inp: PlanInput, targets: list[int], seeds: int, cache: TokenCache) -> tuple[Plan, list[float]]:
    """Float weights under which the framework's greedy draws exactly ``targets`` (tried, then verified).

    Each candidate is screened by its train draws alone (:func:`_train_screen`: the exact greedy replay, kept in
    ``memo``); the full plan is built once, for the candidate that passes, reusing that replay, and checked again."""

    tried = []
    memo: DrawsMemo = {}
    for k in range(seeds):
        w = candidate_weights(targets, k)
        trial = replace(
            inp,
            blend_weights_override=tuple(w),
            neox=replace(inp.neox, exact_requests=tuple(targets) if framework_of(inp).exact_requests else None),
        )
        built = _builds(trial, cache)
        screen = _train_screen(trial, built, memo)
        if screen is not None and screen != (targets, True):
            tried.append(screen[0])
            continue
        plan = _plan_from(trial, built, targets, memo)  # the winner (or an empty train split: make_plan's error)
        drawn = [s.samples_drawn for s in plan.sources if s.split == "train"]
        built_ok = all(s.samples_built >= s.samples_drawn for s in plan.sources if s.split == "train")
        if drawn == targets and built_ok:
            return plan, w
        tried.append(drawn)
    raise PlanError(
        f"exact plan: no float weights found (after {seeds} tries) under which the greedy blend draws exactly "
        f"{targets}; last draws {tried[-1]}: " + framework_of(inp).no_weights_fix
    )


def _without_plugin(inp: PlanInput, train_iters: int, cache: TokenCache) -> list[PlanWarning]:
    """What stock NeoX (1.005 buffer, config weights) does with the same train_iters, for comparison."""
    stock = make_plan(
        replace(
            inp,
            train_iters=train_iters,
            blend_weights_override=None,
            neox=replace(inp.neox, blend_buffer=None, exact_requests=None),
        ),
        cache=cache,
    )
    out = []
    for s in stock.sources:
        if s.split == "train" and s.epochs_built > math.ceil(s.passes - 1e-9):
            out.append(
                PlanWarning(
                    "without-plugin",
                    f"without neox-epoch: NeoX asks {s.name} for {s.samples_requested} samples (x1.005), builds "
                    f"{s.epochs_built} epochs shuffled together and draws {s.samples_drawn}: ~{s.tokens_unseen:,d} of its "
                    f"{s.tokens:,d} tokens never seen",
                    "train",
                    s.name,
                )
            )
    return out


def predict_splits(inp: PlanInput, sizes: Sequence[int | None]) -> list[dict[str, object] | None]:
    """megatron-core: what BlendedMegatronDatasetBuilder(sizes) builds per split, with full-blend draws.

    The comparison tests check every number here against the real builder.
    """
    if not framework_of(inp).predicts_splits:
        raise PlanError("predict_splits mirrors megatron-core's builder only")
    cache: TokenCache = {}
    out: list[dict[str, object] | None] = []
    for sb in framework_of(inp).split_builds(inp, list(sizes), cache):
        if sb is None:
            out.append(None)
            continue
        if sb.blended and sb.greedy_weights is not None:
            draws = blend.greedy_counts(list(sb.greedy_weights), sb.size)
        else:
            draws = [d.build.length for d in sb.datasets]
        out.append(
            {
                "blended": sb.blended,
                "size": sb.size,
                "draws": draws,
                "oversampled": (
                    mcore.oversampled(draws, [d.build.length for d in sb.datasets], inp.framework_version)
                    if sb.blended
                    else [False]
                ),
                "datasets": [
                    {
                        "prefix": d.source.spec.prefix,
                        "num_samples": d.build.samples_requested,
                        "len": d.build.length,
                        "epochs": d.build.epochs,
                        "separate_final_epoch": d.build.separate_final_epoch,
                        "doc_range": list(d.doc_range),
                        "tokens": d.tokens,
                    }
                    for d in sb.datasets
                ],
            }
        )
    return out
