"""Deterministic randomized cases for the megatron-core comparison harness (see ``tests/helpers/mcore_truth.py``).

``generate_cases(seed, count, workdir)`` writes tiny uint16 corpora under ``workdir/corpora`` and returns
case dicts::

    {"id", "prefixes", "weights", "split", "blend_per_split", "sizes", "seq_length", "seed",
     "mid_level_dataset_surplus", "add_extra_token_to_sequence", ["renormalize_blend_weights"],
     "path_to_cache", "meta"}

``meta`` only describes how the case was drawn (the truth script ignores it).

megatron-core loops forever when a split with no documents gets samples requested (a request of 0
counts: it asks for ``0 * L + a`` tokens). The generator therefore only uses split strings for which
every source's split range is non-empty, except for a single prefix without weights, whose empty
splits get a ``None`` size (one epoch of nothing, no loop). The split rounding mirrors megatron-core:
the split string is normalized in float64, bookends are running sums, and a split covers sequences
``int(round(lo * n))`` to ``int(round(hi * n))``.
"""

from __future__ import annotations

import os
import random
from typing import Any

import numpy as np

from neox_epoch.formats import idx
from neox_epoch.formats.corpus import write_random_corpus

# megatron-core's split rounding (only used to keep generated splits non-empty; the truth comes from the builder)
from neox_epoch.semantics.mcore import split_matrix, split_range

SEQ_LENGTHS = (8, 16, 32, 64, 128)
SPLIT_STRINGS = ("98,1,1", "90,5,5", "100,0,0", "80,20,0", "70,20,10", "99,1,0", "949,50,1")
SURPLUSES = (0.0, 0.005, 0.05)
#: (min_len, max_len) of the documents of a source
LENGTH_PROFILES = ((1, 300), (1, 300), (1, 40), (100, 300), (1, 8), (20, 120))


def read_sizes(prefix: str) -> np.ndarray:
    """The int32 sequence lengths of ``prefix.idx``."""
    return np.array(idx.sizes_memmap(idx.read_header(prefix)))


def _epoch_samples(tokens: int, seq_length: int, a: int) -> int:
    """Samples of one epoch of ``tokens`` tokens: (T - a) // L, at least 0."""
    return max(0, (tokens - a) // seq_length)


def _choose_weights(rng: random.Random, kind: str, tokens: list[int], seq_length: int, a: int) -> list[float] | None:
    """Weights of one blend: None, random floats, or proportional to integers."""
    if kind == "none":
        return None
    if kind == "float":
        return [round(rng.uniform(0.05, 1.0), rng.choice((2, 4, 9))) for _ in tokens]
    if kind == "int_random":
        return [float(rng.randint(1, 100)) for _ in tokens]
    if kind == "int_epochs":  # per-source sample counts at epoch boundaries
        return [float(max(1, (rng.randint(1, 3) * t - a) // seq_length)) for t in tokens]
    if kind == "single":
        return [rng.choice((1.0, 0.3, round(rng.uniform(0.1, 2.0), 3)))]
    raise ValueError(kind)


def _choose_size(
    rng: random.Random,
    tokens: list[int],
    weights: list[float] | None,
    weights_kind: str,
    seq_length: int,
    a: int,
    allow_null: bool,
) -> tuple[int | None, str]:
    """A sample request for one split, and the name of how it was drawn."""
    per_epoch = [_epoch_samples(t, seq_length, a) for t in tokens]
    kinds = (
        ["frac", "frac", "boundary", "boundary", "tiny"]
        + (["null"] if allow_null else [])
        + ["zero"] * (rng.random() < 0.15)
    )
    kind = rng.choice(kinds)
    if kind == "null":
        return None, kind
    if kind == "zero":
        return 0, kind
    if kind == "tiny":
        return rng.randint(1, 3), kind
    total = max(1, sum(per_epoch))
    if kind == "frac":
        return max(1, int(rng.uniform(0.05, 3.0) * total)), kind
    # boundary: some source exactly at (or one sample off) an epoch boundary
    delta = rng.choice((0, 0, -1, 1))
    k = rng.randint(1, 3)
    if weights is None:
        if len(tokens) == 1:
            return max(1, (k * tokens[0] - a) // seq_length + delta), kind
        return max(1, sum(per_epoch) + delta), kind  # all sources' single epochs
    if weights_kind in ("int_random", "int_epochs") and rng.random() < 0.5:
        return max(1, int(sum(weights)) + delta), kind  # integer weights: meant as exact per-source counts
    w = np.array(weights, dtype=np.float64)
    w = w / np.sum(w)
    j = rng.randrange(len(tokens))
    target = max(1, (k * tokens[j] - a) // seq_length)
    return max(1, int(round(target / w[j])) + delta), kind


def _write_sources(rng: random.Random, case_id: str, workdir: str, count: int) -> list[tuple[str, np.ndarray]]:
    """Write ``count`` tiny corpora for a case: (prefix, sequence lengths) each."""
    sources = []
    for j in range(count):
        num_documents = rng.randint(20, 300)
        min_len, max_len = rng.choice(LENGTH_PROFILES)
        prefix = os.path.join(workdir, "corpora", f"{case_id}-src{j}")
        os.makedirs(os.path.dirname(prefix), exist_ok=True)
        write_random_corpus(prefix, rng.randint(0, 2**31 - 1), num_documents, min_len, max_len)
        sources.append((prefix, read_sizes(prefix)))
    return sources


def _weights_kind(rng: random.Random, num_sources: int) -> str:
    """How a blend of ``num_sources`` prefixes gets its weights."""
    if num_sources == 1:
        return rng.choice(("none", "none", "single"))
    return rng.choice(("none", "float", "float", "int_random", "int_epochs"))


def _split_case(rng: random.Random, case: dict[str, Any], sources: list[tuple[str, np.ndarray]], a: int) -> None:
    """Fill a case that blends all sources with one split string."""
    seq_length = case["seq_length"]
    kind = _weights_kind(rng, len(sources))
    direct = len(sources) == 1 and kind == "none"
    candidates = list(SPLIT_STRINGS)
    rng.shuffle(candidates)
    chosen = "100,0,0"
    for split in candidates:
        matrix = split_matrix(split)
        empty = any(
            b is not None and split_range(b, len(sizes))[0] >= split_range(b, len(sizes))[1]
            for b in matrix
            for _, sizes in sources
        )
        if not empty or direct:
            chosen = split
            break
    matrix = split_matrix(chosen)
    split_tokens: list[list[int]] = []
    for b in matrix:
        row = []
        for _, sizes in sources:
            beg, end = split_range(b, len(sizes)) if b is not None else (0, 0)
            row.append(int(sizes[beg:end].sum()))
        split_tokens.append(row)
    train_tokens = split_tokens[0] if matrix[0] is not None else [int(s.sum()) for _, s in sources]
    weights = _choose_weights(rng, kind, train_tokens, seq_length, a)
    sizes_out: list[int | None] = []
    size_kinds = []
    for i, b in enumerate(matrix):
        if b is None:
            size, size_kind = (rng.choice((0, 100)) if weights is not None else rng.choice((0, None, 100))), "unused"
        elif direct and split_range(b, len(sources[0][1]))[0] >= split_range(b, len(sources[0][1]))[1]:
            size, size_kind = None, "null_empty_split"
        else:
            size, size_kind = _choose_size(
                rng, split_tokens[i], weights, kind, seq_length, a, allow_null=weights is None
            )
        sizes_out.append(size)
        size_kinds.append(size_kind)
    case.update(
        prefixes=[p for p, _ in sources],
        weights=weights,
        split=chosen,
        blend_per_split=None,
        sizes=sizes_out,
    )
    case["meta"].update(mode="split", weights_kind=kind, size_kinds=size_kinds)


def _per_split_case(rng: random.Random, case: dict[str, Any], sources: list[tuple[str, np.ndarray]], a: int) -> None:
    """Fill a case with a separate blend per split (each over whole corpora)."""
    seq_length = case["seq_length"]
    blends: list[list[Any] | None] = []
    sizes_out: list[int | None] = []
    kinds = []
    size_kinds = []
    for i in range(3):
        if i > 0 and rng.random() < 0.3:
            blends.append(None)
            sizes_out.append(rng.choice((0, None, 50)))
            kinds.append(None)
            size_kinds.append("unused")
            continue
        chosen = rng.sample(sources, rng.randint(1, len(sources)))
        kind = _weights_kind(rng, len(chosen))
        tokens = [int(s.sum()) for _, s in chosen]
        weights = _choose_weights(rng, kind, tokens, seq_length, a)
        size, size_kind = _choose_size(rng, tokens, weights, kind, seq_length, a, allow_null=weights is None)
        blends.append([[p for p, _ in chosen], weights])
        sizes_out.append(size)
        kinds.append(kind)
        size_kinds.append(size_kind)
    case.update(
        prefixes=sorted({p for b in blends if b is not None for p in b[0]}),
        weights=None,
        split=None,
        blend_per_split=blends,
        sizes=sizes_out,
    )
    case["meta"].update(mode="blend_per_split", weights_kind=kinds, size_kinds=size_kinds)


def generate_cases(seed: int, count: int, workdir: str) -> list[dict[str, Any]]:
    """``count`` deterministic random cases for ``seed``; corpora are written under ``workdir/corpora``."""
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        case_id = f"s{seed}-c{i:04d}"
        sources = _write_sources(rng, case_id, workdir, rng.choice((1, 1, 2, 2, 3, 4)))
        add_extra = rng.random() >= 0.2
        case: dict[str, Any] = {
            "id": case_id,
            "seq_length": rng.choice(SEQ_LENGTHS),
            "seed": rng.choice((1234, 0, rng.randint(1, 2**31 - 1))),
            "mid_level_dataset_surplus": rng.choice(SURPLUSES),
            "add_extra_token_to_sequence": add_extra,
            "path_to_cache": os.path.join(workdir, "cache", case_id),
            "meta": {"num_sources": len(sources)},
        }
        if rng.random() < 0.3:
            case["renormalize_blend_weights"] = rng.random() < 0.5
        if rng.random() < 0.25:
            _per_split_case(rng, case, sources, int(add_extra))
        else:
            _split_case(rng, case, sources, int(add_extra))
        cases.append(case)
    return cases
