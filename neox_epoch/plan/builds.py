"""Which datasets a framework builds for a run, with which requests, and how it blends them.

One :class:`Framework` record per framework in :data:`FRAMEWORKS`; the plan dispatches through it instead
of comparing framework names. The numbers themselves come from the semantics modules.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from neox_epoch.errors import PlanError
from neox_epoch.formats import idx
from neox_epoch.plan.inputs import PlanInput, SourceSpec
from neox_epoch.semantics import DatasetBuild, blend, legacy, mcore, neox

SPLITS = ("train", "valid", "test")
#: token sums of (prefix, first sequence, end sequence), shared between plans so each .idx is read once
TokenCache = dict[tuple[str, int, int], int]


@dataclass(frozen=True)
class Source:
    """A source spec with its .idx header read."""

    spec: SourceSpec
    header: idx.IdxHeader


@dataclass(frozen=True)
class Dataset:
    """One dataset the framework builds: a source's document range in one split, and its index numbers."""

    source: Source
    split: str
    doc_range: tuple[int, int]
    tokens: int
    build: DatasetBuild


@dataclass(frozen=True)
class SplitBuild:
    """The top-level dataset of one split: direct (one dataset) or a blend."""

    split: str
    datasets: tuple[Dataset, ...]
    blended: bool
    greedy_weights: tuple[float, ...] | None
    """None: exhaustive blend (every sample once) or a direct dataset."""
    size: int
    """Samples the split's top-level dataset offers."""
    rule: str


def read_sources(specs: Sequence[SourceSpec]) -> list[Source]:
    """Each spec with its .idx header, the index checked for its own consistency (pointers vs sizes vs the .bin's
    size, document indices: idx.validate_arrays, as the audit trusts them); a prefix listed many times is read once."""
    headers: dict[str, idx.IdxHeader] = {}
    out = []
    for s in specs:
        header = headers.get(s.prefix)
        if header is None:
            header = headers[s.prefix] = idx.read_header(s.prefix)
            idx.validate_arrays(header)
        out.append(Source(s, header))
    return out


def token_sums(src: Source, ranges: list[tuple[int, int]], cache: TokenCache) -> list[int]:
    missing = [r for r in ranges if (src.header.prefix, r[0], r[1]) not in cache]
    if missing:
        for r, t in zip(missing, idx.range_token_sums(src.header, missing)):
            cache[(src.header.prefix, r[0], r[1])] = t
    return [cache[(src.header.prefix, r[0], r[1])] for r in ranges]


def eval_consumption(inp: PlanInput, train_iters: int) -> list[int]:
    """Samples each split's loader draws: train_iters * gbs, evaluations every eval_interval, one test; with
    Megatron-LM 0.19.2's evaluation batch and --start-eval-at-iter (``inp.mcore``) as its
    get_train_valid_test_num_samples counts them: max(0, train_iters // eval_interval + 1 - start // eval_interval)
    evaluations of eval_iters x the evaluation batch."""
    gbs = inp.global_batch_size
    eval_gbs = inp.mcore.eval_global_batch_size or gbs
    points = train_iters // inp.eval_interval + 1
    if inp.mcore.start_eval_at_iter is not None:
        points = max(0, points - inp.mcore.start_eval_at_iter // inp.eval_interval)
    return [
        train_iters * gbs,
        points * inp.eval_iters * eval_gbs if inp.eval_iters > 0 else 0,
        inp.eval_iters * eval_gbs if inp.eval_iters > 0 else 0,
    ]


# ----------------------------------------------------------------------------------------------------------
# GPT-NeoX (and legacy Megatron-LM, which shares the data_path / train_data_paths code shape)


#: NeoX's validate_train_epochs messages, quoted in the planner's refusals so both name the same reason
NEOX_EPOCHS_WEIGHTS = "train_data_weights != None is currently unsupported with train_epochs"
NEOX_EPOCHS_BY_DOCS = "Weighting by number of documents is currently unsupported with train_epochs"


def check_neox_train_epochs(inp: PlanInput) -> None:
    """Refuse what NeoX's ``validate_train_epochs`` refuses in train_epochs mode, in its order, before any build.

    (train_iters given as well is refused with the config, pack_impl other than packed by the config reader.)
    """
    fix = "or give train_iters instead of train_epochs"
    if inp.neox.weight_by_num_documents:
        raise PlanError(
            f'weight_by_num_documents: true with train_epochs: NeoX refuses it ("{NEOX_EPOCHS_BY_DOCS}"); '
            f"set weight_by_num_documents to false, {fix}"
        )
    weights = [s.weight for s in inp.train_sources]
    if any(w is not None and w != 1.0 for w in weights):
        given = [w if w is not None else 1.0 for w in weights]
        raise PlanError(
            f'train_data_weights: {given} with train_epochs: NeoX refuses it ("{NEOX_EPOCHS_WEIGHTS}"): it '
            f"accepts only weights that are all 1.0; leave train_data_weights unset, {fix}"
        )


def _neox_requests(inp: PlanInput, train_iters: int) -> list[int | None]:
    if inp.neox.train_epochs is not None and inp.train_iters is None:
        check_neox_train_epochs(inp)
        return [None, None, None]  # train_epochs: every split built for exactly one epoch
    return list(eval_consumption(inp, train_iters))


def _neox_like_builds(
    inp: PlanInput,
    requests: list[int | None],
    cache: TokenCache,
    build: Callable[[int, int, int | None], DatasetBuild],
    legacy_size: bool,
) -> list[SplitBuild | None]:
    out: list[SplitBuild | None] = [None, None, None]
    if not inp.per_split_paths:
        if len(inp.train_sources) != 1:
            raise PlanError("data_path: NeoX's data_path mode takes exactly one prefix; use train_data_paths to blend")
        (src,) = read_sources(inp.train_sources[:1])
        bounds = neox.split_boundaries(inp.split or "969,30,1", src.header.sequence_count)
        ranges = [(bounds[i], bounds[i + 1]) for i in range(3)]
        toks = token_sums(src, ranges, cache)
        for i in range(3):
            if ranges[i][1] <= ranges[i][0]:
                continue  # NeoX: no dataset for an empty split
            b = build(toks[i], inp.seq_length, requests[i])
            d = Dataset(src, SPLITS[i], ranges[i], toks[i], b)
            out[i] = SplitBuild(
                SPLITS[i], (d,), False, None, b.length, "data_path + split: one dataset per split, no buffer"
            )
        return out
    opts = inp.neox
    for i, specs in enumerate((inp.train_sources, inp.valid_sources, inp.test_sources)):
        if not specs:
            continue
        srcs = read_sources(specs)
        if i == 0 and inp.blend_weights_override is not None:  # exact mode's weights replace any others
            weights = list(inp.blend_weights_override)
        elif opts.weight_by_num_documents:
            weights = neox.weights_by_num_docs([s.header.sequence_count for s in srcs], opts.weighted_sampler_alpha)
        else:
            weights = [s.spec.weight if s.spec.weight is not None else 1.0 for s in srcs]
        for s, w in zip(srcs, weights):
            if not w >= 0:
                raise PlanError(f"{SPLITS[i]}_data_weights: weight {w} for {s.spec.prefix} must be >= 0")
        buffer = opts.blend_buffer if opts.blend_buffer is not None else neox.BLEND_BUFFER
        wn, reqs = neox.normalized_weights_and_num_samples(weights, requests[i], buffer)
        if i == 0 and opts.exact_requests is not None:
            reqs = list(opts.exact_requests)
        datasets = []
        for s, r in zip(srcs, reqs):
            n = s.header.sequence_count
            (t,) = token_sums(s, [(0, n)], cache)
            datasets.append(Dataset(s, SPLITS[i], (0, n), t, build(t, inp.seq_length, r)))
        if legacy_size:
            size = int(sum(r for r in reqs if r is not None))
        else:
            size = neox.blend_size([d.build.length for d in datasets])
        rule = (
            f"train_data_paths: each source asked for ceil(N * w_i * {buffer}); blend size = sum of len_i"
            if opts.exact_requests is None or i
            else "neox_epoch exact targets: each source asked for its target"
        )
        if requests[i] is None:
            rule = "train_epochs: each source built for exactly one epoch; blend size = sum of len_i"
        out[i] = SplitBuild(SPLITS[i], tuple(datasets), True, tuple(blend.normalize(wn)), size, rule)
    return out


def _neox_build(tokens: int, seq_length: int, num_samples: int | None) -> DatasetBuild:
    return neox.build(tokens, seq_length, num_samples, epochs=1 if num_samples is None else None)


def _neox_builds(inp: PlanInput, requests: list[int | None], cache: TokenCache) -> list[SplitBuild | None]:
    return _neox_like_builds(inp, requests, cache, _neox_build, legacy_size=False)


def _legacy_builds(inp: PlanInput, requests: list[int | None], cache: TokenCache) -> list[SplitBuild | None]:
    return _neox_like_builds(inp, requests, cache, legacy.build, legacy_size=True)


# ----------------------------------------------------------------------------------------------------------
# megatron-core


def _mcore_requests(inp: PlanInput, train_iters: int) -> list[int | None]:
    if inp.mcore.num_samples is not None:
        return list(inp.mcore.num_samples)
    requests: list[int | None] = list(eval_consumption(inp, train_iters))
    if inp.train_samples is not None:
        requests[0] = inp.train_samples
    return requests


def _mcore_consumption(inp: PlanInput, train_iters: int) -> list[int]:
    """Megatron-LM: evaluation draws what it asked the builder for; training draws train_iters * global batch
    (or the ramp-up's sum)."""
    consumed = eval_consumption(inp, train_iters)
    if inp.mcore.num_samples is None:
        if inp.mcore.train_consumed is not None:  # exact mode with a changing batch: the schedule's draws
            consumed[0] = inp.mcore.train_consumed
        return consumed
    train = inp.mcore.train_consumed if inp.mcore.train_consumed is not None else consumed[0]
    return [train] + [c if c is not None else 0 for c in inp.mcore.num_samples[1:]]


def _mcore_weights(inp: PlanInput) -> list[float] | None:
    specs = list(inp.train_sources)
    if inp.blend_weights_override is not None:
        return list(inp.blend_weights_override)
    if not any(s.weight is not None for s in specs):
        return None
    if any(s.weight is None for s in specs):
        raise PlanError("--data-path: give a weight for every prefix or for none")
    weights = [float(s.weight) for s in specs if s.weight is not None]
    if any(not w > 0 for w in weights):
        raise PlanError(f"--data-path: weights {weights} must all be > 0")
    return weights


def _mcore_blend_per_split(inp: PlanInput) -> list[tuple[list[str], list[float] | None] | None] | None:
    if not inp.per_split_paths:
        return None
    out: list[tuple[list[str], list[float] | None] | None] = []
    for ss in (inp.train_sources, inp.valid_sources, inp.test_sources):
        if not ss:
            out.append(None)
            continue
        w = [s.weight for s in ss]
        out.append(([s.prefix for s in ss], None if all(x is None for x in w) else [float(x or 1.0) for x in w]))
    if inp.blend_weights_override is not None and out[0] is not None:
        out[0] = (out[0][0], list(inp.blend_weights_override))
    return out


def _mcore_builds(inp: PlanInput, requests: list[int | None], cache: TokenCache) -> list[SplitBuild | None]:
    version, opts = inp.framework_version, inp.mcore
    a = 1 if opts.add_extra_token_to_sequence else 0
    rts = mcore.routes(
        [s.prefix for s in inp.train_sources],
        _mcore_weights(inp),
        inp.split,
        requests,
        version,
        opts.mid_level_dataset_surplus,
        _mcore_blend_per_split(inp),
    )
    all_specs = {s.prefix: s for s in [*inp.train_sources, *inp.valid_sources, *inp.test_sources]}
    out: list[SplitBuild | None] = [None, None, None]
    for i, route in enumerate(rts):
        if route is None:
            continue
        datasets = []
        for prefix, bookends, req in zip(route.prefixes, route.bookends, route.requests):
            (src,) = read_sources([all_specs[prefix]])
            rng = mcore.split_range(bookends, src.header.sequence_count)
            (t,) = token_sums(src, [rng], cache)
            if rng[1] <= rng[0] and req is not None:
                raise PlanError(
                    f"{route.split} split of {prefix} has no documents (split {inp.split!r} over "
                    f"{src.header.sequence_count} sequences gives [{rng[0]}, {rng[1]})) and {req} samples are "
                    "requested: megatron-core would loop forever building it; change --split so it is empty (0) "
                    "or has documents"
                )
            b = mcore.build(t, inp.seq_length, req, a, is_valid_split=(i == 1))
            datasets.append(Dataset(src, route.split, rng, t, b))
        if not route.blended:
            d = datasets[0]
            out[i] = SplitBuild(route.split, (d,), False, None, d.build.length, route.rule)
            continue
        size, gw = mcore.blend_size_and_weights(
            route, [d.build.length for d in datasets], version, opts.renormalize_blend_weights
        )
        if size is None:
            size = int(sum(d.build.length for d in datasets))
        out[i] = SplitBuild(route.split, tuple(datasets), True, tuple(gw) if gw is not None else None, size, route.rule)
    return out


# ----------------------------------------------------------------------------------------------------------
# the registry


@dataclass(frozen=True)
class Framework:
    """How one framework turns a :class:`PlanInput` into datasets, and how it behaves at the edges."""

    name: str
    requests: Callable[[PlanInput, int], list[int | None]]
    """Samples each split's dataset is asked for, given train_iters."""
    split_builds: Callable[[PlanInput, list[int | None], TokenCache], list[SplitBuild | None]]
    """The per-split datasets built for those requests."""
    consumption: Callable[[PlanInput, int], list[int]]
    """Samples each split's loader draws, given train_iters."""
    extra_token: Callable[[PlanInput], int]
    """``a`` in ``(T - a) // L``: tokens of a split not usable by its samples."""
    len_minus_one: bool
    """``len(dataset)`` is samples - 1 (NeoX's old "temporary fix"): one sample per source is unusable."""
    past_end: str
    """What the framework does when a source is drawn past its end, in words."""
    neox_cache_names: bool
    """Its index caches are named like NeoX's (no epochs, split or content hash in the name)."""
    zero_weight_ok: bool = False
    """It runs a blend weight of 0 (that source is never drawn); megatron-core is not verified with one."""
    copies_share_order: bool = False
    """A prefix listed twice in one blend is built twice with the same seed: the copies share one shuffle (NeoX:
    scripts/neox_repeated_prefix.py; megatron-core: equal index hashes, tests/mcore/test_mcore_repeated_prefix.py)."""
    buffered_requests: Callable[[PlanInput], bool] = lambda inp: False
    """It multiplies every per-source request by a buffer (NeoX's 1.005 with train_data_paths)."""
    exact_surplus_zero: bool = False
    """Exact mode sets ``mid_level_dataset_surplus`` to 0.0 (megatron-core's per-source buffer)."""
    exact_requests: bool = False
    """Exact mode hands the hooks per-source requests (the neox_epoch block's targets)."""
    exact_block: tuple[tuple[str, object], ...] = ()
    """Settings exact mode writes for a blend beside the weights and targets."""
    no_weights_fix: str = "change the targets (--source-epochs) or the global batch size"
    """The fix when no float weights draw the targets."""
    train_request: Callable[[PlanInput], int | None] = lambda inp: None
    """Samples the train dataset is asked for, when the framework asks for them itself (JSON samples_requested)."""
    sampler_ends: Callable[[PlanInput], bool] = lambda inp: False
    """Past a split's end its sampler ends and the run stops (Megatron-LM), rather than the loader starting over."""
    predicts_splits: bool = False
    """:func:`~neox_epoch.plan.planner.predict_splits` mirrors its builder."""
    version_label: str = "{}"
    """How its version reads in the report's header (NeoX's is a commit)."""


def _mcore_train_request(inp: PlanInput) -> int | None:
    """Megatron-LM's request (num_samples), or exact mode's train_samples when the batch changes."""
    if inp.mcore.num_samples:
        return inp.mcore.num_samples[0]
    return inp.train_samples if inp.mcore.train_consumed is not None else None


FRAMEWORKS: dict[str, Framework] = {
    "neox": Framework(
        "neox",
        _neox_requests,
        _neox_builds,
        eval_consumption,
        lambda inp: 1,
        True,
        "NeoX silently wraps the index around (idx % len)",
        True,
        zero_weight_ok=True,
        copies_share_order=True,
        buffered_requests=lambda inp: inp.per_split_paths,
        exact_requests=True,
        exact_block=(("blend_buffer", "exact"),),
        version_label="commit {}",
    ),
    "megatron-core": Framework(
        "megatron-core",
        _mcore_requests,
        _mcore_builds,
        _mcore_consumption,
        lambda inp: 1 if inp.mcore.add_extra_token_to_sequence else 0,
        False,
        "megatron-core raises its oversampling IndexError",
        False,
        exact_surplus_zero=True,
        train_request=_mcore_train_request,
        copies_share_order=True,
        no_weights_fix="use megatron-core's exhaustive blending (weights None) or change targets",
        sampler_ends=lambda inp: inp.mcore.num_samples is not None,
        predicts_splits=True,
    ),
    "megatron-legacy": Framework(
        "megatron-legacy",
        _neox_requests,
        _legacy_builds,
        eval_consumption,
        lambda inp: 1,
        False,
        "legacy Megatron-LM raises an IndexError",
        False,
    ),
}


def framework_of(inp: PlanInput) -> Framework:
    """The :class:`Framework` record of ``inp.framework`` (an error naming the choices otherwise)."""
    fw = FRAMEWORKS.get(inp.framework)
    if fw is None:
        raise PlanError(f"framework: {inp.framework!r} is not one of {', '.join(FRAMEWORKS)}")
    return fw
