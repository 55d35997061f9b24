"""The epoch plan: from .idx files and batch settings to what the framework builds and draws.

Pure functions over numpy and the semantics modules; no torch. ``make_plan`` answers "what will this
config do", ``exact_plan`` answers "which settings give exactly these passes" and returns the plan
under those settings, checked by replaying the framework's own arithmetic.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from neox_epoch import blend, idx
from neox_epoch.errors import PlanError
from neox_epoch.semantics import DatasetBuild, legacy, mcore, neox

FRAMEWORKS = ("neox", "megatron-core", "megatron-legacy")
SPLITS = ("train", "valid", "test")
#: token sums of (prefix, first sequence, end sequence), shared between plans so each .idx is read once
TokenCache = dict[tuple[str, int, int], int]


@dataclass(frozen=True)
class SourceSpec:
    """One tokenized source: a .bin/.idx prefix, its display name and its blend weight."""

    prefix: str
    """Path prefix of the .bin/.idx pair."""
    weight: float | None = None
    """Blend weight as written in the config (None: no weight given)."""
    name: str = ""
    """Display name (default: the prefix's basename)."""

    @property
    def label(self) -> str:
        return self.name or os.path.basename(self.prefix)


@dataclass(frozen=True)
class PlanInput:
    """Everything the plan needs, framework-neutral. Field names follow NeoX where they exist."""

    framework: str
    """'neox', 'megatron-core' or 'megatron-legacy': whose semantics to mirror."""
    framework_version: str
    """Version whose semantics apply (megatron-core: buffer rules differ by version)."""
    seq_length: int
    """Tokens per sample (NeoX seq_length, Megatron --seq-length)."""
    global_batch_size: int
    """Samples per iteration: NeoX train_batch_size, Megatron --global-batch-size."""
    train_sources: tuple[SourceSpec, ...]
    """Sources of the train split (data_path/--data-path, or train_data_paths)."""
    valid_sources: tuple[SourceSpec, ...] = ()
    """Per-split sources (NeoX valid_data_paths, Megatron --valid-data-path); empty with a split string."""
    test_sources: tuple[SourceSpec, ...] = ()
    """Per-split sources (NeoX test_data_paths, Megatron --test-data-path)."""
    per_split_paths: bool = False
    """True for NeoX train_data_paths mode / Megatron blend_per_split; False for data_path + split."""
    split: str | None = "969,30,1"
    """Split string for data_path mode (NeoX default "969,30,1")."""
    train_iters: int | None = None
    """Iterations to train (None: computed in exact mode, or from train_samples)."""
    train_samples: int | None = None
    """Megatron --train-samples (train_iters = train_samples // global_batch_size)."""
    eval_interval: int = 1000
    """Iterations between evaluations."""
    eval_iters: int = 10
    """Iterations per evaluation."""
    seed: int = 1234
    """Data shuffling seed."""
    mid_level_dataset_surplus: float = mcore.DEFAULT_SURPLUS
    """megatron-core >= 0.13.1 mid-level buffer."""
    add_extra_token_to_sequence: bool = True
    """megatron-core: each sample holds seq_length + 1 tokens."""
    renormalize_blend_weights: bool = False
    """megatron-core <= 0.10 renormalize_blend_weights."""
    weight_by_num_documents: bool = False
    """NeoX weight_by_num_documents."""
    weighted_sampler_alpha: float = 1.0
    """NeoX weighted_sampler_alpha."""
    blend_buffer: float | None = None
    """NeoX per-source request factor; None = NeoX's 1.005 (train_data_paths mode only)."""
    exact_requests: tuple[int, ...] | None = None
    """Per train source, the exact num_samples the neox_epoch hooks request (NeoX exact mode)."""
    blend_weights_override: tuple[float, ...] | None = None
    """Per train source, blend weights set by an exact plan (replaces the config's weights)."""
    warmup_iters: int | None = None
    """Learning-rate warmup iterations, checked against the run length."""
    warmup_share_limit: float = 0.1
    """Warn when warmup exceeds this share of train_iters."""
    pack_impl: str = "packed"
    """NeoX pack_impl (only 'packed' is planned)."""
    allow_chopped: bool = True
    """NeoX allow_chopped (part of the cache file name)."""


@dataclass(frozen=True)
class SourcePlan:
    """One source in one split: what is built and what training draws. JSON keys are these names."""

    name: str
    prefix: str
    split: str
    documents: int
    document_range: tuple[int, int]
    tokens: int
    samples_per_epoch: int
    samples_requested: int | None
    epochs_built: int
    samples_built: int
    length: int
    separate_final_epoch: bool
    samples_drawn: int
    passes: float
    tokens_unseen: int
    tokens_unseen_exact: bool
    target_samples: int | None = None
    formula: str = ""


@dataclass(frozen=True)
class SplitBlend:
    """The top-level blend of one split (absent for a direct dataset)."""

    split: str
    size: int | None
    weights: tuple[float, ...] | None
    consumed: int
    draws: tuple[int, ...]
    rule: str


@dataclass(frozen=True)
class Plan:
    """The result: per source and split, plus run-level numbers, warnings and (exact mode) settings."""

    framework: str
    framework_version: str
    seq_length: int
    global_batch_size: int
    train_iters: int
    train_samples: int
    consumed: dict[str, int]
    sources: tuple[SourcePlan, ...]
    blends: tuple[SplitBlend, ...]
    warnings: tuple[str, ...]
    arithmetic: tuple[str, ...]
    settings: dict[str, object] = field(default_factory=dict)
    remainder_samples: int = 0
    remainder_tokens: int = 0

    def to_json(self) -> dict[str, object]:
        """The stable JSON form documented in the README."""
        return {
            "framework": self.framework,
            "framework_version": self.framework_version,
            "seq_length": self.seq_length,
            "global_batch_size": self.global_batch_size,
            "train_iters": self.train_iters,
            "train_samples": self.train_samples,
            "consumed_samples": dict(self.consumed),
            "warnings": list(self.warnings),
            "arithmetic": list(self.arithmetic),
            "sources": [
                {k: (list(v) if isinstance(v, tuple) else v) for k, v in s.__dict__.items()} for s in self.sources
            ],
            "blends": [
                {k: (list(v) if isinstance(v, tuple) else v) for k, v in b.__dict__.items()} for b in self.blends
            ],
            "remainder": {"samples": self.remainder_samples, "tokens": self.remainder_tokens},
            "settings": dict(self.settings),
        }


# ----------------------------------------------------------------------------------------------------------
# reading sources


@dataclass(frozen=True)
class _Source:
    spec: SourceSpec
    header: idx.IdxHeader


def _read_sources(specs: Sequence[SourceSpec]) -> list[_Source]:
    return [_Source(s, idx.read_header(s.prefix)) for s in specs]


def _token_sums(src: _Source, ranges: list[tuple[int, int]], cache: TokenCache) -> list[int]:
    missing = [r for r in ranges if (src.header.prefix, r[0], r[1]) not in cache]
    if missing:
        for r, t in zip(missing, idx.range_token_sums(src.header, missing)):
            cache[(src.header.prefix, r[0], r[1])] = t
    return [cache[(src.header.prefix, r[0], r[1])] for r in ranges]


# ----------------------------------------------------------------------------------------------------------
# the framework-specific part: which datasets are built, with which requests, and how they are blended


@dataclass(frozen=True)
class _Dataset:
    source: _Source
    split: str
    doc_range: tuple[int, int]
    tokens: int
    build: DatasetBuild


@dataclass(frozen=True)
class _SplitBuild:
    split: str
    datasets: tuple[_Dataset, ...]
    blended: bool
    greedy_weights: tuple[float, ...] | None  # None: exhaustive (or direct)
    size: int  # samples the split's top-level dataset offers
    rule: str


def _consumption(inp: PlanInput, train_iters: int) -> list[int]:
    gbs = inp.global_batch_size
    return [
        train_iters * gbs,
        (train_iters // inp.eval_interval + 1) * inp.eval_iters * gbs if inp.eval_iters > 0 else 0,
        inp.eval_iters * gbs if inp.eval_iters > 0 else 0,
    ]


def _neox_builds(inp: PlanInput, requests: list[int], cache: TokenCache) -> list[_SplitBuild | None]:
    out: list[_SplitBuild | None] = [None, None, None]
    if not inp.per_split_paths:
        (src,) = _read_sources(inp.train_sources[:1])
        if len(inp.train_sources) != 1:
            raise PlanError("data_path: NeoX's data_path mode takes exactly one prefix; use train_data_paths to blend")
        n = src.header.sequence_count
        bounds = neox.split_boundaries(inp.split or "969,30,1", n)
        ranges = [(bounds[i], bounds[i + 1]) for i in range(3)]
        toks = _token_sums(src, ranges, cache)
        for i in range(3):
            if ranges[i][1] <= ranges[i][0]:
                continue  # NeoX: no dataset for an empty split
            if inp.framework == "megatron-legacy":
                b = legacy.build(toks[i], inp.seq_length, requests[i])
            else:
                b = neox.build(toks[i], inp.seq_length, requests[i])
            d = _Dataset(src, SPLITS[i], ranges[i], toks[i], b)
            out[i] = _SplitBuild(SPLITS[i], (d,), False, None, b.length, "data_path + split: one dataset per split, no buffer")
        return out
    split_sources = [inp.train_sources, inp.valid_sources, inp.test_sources]
    for i, specs in enumerate(split_sources):
        if not specs:
            continue
        srcs = _read_sources(specs)
        if inp.weight_by_num_documents:
            weights = neox.weights_by_num_docs([s.header.sequence_count for s in srcs], inp.weighted_sampler_alpha)
        elif i == 0 and inp.blend_weights_override is not None:
            weights = list(inp.blend_weights_override)
        else:
            weights = [s.spec.weight if s.spec.weight is not None else 1.0 for s in srcs]
        for s, w in zip(srcs, weights):
            if not w > 0:
                raise PlanError(f"{SPLITS[i]}_data_weights: weight {w} for {s.spec.prefix} must be > 0")
        buffer = inp.blend_buffer if inp.blend_buffer is not None else neox.BLEND_BUFFER
        wn, reqs = neox.normalized_weights_and_num_samples(weights, requests[i], buffer)
        if i == 0 and inp.exact_requests is not None:
            reqs = list(inp.exact_requests)
        datasets = []
        for s, r in zip(srcs, reqs):
            n = s.header.sequence_count
            (t,) = _token_sums(s, [(0, n)], cache)
            b = (legacy.build if inp.framework == "megatron-legacy" else neox.build)(t, inp.seq_length, r)
            datasets.append(_Dataset(s, SPLITS[i], (0, n), t, b))
        if inp.framework == "megatron-legacy":
            size = int(sum(r for r in reqs if r is not None))
        else:
            size = neox.blend_size([d.build.length for d in datasets])
        rule = (f"train_data_paths: each source asked for ceil(N * w_i * {buffer}); blend size = sum of len_i"
                if inp.exact_requests is None or i else "neox_epoch exact targets: each source asked for its target")
        out[i] = _SplitBuild(SPLITS[i], tuple(datasets), True, tuple(blend.normalize(wn)), size, rule)
    return out


def _mcore_builds(inp: PlanInput, requests: list[int], cache: TokenCache) -> list[_SplitBuild | None]:
    version = inp.framework_version
    a = 1 if inp.add_extra_token_to_sequence else 0
    specs = list(inp.train_sources)
    weights: list[float] | None
    if inp.blend_weights_override is not None:
        weights = list(inp.blend_weights_override)
    elif any(s.weight is not None for s in specs):
        if any(s.weight is None for s in specs):
            raise PlanError("--data-path: give a weight for every prefix or for none")
        weights = [float(s.weight) for s in specs]  # type: ignore[arg-type]
    else:
        weights = None
    if weights is not None and any(not w > 0 for w in weights):
        raise PlanError(f"--data-path: weights {weights} must all be > 0")
    blend_per_split = None
    if inp.per_split_paths:
        blend_per_split = []
        for ss in (inp.train_sources, inp.valid_sources, inp.test_sources):
            if not ss:
                blend_per_split.append(None)
                continue
            w = [s.weight for s in ss]
            blend_per_split.append(([s.prefix for s in ss], None if all(x is None for x in w) else [float(x or 1.0) for x in w]))
        if inp.blend_weights_override is not None:
            blend_per_split[0] = (blend_per_split[0][0], list(inp.blend_weights_override))  # type: ignore[index]
    rts = mcore.routes([s.prefix for s in specs], weights, inp.split, requests, version,
                       inp.mid_level_dataset_surplus, blend_per_split)
    all_specs = {s.prefix: s for s in [*inp.train_sources, *inp.valid_sources, *inp.test_sources]}
    out: list[_SplitBuild | None] = [None, None, None]
    for i, route in enumerate(rts):
        if route is None:
            continue
        datasets = []
        for prefix, bookends, req in zip(route.prefixes, route.bookends, route.requests):
            (src,) = _read_sources([all_specs[prefix]])
            rng = mcore.split_range(bookends, src.header.sequence_count)
            (t,) = _token_sums(src, [rng], cache)
            if rng[1] <= rng[0] and req is not None:
                raise PlanError(
                    f"{route.split} split of {prefix} has no documents (split {inp.split!r} over "
                    f"{src.header.sequence_count} sequences gives [{rng[0]}, {rng[1]})) and {req} samples are "
                    "requested: megatron-core would loop forever building it; change --split so it is empty (0) "
                    "or has documents"
                )
            b = mcore.build(t, inp.seq_length, req, a, is_valid_split=(i == 1))
            datasets.append(_Dataset(src, route.split, rng, t, b))
        if not route.blended:
            d = datasets[0]
            out[i] = _SplitBuild(route.split, (d,), False, None, d.build.length, route.rule)
            continue
        size, gw = mcore.blend_size_and_weights(route, [d.build.length for d in datasets], version,
                                                inp.renormalize_blend_weights)
        if size is None:
            size = int(sum(d.build.length for d in datasets))
        out[i] = _SplitBuild(route.split, tuple(datasets), True, tuple(gw) if gw is not None else None, size, route.rule)
    return out


def _builds(inp: PlanInput, train_iters: int, cache: TokenCache) -> list[_SplitBuild | None]:
    requests = _consumption(inp, train_iters)
    if inp.train_samples is not None and inp.framework == "megatron-core":
        requests[0] = inp.train_samples
    reqs: list[int] = [r if r > 0 else 0 for r in requests]
    if inp.framework == "megatron-core":
        return _mcore_builds(inp, reqs, cache)  # type: ignore[arg-type]
    return _neox_builds(inp, reqs, cache)


# ----------------------------------------------------------------------------------------------------------
# the plan


def _check_input(inp: PlanInput) -> None:
    if inp.framework not in FRAMEWORKS:
        raise PlanError(f"framework: {inp.framework!r} is not one of {', '.join(FRAMEWORKS)}")
    for key in ("seq_length", "global_batch_size", "eval_interval"):
        v = getattr(inp, key)
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise PlanError(f"{key}: {v!r} must be a positive integer")
    if not inp.train_sources:
        raise PlanError("no train data: set data_path (or train_data_paths / --data-path)")


def _expected_unseen(build: DatasetBuild, drawn: int, seq_length: int) -> tuple[int, bool]:
    """Tokens of the split never seen, exact where the index structure fixes it, else the expectation."""
    t, e, b = build.tokens, build.epochs, build.samples_built
    if drawn <= 0:
        return t, True
    if e == 1:
        return max(0, t - min(drawn, b) * seq_length), True
    if drawn >= b:
        return 0, True
    first_block = ((e - 1) * t - 1) // seq_length if build.separate_final_epoch else 0
    if build.separate_final_epoch and drawn >= first_block:
        return 0, True  # the first E-1 epochs are all drawn
    p = drawn / b
    return int(round(t * (1 - p) ** e)), False


def _draws(sb: _SplitBuild, consumed: int) -> tuple[list[int], int]:
    """Per dataset draws among the first ``consumed`` samples of the split (and how many were consumed)."""
    n = min(consumed, sb.size)
    if not sb.blended:
        return [n], n
    if sb.greedy_weights is None:  # exhaustive megatron-core blend
        return [d.build.length for d in sb.datasets], n
    return blend.greedy_counts(list(sb.greedy_weights), n), n


def make_plan(inp: PlanInput, targets: Sequence[int] | None = None, cache: TokenCache | None = None) -> Plan:
    """Plan ``inp`` as the framework will run it (``inp.train_iters`` or ``train_samples`` required).

    ``cache`` keeps the token sums of (prefix, first, last sequence) between calls, so the exact-mode
    search reads each .idx once.
    """
    _check_input(inp)
    gbs = inp.global_batch_size
    if inp.train_iters is None and inp.train_samples is None:
        raise PlanError("train_iters: not set; give train_iters (or --train-samples), or ask for --epochs N")
    train_iters = inp.train_iters if inp.train_iters is not None else int(inp.train_samples) // gbs  # type: ignore[arg-type]
    cache = {} if cache is None else cache
    builds = _builds(inp, train_iters, cache)
    consumed = _consumption(inp, train_iters)
    sources: list[SourcePlan] = []
    blends: list[SplitBlend] = []
    warnings: list[str] = []
    arithmetic = [
        f"train samples consumed = train_iters * global_batch_size = {train_iters} * {gbs} = {consumed[0]}",
        f"valid samples = (train_iters // eval_interval + 1) * eval_iters * global_batch_size = "
        f"({train_iters} // {inp.eval_interval} + 1) * {inp.eval_iters} * {gbs} = {consumed[1]}",
        f"test samples = eval_iters * global_batch_size = {inp.eval_iters} * {gbs} = {consumed[2]}",
    ]
    for i, sb in enumerate(builds):
        if sb is None:
            if i == 0:
                raise PlanError("the train split is empty: check split and data paths")
            continue
        draws, n = _draws(sb, consumed[i])
        if consumed[i] > sb.size:
            warnings.append(
                f"{sb.split}: {consumed[i]} samples consumed but the {sb.split} dataset offers {sb.size}; "
                "NeoX's loader starts over from its first sample (the same order again)"
            )
        if sb.blended:
            blends.append(SplitBlend(sb.split, sb.size, sb.greedy_weights, n, tuple(draws), sb.rule))
        for k, (d, drawn) in enumerate(zip(sb.datasets, draws)):
            b = d.build
            if drawn > b.samples_built:
                warnings.append(
                    f"{sb.split}: {d.source.spec.label} is drawn {drawn} times but has {b.samples_built} samples: "
                    + ("megatron-core raises its oversampling IndexError" if inp.framework == "megatron-core"
                       else "NeoX silently wraps the index around (idx % len)")
                )
            unseen, exact = _expected_unseen(b, drawn, inp.seq_length)
            passes = drawn / b.samples_per_epoch if b.samples_per_epoch else 0.0
            sources.append(SourcePlan(
                name=d.source.spec.label, prefix=d.source.spec.prefix, split=sb.split,
                documents=d.doc_range[1] - d.doc_range[0], document_range=d.doc_range, tokens=d.tokens,
                samples_per_epoch=b.samples_per_epoch, samples_requested=b.samples_requested, epochs_built=b.epochs,
                samples_built=b.samples_built, length=b.length, separate_final_epoch=b.separate_final_epoch,
                samples_drawn=drawn, passes=round(passes, 6), tokens_unseen=unseen, tokens_unseen_exact=exact,
                target_samples=(targets[k] if targets is not None and i == 0 else None), formula=b.formula,
            ))
            warnings.extend(_spillover_warning(sb.split, d, drawn, gbs))
    warnings.extend(_run_warnings(inp, train_iters, sources))
    return Plan(
        framework=inp.framework, framework_version=inp.framework_version, seq_length=inp.seq_length,
        global_batch_size=gbs, train_iters=train_iters, train_samples=train_iters * gbs,
        consumed={s: c for s, c in zip(SPLITS, consumed)}, sources=tuple(sources), blends=tuple(blends),
        warnings=tuple(warnings), arithmetic=tuple(arithmetic),
    )


def _spillover_warning(split: str, d: _Dataset, drawn: int, gbs: int) -> list[str]:
    """Warn when an index of E > 1 jointly shuffled epochs is drawn short by more than one global batch."""
    b = d.build
    if b.epochs <= 1 or drawn + gbs > b.samples_built or b.separate_final_epoch or drawn <= 0:
        return []
    p = drawn / b.samples_built
    e = b.epochs
    unseen = (1 - p) ** e
    more = 1 - sum(math.comb(e, k) * p**k * (1 - p) ** (e - k) for k in range(0, math.ceil(drawn / max(1, b.samples_per_epoch)) + 1))
    return [
        f"{split}: {d.source.spec.label}: index built for {e} epochs ({b.samples_built} samples) shuffled jointly, "
        f"{drawn} drawn ({drawn / max(1, b.samples_per_epoch):.3f} passes): expected {unseen:.1%} of its tokens never "
        f"seen and {more:.1%} seen more often than the passes suggest (cross-epoch spillover)"
    ]


def _run_warnings(inp: PlanInput, train_iters: int, sources: list[SourcePlan]) -> list[str]:
    out = []
    for s in sources:
        if s.split == "valid" and s.passes > 1.0:
            out.append(
                f"valid: {s.name}: evaluation consumes {s.samples_drawn} samples = {s.passes:.2f} passes over the "
                "validation split (the same samples are evaluated again and again); lower eval_iters or raise eval_interval"
            )
    if inp.warmup_iters is not None and train_iters > 0 and inp.warmup_iters > inp.warmup_share_limit * train_iters:
        out.append(
            f"warmup: {inp.warmup_iters} warmup iterations are {inp.warmup_iters / train_iters:.0%} of the "
            f"{train_iters} training iterations (more than {inp.warmup_share_limit:.0%})"
        )
    if inp.framework == "neox":
        out.extend(_neox_cache_warnings(inp, sources))
    return out


def _neox_cache_warnings(inp: PlanInput, sources: list[SourcePlan]) -> list[str]:
    """NeoX cache names carry no epochs, split or content hash: flag existing files that do not match."""
    import numpy as np

    out = []
    for k, s in enumerate(sources):
        if s.samples_requested is None:
            continue
        name = s.split
        if inp.per_split_paths:
            idx_in_split = sum(1 for t in sources[:k] if t.split == s.split)
            name = f"{s.split}_{idx_in_split}"
        base = f"{s.prefix}_{name}_indexmap_{s.samples_requested}ns_{inp.seq_length}sl_{inp.seed}s"
        base += f"_{inp.pack_impl}pi" + ("_ac" if inp.allow_chopped else "")
        doc = base + "_doc_idx.npy"
        if not os.path.isfile(doc):
            continue
        try:
            arr = np.load(doc, mmap_mode="r")
            n = int(arr.shape[0])
        except (OSError, ValueError) as err:
            out.append(f"cache: {doc} exists but cannot be read ({err}); NeoX would fail or rebuild")
            continue
        expect = s.documents * s.epochs_built
        if n != expect:
            out.append(
                f"cache: {doc} exists with {n} document entries, expected {s.documents} documents x "
                f"{s.epochs_built} epochs = {expect}: NeoX will silently reuse this stale index (its cache names "
                "carry no split, epochs or content hash); delete it or change the seed"
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


def exact_plan(inp: PlanInput, passes: dict[str, float], search_seeds: int = 200) -> Plan:
    """Settings for exactly ``passes[name]`` passes over each train source, and the plan under them."""
    _check_input(inp)
    specs = list(inp.train_sources)
    labels = [s.label for s in specs]
    unknown = sorted(set(passes) - set(labels) - {s.prefix for s in specs})
    if unknown:
        raise PlanError(f"--source-epochs: unknown source(s) {unknown}; sources are {labels}")
    want = [passes.get(s.label, passes.get(s.prefix)) for s in specs]
    if any(w is None for w in want):
        missing = [lab for lab, w in zip(labels, want) if w is None]
        raise PlanError(f"--source-epochs: no target for {missing}; give --epochs N or NAME=E for every source")
    for lab, w in zip(labels, want):
        if not w > 0:  # type: ignore[operator]
            raise PlanError(f"--source-epochs: {lab}={w}: epochs must be > 0")
    a = 1 if (inp.framework != "megatron-core" or inp.add_extra_token_to_sequence) else 0
    # one plan with a throwaway train_iters gives the per-source train tokens (split-aware)
    cache: TokenCache = {}
    probe = make_plan(replace(inp, train_iters=1, train_samples=None, warmup_iters=None), cache=cache)
    train = [s for s in probe.sources if s.split == "train"]
    by_prefix = {s.prefix: s for s in train}
    # NeoX's len(dataset) is samples - 1 and its blend size the sum of those lens: one sample per source is unusable
    len_minus_one = inp.framework == "neox"
    targets = []
    for spec, w in zip(specs, want):
        sp = by_prefix[spec.prefix]
        t = _target_samples(sp.tokens, inp.seq_length, float(w), a)  # type: ignore[arg-type]
        if len_minus_one:
            t = min(t, ((math.ceil(w) * sp.tokens - 1) // inp.seq_length) - 1)
        if t <= 0:
            raise PlanError(f"--source-epochs: {spec.label}={w} gives {t} samples (samples per epoch {sp.samples_per_epoch})")
        targets.append(t)
    total = sum(targets)
    gbs = inp.global_batch_size
    iters = total // gbs
    if iters == 0:
        raise PlanError(f"exact plan: {total} samples are less than one global batch ({gbs}); lower the batch size")
    consumed = iters * gbs
    remainder = total - consumed
    # the remainder under one global batch is taken from sources with fractional targets first: their pass is
    # partial anyway, so whole-pass sources stay exact
    fractional = [i for i, w in enumerate(want) if float(w) != math.floor(float(w))]  # type: ignore[arg-type]
    if fractional and sum(targets[i] for i in fractional) > remainder:
        cut = _shave([targets[i] for i in fractional], remainder)
        final = list(targets)
        for i, t in zip(fractional, cut):
            final[i] = t
    else:
        final = _shave(targets, remainder)
    arithmetic = [
        f"{lab}: target = {w} passes -> {t} samples" for lab, w, t in zip(labels, want, targets)
    ] + [
        f"train_iters = sum(targets) // global_batch_size = {total} // {gbs} = {iters}; "
        f"remainder = {total} - {iters} * {gbs} = {remainder} samples not drawn"
    ]
    settings: dict[str, object] = {"train_iters": iters, "train_samples": consumed}
    exact_inp = replace(inp, train_iters=iters, train_samples=None)
    if inp.framework == "megatron-core":
        exact_inp = replace(exact_inp, mid_level_dataset_surplus=0.0)
        settings["mid_level_dataset_surplus"] = 0.0
    if len(specs) == 1:
        if inp.framework == "neox" and inp.per_split_paths:
            exact_inp = replace(exact_inp, blend_buffer=1.0)
            settings["blend_buffer"] = 1.0
        plan = make_plan(exact_inp, final, cache)
    else:
        plan, weights = _search_weights(exact_inp, final, search_seeds, cache)
        settings["weights"] = weights
        settings["targets"] = {lab: t for lab, t in zip(labels, final)}
        if inp.framework == "neox":
            settings["blend_buffer"] = "exact"
    drawn = [s.samples_drawn for s in plan.sources if s.split == "train"]
    if drawn != final:
        raise PlanError(f"exact plan: the framework would draw {drawn}, not the targets {final}; this blend cannot be exact")
    lost_tokens = remainder * inp.seq_length
    warnings = list(plan.warnings)
    for lab, t0, t1 in zip(labels, targets, final):
        if t0 != t1:
            warnings.append(f"exact: {lab}: {t0 - t1} of its {t0} target samples fall in the remainder under one "
                            f"global batch ({(t0 - t1) * inp.seq_length} tokens not drawn)")
    if inp.framework == "neox" and inp.per_split_paths:
        warnings.extend(_without_plugin(inp, iters, cache))
    return replace(plan, settings=settings, remainder_samples=remainder, remainder_tokens=lost_tokens,
                   arithmetic=tuple(arithmetic) + plan.arithmetic, warnings=tuple(warnings))


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


def _search_weights(inp: PlanInput, targets: list[int], seeds: int, cache: TokenCache) -> tuple[Plan, list[float]]:
    """Float weights under which the framework's greedy draws exactly ``targets`` (tried, then verified)."""
    import numpy as np

    tried = []
    for k in range(seeds):
        if k == 0:
            w = [float(t) for t in targets]
        else:
            rng = np.random.RandomState(k)
            w = [float(t) * (1.0 + float(u)) for t, u in zip(targets, rng.uniform(-1e-9, 1e-9, len(targets)) * k)]
        trial = replace(inp, blend_weights_override=tuple(w),
                        exact_requests=tuple(targets) if inp.framework == "neox" else None)
        plan = make_plan(trial, targets, cache)
        drawn = [s.samples_drawn for s in plan.sources if s.split == "train"]
        built_ok = all(s.samples_built >= s.samples_drawn for s in plan.sources if s.split == "train")
        if drawn == targets and built_ok:
            return plan, w
        tried.append(drawn)
    raise PlanError(
        f"exact plan: no float weights found (after {seeds} tries) under which the greedy blend draws exactly "
        f"{targets}; last draws {tried[-1]}: use megatron-core's exhaustive blending (weights None) or change targets"
    )


def _without_plugin(inp: PlanInput, train_iters: int, cache: TokenCache) -> list[str]:
    """What stock NeoX (1.005 buffer, config weights) does with the same train_iters, for comparison."""
    stock = make_plan(replace(inp, train_iters=train_iters, blend_buffer=None, exact_requests=None,
                              blend_weights_override=None), cache=cache)
    out = []
    for s in stock.sources:
        if s.split == "train" and s.epochs_built > math.ceil(s.passes - 1e-9):
            out.append(
                f"without neox-epoch: NeoX asks {s.name} for {s.samples_requested} samples (x1.005), builds "
                f"{s.epochs_built} epochs shuffled together and draws {s.samples_drawn}: ~{s.tokens_unseen:,d} of its "
                f"{s.tokens:,d} tokens never seen"
            )
    return out


def predict_splits(inp: PlanInput, sizes: Sequence[int | None]) -> list[dict[str, object] | None]:
    """megatron-core: what BlendedMegatronDatasetBuilder(sizes) builds per split, with full-blend draws.

    The comparison tests check every number here against the real builder.
    """
    if inp.framework != "megatron-core":
        raise PlanError("predict_splits mirrors megatron-core's builder only")
    cache: TokenCache = {}
    out: list[dict[str, object] | None] = []
    for sb in _mcore_builds(inp, list(sizes), cache):  # type: ignore[arg-type]
        if sb is None:
            out.append(None)
            continue
        if sb.blended and sb.greedy_weights is not None:
            draws = blend.greedy_counts(list(sb.greedy_weights), sb.size)
        else:
            draws = [d.build.length for d in sb.datasets]
        out.append({
            "blended": sb.blended,
            "size": sb.size,
            "draws": draws,
            "oversampled": (mcore.oversampled(draws, [d.build.length for d in sb.datasets], inp.framework_version)
                            if sb.blended else [False]),
            "datasets": [
                {"prefix": d.source.spec.prefix, "num_samples": d.build.samples_requested, "len": d.build.length,
                 "epochs": d.build.epochs, "separate_final_epoch": d.build.separate_final_epoch,
                 "doc_range": list(d.doc_range), "tokens": d.tokens}
                for d in sb.datasets
            ],
        })
    return out
