"""Exact mode: the settings that give exactly the asked passes per source, and the plan under them.

Each source's target samples come from its passes; the run's length is ``sum(targets) // global_batch_size``;
for a blend, the weights are searched until the framework's own greedy blend draws the targets (the plan is
replayed with the framework's arithmetic to check it). Pure functions; no torch.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import cast

from neox_epoch.errors import PlanError
from neox_epoch.plan.builds import TokenCache, framework_of
from neox_epoch.plan.inputs import PlanInput, PlanWarning, SourceSpec
from neox_epoch.plan.model import Plan
from neox_epoch.plan.planner import DrawsMemo, build_splits, check_input, make_plan, plan_from, train_screen


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
    check_input(inp)
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

    Each candidate is screened by its train draws alone (:func:`train_screen`: the exact greedy replay, kept in
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
        built = build_splits(trial, cache)
        screen = train_screen(trial, built, memo)
        if screen is not None and screen != (targets, True):
            tried.append(screen[0])
            continue
        plan = plan_from(trial, built, targets, memo)  # the winner (or an empty train split: make_plan's error)
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
                    f"{s.epochs_built} epochs shuffled together and draws {s.samples_drawn}: "
                    f"~{s.tokens_unseen:,d} of its {s.tokens:,d} tokens never seen",
                    "train",
                    s.name,
                )
            )
    return out
