"""The epoch plan: from .idx files and batch settings to what the framework builds and draws.

Pure functions over numpy and the semantics modules; no torch. ``make_plan`` answers "what will this
config do"; ``exact_plan`` (:mod:`neox_epoch.plan.exact`) answers "which settings give exactly these passes"
and returns the plan under those settings, checked by replaying the framework's own arithmetic. The inputs are
in :mod:`neox_epoch.plan.inputs`, the per-framework builds in :mod:`neox_epoch.plan.builds`, the plan's warnings
in :mod:`neox_epoch.plan.plan_warnings`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from neox_epoch.errors import PlanError
from neox_epoch.plan.builds import FRAMEWORKS as _FRAMEWORK_RECORDS
from neox_epoch.plan.builds import SPLITS, Dataset, SplitBuild, TokenCache, framework_of
from neox_epoch.plan.inputs import McoreOptions, NeoxOptions, PlanInput, PlanWarning, SourceSpec
from neox_epoch.plan.model import Plan, SourcePlan, SplitBlend
from neox_epoch.plan.plan_warnings import past_end_warning, run_warnings, source_warnings
from neox_epoch.plan.unseen import expected_unseen
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
    "make_plan",
]


# ----------------------------------------------------------------------------------------------------------
# the plan


def _positive_int(value: object, key: str, allow_zero: bool = False) -> None:
    ok = is_whole(value, 0 if allow_zero else 1)
    if not ok:
        want = "an integer >= 0" if allow_zero else "a positive integer"
        raise PlanError(f"{key}: {value!r}; expected {want}")


def check_input(inp: PlanInput) -> None:
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
    epochs = inp.neox.train_epochs
    if epochs is not None and builds is not None and builds[0] is not None:
        o = inp.neox
        loader_batch = _loader_batch(inp)
        size = builds[0].size
        batches = size // loader_batch
        iters = batches * epochs // o.gradient_accumulation_steps
        return iters, (
            f"train_epochs: train_iters = len(train_loader) * train_epochs // gradient_accumulation_steps = "
            f"({size} // {loader_batch}) * {o.train_epochs} // {o.gradient_accumulation_steps} = {iters} "
            "(NeoX's update_iterations; the loader batch is micro * dp, drop_last)"
        )
    raise PlanError(
        "train_iters: not set; give train_iters (or --train-samples, or train_epochs), or ask for --epochs N"
    )


def build_splits(inp: PlanInput, cache: TokenCache) -> tuple[list[SplitBuild | None], int, str]:
    """The split builds of ``inp``, its train_iters and the line of arithmetic giving them (checked input)."""
    check_input(inp)
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
"""What :func:`build_splits` returns: the split builds, train_iters and its line of arithmetic."""


def train_screen(inp: PlanInput, built: Built, memo: DrawsMemo) -> tuple[list[int], bool] | None:
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
    return plan_from(inp, build_splits(inp, cache), targets, memo)


def plan_from(inp: PlanInput, built: Built, targets: Sequence[int] | None, memo: DrawsMemo | None) -> Plan:
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
            warnings.append(past_end_warning(inp, sb.split, consumed[i], sb.size, full))
        if sb.blended:
            blends.append(SplitBlend(sb.split, sb.size, sb.greedy_weights, n, tuple(draws), sb.rule))
        for k, (d, drawn) in enumerate(zip(sb.datasets, draws)):
            sources.append(_source_plan(inp, d, drawn, a, targets[k] if targets is not None and i == 0 else None))
            warnings.extend(source_warnings(inp, fw.past_end, d, drawn))
    warnings.extend(run_warnings(inp, train_iters, sources))
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
