"""Fault suite, validation: inputs that planned silently wrong or blamed the wrong key are exit 2 with one line
naming the key or file the user wrote. An .idx whose pointers disagree with its sizes (it reported 66,467 tokens
where the .bin holds 54,609), seeds GPT-NeoX and Megatron-LM refuse at start-up (their ``_set_random_seed``: not
> 0; numpy's seeding: not below 2^32), ``epochs: .inf`` or an unknown source in the neox_epoch block (it blamed
``--source-epochs``). Each case asserts the exit code, the one line and that no input changed (hash and mode).
"""

from __future__ import annotations

import json
import os
import shutil
import struct

import pytest
import yaml
from faults_util import cli, corpus, plan_config, refused, tree


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = str(tmp_path_factory.mktemp("validation"))
    prefix = corpus(os.path.join(d, "data"))
    return {"dir": d, "prefix": prefix, "config": plan_config(d, prefix)}


def _config(base: dict[str, str], folder: str, **changes: object) -> str:
    with open(base["config"]) as f:
        values = yaml.safe_load(f)
    for key, value in changes.items():
        if key == "block":
            values["neox_epoch"] = value
        else:
            values[key] = value
    path = os.path.join(folder, "run.yml")
    with open(path, "w") as f:
        yaml.safe_dump(values, f)
    return path


def test_an_index_whose_pointers_disagree_with_its_sizes(base: dict[str, str], tmp_path) -> None:  # type: ignore[no-untyped-def]
    """sizes[0] raised by 5 tokens: the pointers (and the .bin) still say the old length; plan refuses the index as
    the deep check (idx.validate_arrays) does, naming the first pointer that does not follow."""
    data = tmp_path / "data"
    shutil.copytree(os.path.dirname(base["prefix"]), data)
    prefix = str(data / os.path.basename(base["prefix"]))
    with open(prefix + ".idx", "r+b") as f:
        f.seek(34)
        (size,) = struct.unpack("<i", f.read(4))
        f.seek(34)
        f.write(struct.pack("<i", size + 5))
    config = _config(
        base, str(tmp_path), train_data_paths=[prefix], valid_data_paths=[prefix], test_data_paths=[prefix]
    )
    before = tree(str(tmp_path))
    refused(
        cli(["plan", config]),
        "plan",
        f"{prefix}.idx: pointers[1] = {2 * size}, expected {2 * size + 10}",
        "the index is damaged: re-tokenize",
    )
    assert tree(str(tmp_path)) == before


@pytest.mark.parametrize(
    "seed,needles",
    [
        (-1, ("seed: -1; GPT-NeoX refuses it at start-up", "'Seed (-1) should be a positive integer.'")),
        (0, ("seed: 0; GPT-NeoX refuses it", "expected a whole number in [1, 4294967295]")),
        (1 << 32, ("seed: 4294967296; GPT-NeoX seeds numpy with it", "'Seed must be between 0 and 2**32 - 1'")),
    ],
)
def test_a_seed_neox_refuses(base: dict[str, str], tmp_path, seed: int, needles: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    config = _config(base, str(tmp_path), seed=seed)
    before = tree(str(tmp_path))
    line = refused(cli(["plan", config]), "plan", *needles)
    assert line.startswith(f"neox-epoch plan: error: {config}: seed: ")
    assert tree(str(tmp_path)) == before


def test_the_largest_seed_numpy_takes_plans(base: dict[str, str], tmp_path) -> None:  # type: ignore[no-untyped-def]
    code, _, err = cli(["plan", _config(base, str(tmp_path), seed=(1 << 32) - 1)])
    assert code == 0, err


MEGATRON = [
    "pretrain_gpt.py",
    "--num-layers",
    "2",
    "--hidden-size",
    "64",
    "--num-attention-heads",
    "4",
    "--seq-length",
    "32",
    "--max-position-embeddings",
    "32",
    "--micro-batch-size",
    "2",
    "--global-batch-size",
    "4",
    "--train-iters",
    "10",
    "--lr",
    "0.001",
    "--eval-interval",
    "5",
    "--eval-iters",
    "1",
    "--split",
    "90,5,5",
]


@pytest.mark.parametrize(
    "seed,needles",
    [
        ("0", ("--seed: 0; Megatron-LM refuses it at start-up", "'Seed (0) should be a positive integer.'")),
        (
            "4294967296",
            ("--seed: 4294967296; Megatron-LM seeds numpy with it", "'Seed must be between 0 and 2**32 - 1'"),
        ),
    ],
)
def test_a_seed_megatron_lm_refuses(base: dict[str, str], seed: str, needles: tuple[str, ...]) -> None:
    before = tree(base["dir"])
    refused(cli(["plan", *MEGATRON, "--data-path", base["prefix"], "--seed", seed]), "plan", *needles)
    assert tree(base["dir"]) == before
    code, _, err = cli(["plan", *MEGATRON, "--data-path", base["prefix"], "--seed", "7"])
    assert code == 0, err


@pytest.mark.parametrize(
    "block,needles",
    [
        (
            {"epochs": float("inf")},
            (
                "neox_epoch.epochs: inf; expected the passes over every train source",
                "fix it in the config's neox_epoch block",
            ),
        ),
        ({"epochs": {"small": 0}}, ("neox_epoch.epochs.small: expected a value > 0, found 0",)),
        ({"epochs": {"nosuch": 1}}, ("neox_epoch.epochs.nosuch: unknown train source 'nosuch'", "['small']")),
    ],
)
def test_the_block_s_epochs_are_named_as_written(
    base: dict[str, str],
    tmp_path,
    block: dict,  # type: ignore[no-untyped-def]
    needles: tuple[str, ...],
) -> None:
    config = _config(base, str(tmp_path), block=block)
    before = tree(str(tmp_path))
    line = refused(cli(["plan", config]), "plan", *needles)
    assert "--source-epochs" not in line
    assert tree(str(tmp_path)) == before


def test_a_one_token_source_has_its_passes_counted_in_tokens(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A one-token source is shorter than one sample (samples_per_epoch 0) yet drawn 400 samples: NeoX builds
    12,865 epochs for its 402 requested; the plan's passes are 400 x 32 / 1 = 12,800 (it said 0.0)."""
    from neox_epoch.formats.corpus import write_sized_corpus

    write_sized_corpus(str(tmp_path / "big"), [500] * 20)
    write_sized_corpus(str(tmp_path / "one"), [1])
    paths = [str(tmp_path / "big"), str(tmp_path / "one")]
    values = {
        "train_data_paths": paths,
        "train_data_weights": [1.0, 1.0],
        "valid_data_paths": paths[:1],
        "test_data_paths": paths[:1],
        "seq_length": 32,
        "train_micro_batch_size_per_gpu": 4,
        "global_num_gpus": 1,
        "gradient_accumulation_steps": 1,
        "train_iters": 200,
        "lr_decay_iters": 200,
        "eval_interval": 1000,
        "eval_iters": 1,
    }
    (tmp_path / "one.yml").write_text(yaml.safe_dump(values))
    code, out, err = cli(["plan", str(tmp_path / "one.yml"), "--json"])
    assert code == 0, err
    rows = {s["name"]: s for s in json.loads(out)["sources"] if s["split"] == "train"}
    one, big = rows["one"], rows["big"]
    assert (one["samples_per_epoch"], one["samples_requested"], one["epochs_built"], one["samples_drawn"]) == (
        0,
        402,
        12865,
        400,
    )
    assert one["passes"] == 400 * 32 / 1 == 12800.0
    assert (big["samples_per_epoch"], big["samples_drawn"], big["passes"]) == (312, 400, round(400 / 312, 6))
