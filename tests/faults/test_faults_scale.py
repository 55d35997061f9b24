"""Fault suite, scale: plans of 10,000 sources are exact (no timing here: bench/sources_bench.py times them against
an older commit). The sources are hard links of one real corpus (10,000 distinct prefixes), blended with equal
weights; and one prefix listed 10,000 times (one row of 10,000 copies).

With N equal weights, NeoX's greedy blend draws round-robin (the error ``(n + 1) / N - drawn_i`` is largest for
the first source with the fewest draws), so 16,000 samples over N = 10,000 sources are 2 draws of the first
6,000 sources and 1 of the other 4,000; each source is asked ``ceil(16000 x 1/N x 1.005) = 2`` samples.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import yaml
from faults_util import cli, corpus, tree

N = 10_000
SAMPLES = 2000 * 8


def _config(folder: str, paths: list[str], name: str) -> str:
    values = {
        "train_data_paths": paths,
        "train_data_weights": [1.0] * len(paths),
        "valid_data_paths": paths[:1],
        "test_data_paths": paths[:1],
        "seq_length": 64,
        "train_micro_batch_size_per_gpu": 8,
        "global_num_gpus": 1,
        "gradient_accumulation_steps": 1,
        "train_iters": 2000,
        "lr_decay_iters": 2000,
        "eval_interval": 1000,
        "eval_iters": 1,
        "seed": 1234,
    }
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        yaml.safe_dump(values, f)
    return path


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = str(tmp_path_factory.mktemp("scale"))
    first = corpus(os.path.join(d, "data"), "src0", 7, 50)
    paths = [first]
    for i in range(1, N):
        paths.append(os.path.join(d, "data", f"src{i}"))
        for ext in (".bin", ".idx"):
            os.link(first + ext, paths[-1] + ext)
    return {
        "dir": d,
        "first": first,
        "many": _config(d, paths, "many.yml"),
        "repeated": _config(d, [first] * N, "repeated.yml"),
    }


def _tokens(prefix: str) -> int:
    from neox_epoch.formats import idx

    return int(np.asarray(idx.sizes_memmap(idx.read_header(prefix)), dtype=np.int64).sum())


def test_10k_distinct_sources_plan_exactly(work: dict[str, str]) -> None:
    from neox_epoch.semantics.neox import normalized_weights_and_num_samples

    before = tree(work["dir"])
    code, out, err = cli(["plan", work["many"], "--json"], timeout=600)
    assert code == 0, err
    plan = json.loads(out)
    train = [s for s in plan["sources"] if s["split"] == "train"]
    assert [s["name"] for s in train] == [f"src{i}" for i in range(N)]
    assert {s["tokens"] for s in train} == {_tokens(work["first"])} and {s["documents"] for s in train} == {50}
    requests = normalized_weights_and_num_samples([1.0] * N, SAMPLES)[1]
    assert [s["samples_requested"] for s in train] == requests == [2] * N
    assert [s["samples_drawn"] for s in train] == [2] * 6000 + [1] * 4000
    assert plan["train_samples"] == SAMPLES == sum(s["samples_drawn"] for s in train)
    assert tree(work["dir"]) == before


def test_one_path_listed_10k_times_plans_exactly(work: dict[str, str]) -> None:
    """The 10,000 copies are one row (copies 10,000): each copy asks 2 samples and NeoX builds each copy's one
    epoch with the same shuffle, so the 16,000 draws are 2 distinct samples (the first of each copy's order)."""
    code, out, err = cli(["plan", work["repeated"], "--json"], timeout=600)
    assert code == 0, err
    plan = json.loads(out)
    (row,) = [s for s in plan["sources"] if s["split"] == "train"]
    per_epoch = (_tokens(work["first"]) - 1) // 64
    assert (row["prefix"], row["copies"], row["samples_per_epoch"]) == (work["first"], N, per_epoch)
    assert (row["samples_requested"], row["samples_built"], row["samples_drawn"]) == (2 * N, N * per_epoch, SAMPLES)
    assert row["samples_distinct"] == 2 and row["passes"] == round(SAMPLES / per_epoch, 6)
    (warning,) = [w for w in plan["warnings"] if w["code"] == "repeated-prefix"]
    assert f"listed {N} times" in warning["text"] and f"2 distinct of {SAMPLES} drawn" in warning["text"]
