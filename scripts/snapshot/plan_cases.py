"""The plan cases: the shipped configs, the golden fixture's NeoX configs, Megatron-LM flags and pasted command
lines, bad input."""

from __future__ import annotations

import os
import shutil
from typing import Any

from snapshot.common import REPO, AddCase, write_text
from snapshot.inputs import golden_configs

#: the demo corpus's two sources (relative to the working directory) and a small model's Megatron-LM flags
WEB, CODE = "demo/data/web_text_document", "demo/data/code_text_document"
MODEL = ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--lr", "3e-4"]


def plan_shipped(work: str, case: AddCase, write_demo_corpus: Any) -> None:
    """Plan: the shipped configs on the demo corpus (they name demo/data/... relative to the working directory)."""
    write_demo_corpus(os.path.join(work, "demo", "data"))
    shutil.copytree(os.path.join(REPO, "configs"), os.path.join(work, "configs"))
    shipped = sorted(f[:-4] for f in os.listdir(os.path.join(work, "configs")) if f.endswith(".yml"))
    os.makedirs(os.path.join(work, "out"), exist_ok=True)
    for c in shipped:
        cfg = f"configs/{c}.yml"
        case(f"plan-{c}", ["plan", cfg, "--json"])
        case(f"plan-{c}-epochs2", ["plan", cfg, "--epochs", "2", "--json"])
        case(f"plan-{c}-epochs0.5", ["plan", cfg, "--epochs", "0.5", "--json"])
        case(
            f"plan-{c}-write-config",
            ["plan", cfg, "--json", "--write-config", f"out/{c}.overlay.yml"],
            (f"out/{c}.overlay.yml",),
        )
        case(
            f"plan-{c}-write-config-full",
            ["plan", cfg, "--epochs", "1", "--json", "--write-config", f"out/{c}.full.yml", "--full"],
            (f"out/{c}.full.yml",),
        )
    case(
        "plan-blend-source-epochs",
        [
            "plan",
            "configs/blend_per_source_epochs.yml",
            "--source-epochs",
            "web_text_document=1",
            "code_text_document=3",
            "books_text_document=1",
            "--json",
        ],
    )
    case("plan-conf-dir", ["plan", "-d", "configs", "one_source_one_epoch", "--json"])
    write_text(f"{work}/hosts/two", "localhost slots=2\n")
    case("plan-world-size-2-refused", ["plan", "configs/one_source_one_epoch.yml", "--world-size", "2", "--json"])
    write_text(f"{work}/hosts/one", "localhost slots=1\n")
    case("plan-hostfile-refused", ["plan", "configs/data_path_split.yml", "-H", "hosts/two", "--json"])
    case("plan-hostfile", ["plan", "configs/data_path_split.yml", "-H", "hosts/one", "--json"])


def plan_golden(work: str, case: AddCase, write_random_corpus: Any) -> None:
    """Plan: the NeoX configs of the golden fixture's cases (normal, and exact mode for the accepted ones)."""
    golden = golden_configs(work, write_random_corpus)
    for name in golden:
        case(f"plan-golden-{name}", ["plan", f"golden/{name}.yml", "--json"])
        if name[0] in "abc" or name in ("e3_two_paths_epochs1_gas2", "d1_random_paths", "d6_random_split"):
            case(f"plan-golden-{name}-exact", ["plan", f"golden/{name}.yml", "--epochs", "1", "--json"])
    case(
        "plan-golden-c1-write-config",
        [
            "plan",
            "golden/c1_three_paths_3_1_2.yml",
            "--epochs",
            "1.5",
            "--json",
            "--write-config",
            "out/c1.overlay.yml",
        ],
        ("out/c1.overlay.yml",),
    )


def plan_megatron(work: str, case: AddCase) -> None:
    """Plan: Megatron-LM flags (tests/plan/test_plan_cli.py)."""
    case(
        "plan-megatron-flags",
        [
            "plan",
            "--framework-version",
            "0.16.1",
            "--data-path",
            WEB,
            "--split",
            "98,1,1",
            "--seq-length",
            "512",
            "--global-batch-size",
            "16",
            "--micro-batch-size",
            "4",
            "--world-size",
            "4",
            "--num-layers",
            "2",
            "--lr",
            "3e-4",
            "--train-iters",
            "50",
            "--eval-iters",
            "1",
            "--eval-interval",
            "25",
            "--json",
        ],
    )
    exact = [
        "plan",
        "--framework-version",
        "0.16.1",
        "--data-path",
        "1",
        WEB,
        "1",
        CODE,
        "--split",
        "100,0,0",
        "--seq-length",
        "512",
        "--global-batch-size",
        "16",
        "--micro-batch-size",
        "8",
        "--nproc-per-node",
        "2",
        "--train-samples",
        "1000",
        "--eval-interval",
        "25",
        "--lr",
        "3e-4",
    ]
    case("plan-megatron-train-samples", [*exact, "--json"])
    case(
        "plan-megatron-source-epochs",
        [*exact, "--source-epochs", "web_text_document=1", "code_text_document=2", "--json"],
    )


def plan_pasted(work: str, case: AddCase) -> None:
    """Plan: pasted Megatron-LM command lines (tests/formats/test_pasted_line.py)."""
    pasted = [
        "torchrun",
        "--nproc-per-node",
        "2",
        "--nnodes",
        "2",
        "pretrain_gpt.py",
        "--data-path",
        "0.7",
        WEB,
        "0.3",
        CODE,
        "--split",
        "98,1,1",
        "--seq-length",
        "256",
        "--micro-batch-size",
        "2",
        "--global-batch-size",
        "32",
        "--train-iters",
        "400",
        "--eval-interval",
        "100",
        *MODEL,
    ]
    case("plan-pasted", ["plan", "--framework-version", "0.16.1", *pasted, "--json"])
    case("plan-pasted-epochs1", ["plan", "--framework-version", "0.16.1", "--epochs", "1", *pasted, "--json"])
    case(
        "plan-pasted-source-epochs-before",
        [
            "plan",
            "--source-epochs",
            "web_text_document=1",
            "code_text_document=2",
            "--framework-version",
            "0.16.1",
            *pasted,
            "--json",
        ],
    )
    case(
        "plan-pasted-world-size-wins", ["plan", "--framework-version", "0.16.1", "--world-size", "8", *pasted, "--json"]
    )
    case(
        "plan-pasted-legacy",
        [
            "plan",
            "--framework",
            "megatron-legacy",
            "--framework-version",
            "0.16.1",
            "python",
            "pretrain_gpt.py",
            "--data-path",
            WEB,
            "--split",
            "98,1,1",
            "--seq-length",
            "256",
            "--micro-batch-size",
            "2",
            "--global-batch-size",
            "8",
            "--train-iters",
            "100",
            "--eval-interval",
            "50",
            *MODEL,
            "--json",
        ],
    )
    case(
        "plan-legacy-flags",
        [
            "plan",
            "--framework",
            "megatron-legacy",
            "--data-path",
            WEB,
            "--split",
            "98,1,1",
            "--seq-length",
            "256",
            "--global-batch-size",
            "8",
            "--train-iters",
            "100",
            "--eval-interval",
            "50",
            "--json",
        ],
    )
    case(
        "plan-pasted-unknown-flag",
        ["plan", "--framework-version", "0.16.1", *pasted, "--micro-batch-sise", "4", "--json"],
    )
    case(
        "plan-megatron-split-blends",
        [
            "plan",
            "--framework-version",
            "0.16.1",
            "--train-data-path",
            "2",
            WEB,
            "1",
            CODE,
            "--valid-data-path",
            WEB,
            "--test-data-path",
            CODE,
            "--seq-length",
            "128",
            "--micro-batch-size",
            "4",
            "--global-batch-size",
            "16",
            "--train-iters",
            "200",
            "--eval-interval",
            "50",
            "--eval-iters",
            "2",
            *MODEL,
            "--json",
        ],
    )


def plan_sized_and_bad(work: str, case: AddCase, write_sized_corpus: Any) -> None:
    """Plan: a sized corpus, a bad config key."""
    write_sized_corpus(os.path.join(work, "sized", "small"), [50] * 20)
    case(
        "plan-megatron-empty-split",
        [
            "plan",
            "--framework-version",
            "0.16.1",
            "--data-path",
            "sized/small",
            "--split",
            "98,1,1",
            "--seq-length",
            "8",
            "--global-batch-size",
            "2",
            "--micro-batch-size",
            "1",
            "--lr",
            "1e-4",
            "--eval-interval",
            "10",
            "--train-iters",
            "3",
            "--json",
        ],
    )
    write_text(
        f"{work}/bad/train_iter.yml",
        f'{{"seq_length": 512, "train_batch_size": 16, "data_path": "{WEB}", "train_iter": 5}}\n',
    )
    case("plan-bad-config-key", ["plan", "bad/train_iter.yml", "--json"])
