"""megatron-core dataset semantics by version (megatron/core/datasets: blended_megatron_dataset_builder.py,
gpt_dataset.py, blended_dataset.py, blended_megatron_dataset_config.py).

Verified against the real BlendedMegatronDatasetBuilder of megatron-core 0.10.0 and 0.16.1 by
tests/mcore/test_mcore_truth.py (randomized corpora and configs, exact equality).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from neox_epoch.errors import PlanError
from neox_epoch.semantics import DatasetBuild, normalize  # megatron-core's utils.normalize: float64 w / sum(w)

FRAMEWORK = "megatron-core"
DEFAULT_SURPLUS = 0.005
SPLITS = ("train", "valid", "test")


def parse_version(version: str) -> tuple[int, int, int]:
    """'0.16.1' -> (0, 16, 1); suffixes such as 'rc1' or '+local' are ignored."""
    m = re.match(r"^\s*(\d+)\.(\d+)(?:\.(\d+))?", version or "")
    if not m:
        raise PlanError(f"--framework-version: {version!r} is not a version like 0.16.1")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def buffer_rule(version: str) -> str:
    """Which mid-level buffer rule the version uses: 'ceil_n_w_1005' (<= 0.10), 'hard_margin' (0.11-0.13.0)
    or 'surplus' (>= 0.13.1, config field mid_level_dataset_surplus)."""
    v = parse_version(version)
    if v < (0, 11, 0):
        return "ceil_n_w_1005"
    if v < (0, 13, 1):
        return "hard_margin"
    return "surplus"


def parse_split(split: str) -> list[float]:
    """Mirror ``parse_and_normalize_split``: numbers found by the regex ``[.0-9]+``, padded to 3, normalized."""
    values = [float(x) for x in re.findall(r"[.0-9]+", split)]
    values = values + [0.0] * (3 - len(values))
    if len(values) != 3 or sum(values) <= 0:
        raise PlanError(f'split: {split!r} must give 3 non-negative numbers with a positive sum, e.g. "969,30,1"')
    return normalize(values)


def split_matrix(split: str) -> list[tuple[float, float] | None]:
    """Mirror ``convert_split_vector_to_split_matrix`` for one vector: bookends, None for empty parts."""
    vec = parse_split(split)
    ends = [0.0]
    for v in vec:
        ends.append(ends[-1] + v)
    out: list[tuple[float, float] | None] = []
    for lo, hi in zip(ends[:-1], ends[1:]):
        out.append(None if hi <= lo else (lo, hi))
    return out


def split_range(bookends: tuple[float, float], num_sequences: int) -> tuple[int, int]:
    """Mirror ``_build_megatron_dataset_splits``: ``[int(round(lo*n)), int(round(hi*n)))`` over the sequences."""
    lo, hi = bookends
    return int(round(lo * float(num_sequences))), int(round(hi * float(num_sequences)))


def mid_level_sizes(
    weights: Sequence[float], n: int | None, version: str, surplus: float = DEFAULT_SURPLUS
) -> tuple[list[int | None], list[int | None]]:
    """Mirror ``_get_size_per_split_per_dataset`` for one split: (targets, requests) per source.

    targets are what the top-level blend draws from (its size is their sum, >= 0.11) and requests are
    what each GPTDataset is asked to build (with the version's buffer). ``weights`` must already be
    normalized as the builder normalizes them.
    """
    if n is None:
        return [None] * len(weights), [None] * len(weights)
    rule = buffer_rule(version)
    if rule == "ceil_n_w_1005":
        req = [int(math.ceil(n * w * 1.005)) for w in weights]
        return list(req), list(req)
    targets = [int(math.ceil(math.ceil(n * w) * (1 + 0.0))) for w in weights]
    if rule == "hard_margin":
        req = [int(math.ceil(math.ceil(n * w) * (1 + 0.5 / 100))) for w in weights]
    else:
        req = [int(math.ceil(math.ceil(n * w) * (1 + surplus))) for w in weights]
    return list(targets), list(req)


def num_epochs(tokens: int, seq_length: int, num_samples: int | None, add_extra_token: int = 1) -> int:
    """Mirror ``GPTDataset._get_num_epochs``: smallest E >= 1 with ``E*T >= N*L + a`` (N None: 1)."""
    if num_samples is None:
        return 1
    if tokens <= 0:
        raise PlanError(
            f"a split with 0 tokens cannot give {num_samples} samples (megatron-core would loop forever): "
            "change the split so every split that is asked for samples has documents"
        )
    need = num_samples * seq_length + add_extra_token
    return max(1, -(-need // tokens))


def samples_built(tokens: int, seq_length: int, epochs: int, add_extra_token: int = 1) -> int:
    """Samples ``epochs`` epochs give when the last partial sample is dropped: ``(E*T - a) // L`` (0 if empty)."""
    return max(0, (epochs * tokens - add_extra_token) // seq_length)


def build(
    tokens: int,
    seq_length: int,
    num_samples: int | None,
    add_extra_token: int = 1,
    is_valid_split: bool = False,
    drop_last_partial_validation_sequence: bool = True,
) -> DatasetBuild:
    """Mirror ``GPTDataset._build_document_sample_shuffle_indices``: epochs, samples, the 80% rule."""
    a = int(add_extra_token)
    epochs = num_epochs(tokens, seq_length, num_samples, a)
    drop_last = drop_last_partial_validation_sequence if is_valid_split else True
    if epochs * tokens - a < 0:  # an empty split: the C++ helper's integer division truncates to 0
        built = 0
        count = f"max(0, ({epochs}*{tokens} - {a}) / {seq_length}) = 0 (empty split)"
    elif drop_last:
        built = samples_built(tokens, seq_length, epochs, a)
        count = f"({epochs}*{tokens} - {a}) // {seq_length} = {built}"
    else:
        built = math.ceil(float(epochs * tokens - a) / seq_length)
        count = f"ceil(({epochs}*{tokens} - {a}) / {seq_length}) = {built}"
    per_epoch = (tokens - a) // seq_length
    separate = False
    rule = ""
    if epochs > 1 and num_samples is not None:
        sans_final = ((epochs - 1) * tokens - a) // seq_length
        from_final = num_samples - sans_final
        separate = from_final < int(0.80 * per_epoch)
        rule = (
            f"; final epoch: {num_samples} - {sans_final} = {from_final} samples "
            f"{'<' if separate else '>='} int(0.80 * {per_epoch}) = {int(0.80 * per_epoch)} -> "
            f"{'shuffled separately' if separate else 'shuffled jointly with the others'}"
        )
    formula = (
        f"epochs = smallest E with E*{tokens} >= {num_samples}*{seq_length} + {a} = {epochs}; samples = {count}{rule}"
    )
    return DatasetBuild(
        tokens=tokens,
        samples_per_epoch=per_epoch,
        samples_requested=num_samples,
        epochs=epochs,
        samples_built=built,
        length=built,
        separate_final_epoch=separate,
        formula=formula,
    )


@dataclass(frozen=True)
class SplitRoute:
    """How the builder makes one split: a direct GPTDataset or a BlendedDataset over several."""

    split: str
    """'train', 'valid' or 'test'."""
    prefixes: tuple[str, ...]
    """The contributing prefixes, in blend order."""
    bookends: tuple[tuple[float, float], ...]
    """Per prefix, the (lo, hi) fraction of its sequences this split uses."""
    requests: tuple[int | None, ...]
    """Per prefix, num_samples asked of its GPTDataset (None: exactly one epoch)."""
    blended: bool
    """True when a BlendedDataset sits on top."""
    weights: tuple[float, ...] | None
    """Normalized blend weights given by the user (None: weights are the mid-level lengths)."""
    targets: tuple[int | None, ...]
    """Per prefix, ceil(N * w_i): the planned draws (>= 0.11), None for weights None."""
    size: int | None
    """The requested top-level size N of this split (None: not requested)."""
    rule: str
    """The routing rule applied, in words."""


def routes(
    prefixes: Sequence[str],
    weights: Sequence[float] | None,
    split: str | None,
    sizes: Sequence[int | None],
    version: str,
    surplus: float = DEFAULT_SURPLUS,
    blend_per_split: Sequence[tuple[Sequence[str], Sequence[float] | None] | None] | None = None,
) -> list[SplitRoute | None]:
    """Mirror ``BlendedMegatronDatasetBuilder._build_blended_dataset_splits`` routing, per split."""
    out: list[SplitRoute | None] = [None, None, None]
    if blend_per_split is not None:
        for i, blend in enumerate(blend_per_split):
            if blend is None:
                continue
            pfx, w = list(blend[0]), blend[1]
            wn = normalize(w) if w is not None else None
            n = sizes[i]
            if len(pfx) == 1:
                out[i] = SplitRoute(
                    SPLITS[i],
                    tuple(pfx),
                    ((0.0, 1.0),),
                    (n,),
                    False,
                    None,
                    (None,),
                    n,
                    "blend_per_split with one prefix: the GPTDataset directly, no buffer",
                )
                continue
            out[i] = _blend_route(SPLITS[i], pfx, wn, [(0.0, 1.0)] * len(pfx), n, version, surplus, "blend_per_split")
        return out
    if split is None:
        raise PlanError("split: required with a blend (data_path) in megatron-core; e.g. --split 969,30,1")
    matrix = split_matrix(split)
    wn = normalize(weights) if weights is not None else None
    for i, bookends in enumerate(matrix):
        if bookends is None:
            continue
        n = sizes[i]
        if len(prefixes) == 1 and wn is None:
            out[i] = SplitRoute(
                SPLITS[i],
                (prefixes[0],),
                (bookends,),
                (n,),
                False,
                None,
                (None,),
                n,
                "one prefix without a weight: the GPTDataset directly, no buffer, no blend",
            )
            continue
        out[i] = _blend_route(SPLITS[i], list(prefixes), wn, [bookends] * len(prefixes), n, version, surplus, "blend")
    return out


def _blend_route(
    split: str,
    prefixes: list[str],
    weights: list[float] | None,
    bookends: list[tuple[float, float]],
    n: int | None,
    version: str,
    surplus: float,
    what: str,
) -> SplitRoute:
    if weights is None:
        rule = f"{what} with weights None: each source built for exactly one epoch, blended by length; " + (
            "exhaustive (every sample once)" if n is None else f"size = min({n}, sum of lengths)"
        )
        return SplitRoute(
            split,
            tuple(prefixes),
            tuple(bookends),
            tuple([None] * len(prefixes)),
            True,
            None,
            tuple([None] * len(prefixes)),
            n,
            rule,
        )
    if n is None:
        raise PlanError(f"{split}: weights given but no size requested: megatron-core requires a size with weights")
    targets, requests = mid_level_sizes(weights, n, version, surplus)
    br = buffer_rule(version)
    buf = {
        "ceil_n_w_1005": "ceil(N*w*1.005)",
        "hard_margin": "ceil(ceil(N*w)*1.005)",
        "surplus": f"ceil(ceil(N*w)*(1+{surplus}))",
    }[br]
    single = " (one prefix WITH a weight still goes through the blend and its buffer)" if len(prefixes) == 1 else ""
    return SplitRoute(
        split,
        tuple(prefixes),
        tuple(bookends),
        tuple(requests),
        True,
        tuple(weights),
        tuple(targets),
        n,
        f"{what} with weights: each source asked for {buf}{single}",
    )


def blend_size_and_weights(
    route: SplitRoute, lengths: Sequence[int], version: str, renormalize_blend_weights: bool = False
) -> tuple[int | None, list[float] | None]:
    """The BlendedDataset's (size, float weights as the greedy sees them).

    Returns (None, None) for exhaustive blending (every sample of every source exactly once).
    """
    if route.weights is None:
        empty = [p for p, n in zip(route.prefixes, lengths) if n <= 0]
        if empty:
            raise PlanError(
                f"{route.split}: {empty[0]} gives 0 samples in this split, and a blend without weights uses the "
                "lengths as weights: megatron-core's BlendedDataset asserts every weight > 0; drop the source "
                "from this split's blend or change --split"
            )
        if route.size is None:
            return None, None
        size = min(route.size, int(sum(lengths)))
        return size, normalize(list(lengths))
    if buffer_rule(version) == "ceil_n_w_1005":
        size = int(sum(r for r in route.requests if r is not None))
        w = [r / size for r in route.requests] if renormalize_blend_weights else list(route.weights)  # type: ignore[operator]
        return size, normalize(w)
    size = int(sum(t for t in route.targets if t is not None))
    return size, normalize(list(route.weights))


def oversampled(draws: Sequence[int], lengths: Sequence[int], version: str) -> list[bool]:
    """Which mid-level datasets the version's oversampling check (IndexError) flags.

    >= 0.11 compares each source's draws with its length. <= 0.10 pairs ``numpy.unique`` counts with the
    datasets in order, so when a source is never drawn the counts shift onto the wrong datasets; mirrored.
    """
    if buffer_rule(version) == "ceil_n_w_1005":
        counts = [c for c in draws if c > 0]
        return [n < c for n, c in zip(lengths, counts)] + [False] * (len(lengths) - len(counts))
    return [c > n for c, n in zip(draws, lengths)]
