"""The cases of audit, resume-check, check-batch and report."""

from __future__ import annotations

import json
import os
from typing import Any

from snapshot.common import AddCase, write_json, write_text
from snapshot.inputs import copy_neox_index_files, deepspeed_tag, mcore_caches, one_source_log


def audit_cases(work: str, case: AddCase, write_random_corpus: Any, env: dict[str, str]) -> str:
    """Audit: NeoX's own index files, a megatron-core cache, with and without consumption. Returns the
    megatron-core cache's note for the index ("built" or why not)."""
    cache = copy_neox_index_files(work)
    case("audit-neox-cache", ["audit", cache, "--json", "--no-progress"])
    headline = [
        f"{cache}/corpus_a_train_0_indexmap_2316ns_64sl_1234s_packedpi_ac_{r}_idx.npy"
        for r in ("doc", "sample", "shuffle")
    ]
    case("audit-neox-headline-consumed", ["audit", *headline, "--consumed", "2304", "--json", "--no-progress"])
    case(
        "audit-neox-headline-manifest",
        [
            "audit",
            *headline,
            "--train-iters",
            "288",
            "--global-batch-size",
            "8",
            "--manifest",
            "out/manifest.csv",
            "--json",
            "--no-progress",
        ],
        ("out/manifest.csv",),
    )
    with open(os.path.join(work, "golden", "c1_three_paths_3_1_2.yml"), encoding="utf-8") as f:
        c1 = json.load(f)
    c1.update(
        {
            k: [p.replace("neox/", f"{cache}/") for p in c1[k]]
            for k in ("train_data_paths", "valid_data_paths", "test_data_paths")
        }
    )
    write_json(os.path.join(work, "audit", "c1.yml"), c1)
    case("audit-neox-config-blend", ["audit", cache, "--config", "audit/c1.yml", "--json", "--no-progress"])
    write_text(os.path.join(work, "audit", "empty", ".keep"), "")
    case("audit-nothing-found", ["audit", "audit/empty", "--json", "--no-progress"])
    why = mcore_caches(work, write_random_corpus, env)
    note = why or "built"
    if why is None:
        case("audit-mcore-one", ["audit", "mcore_one", "--json", "--no-progress"])
        case("audit-mcore-one-consumed", ["audit", "mcore_one", "--consumed", "700", "--json", "--no-progress"])
        case(
            "audit-mcore-blend",
            ["audit", "mcore_blend", "--train-iters", "60", "--global-batch-size", "16", "--json", "--no-progress"],
        )
        case(
            "audit-mcore-blend-data-prefix",
            [
                "audit",
                "mcore_blend",
                "--data-prefix",
                "mc/a",
                "--data-prefix",
                "mc/b",
                "--data-prefix",
                "mc/c",
                "--consumed",
                "1000",
                "--add-extra-token",
                "1",
                "--json",
                "--no-progress",
            ],
        )
    return note


def resume_stock(work: str, case: AddCase, write_random_corpus: Any) -> None:
    """Resume-check (tests/formats/test_checkpoint.py's layouts): a stock NeoX checkpoint and its saved configs."""
    for seed, name in enumerate("abc", start=1):
        write_random_corpus(os.path.join(work, "rc", name), seed, 200 * seed, 20, 180)

    def blend(weights: list[float]) -> dict[str, Any]:
        paths = ["rc/a", "rc/b", "rc/c"]
        return {
            "train_data_paths": paths,
            "valid_data_paths": paths[:1],
            "test_data_paths": paths[:1],
            "train_data_weights": weights,
            "seq_length": 128,
            "train_iters": 240,
            "train_micro_batch_size_per_gpu": 4,
            "global_num_gpus": 1,
        }

    stock = {
        "iteration": 105,
        "dp_world_size": 1,
        "mp_world_size": 1,
        "ds_config": {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1},
    }
    tag = deepspeed_tag(os.path.join(work, "ckpt_stock"), "global_step105", stock)
    write_json(os.path.join(tag, "configs", "run.yml"), blend([2.0, 1.0, 1.0]))
    deepspeed_tag(os.path.join(work, "ckpt_noconf"), "global_step105", stock)
    write_json(os.path.join(work, "rc", "new_121.yml"), blend([1.0, 2.0, 1.0]))
    write_json(os.path.join(work, "rc", "new_211.yml"), blend([2.0, 1.0, 1.0]))
    write_json(
        os.path.join(work, "rc", "new_211_gas2.yml"), {**blend([2.0, 1.0, 1.0]), "gradient_accumulation_steps": 2}
    )
    case("resume-check-blend-changed", ["resume-check", "ckpt_stock", "rc/new_121.yml", "--json"])
    case("resume-check-same-blend", ["resume-check", "ckpt_stock", "rc/new_211.yml", "--json"])
    case("resume-check-batch-doubled", ["resume-check", "ckpt_stock", "rc/new_211_gas2.yml", "--json"])
    case("resume-check-world-2", ["resume-check", "ckpt_stock", "rc/new_211.yml", "--world-size", "2", "--json"])
    case("resume-check-exposure", ["resume-check", "ckpt_stock", "rc/new_121.yml", "--exposure", "--json"])
    case("resume-check-no-saved-configs", ["resume-check", "ckpt_noconf", "rc/new_121.yml", "--json"])


def resume_state(work: str, case: AddCase, write_random_corpus: Any) -> None:
    """A checkpoint with the hooks' state (seq_length 128), resumed with 256; the same state from a run log."""
    saved = {
        "iteration": 10,
        "dp_world_size": 1,
        "ds_config": {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1},
    }
    tag = deepspeed_tag(os.path.join(work, "ckpt_state"), "global_step10", saved)
    state = {
        "blend_samples": [],
        "blend_weights": [],
        "builds": {"train": {"epochs": 1, "num_samples": 80, "samples_built": 90, "separate_final_epoch": False}},
        "consumed_samples": 40,
        "drawn": [],
        "eval_interval": 0,
        "eval_iters": 0,
        "greedy_weights": [],
        "iteration": 10,
        "loader_batch": 4,
        "samples_total": 80,
        "seq_length": 128,
        "train_batch_size": 4,
        "train_iters": 20,
        "valid_samples": 0,
        "version": 1,
    }
    write_json(os.path.join(tag, "neox_epoch_state.json"), state)
    write_random_corpus(os.path.join(work, "rc", "web"), 1, 300, 20, 200)
    write_json(
        os.path.join(work, "rc", "seq256.yml"),
        {
            "data_path": "rc/web",
            "split": "100,0,0",
            "seq_length": 256,
            "train_iters": 20,
            "train_micro_batch_size_per_gpu": 4,
            "global_num_gpus": 1,
        },
    )
    case("resume-check-seq-length-changed", ["resume-check", "ckpt_state", "rc/seq256.yml", "--json"])
    records = [
        {"event": "checkpoint", "iteration": it, "tag": f"global_step{it}", "state": {**state, "iteration": it}}
        for it in (5, 10)
    ]
    write_text(
        os.path.join(work, "rclog", "neox_epoch.jsonl"),
        "".join(json.dumps(r) + "\n" for r in [{"event": "plan"}, *records]),
    )
    case("resume-check-log-last", ["resume-check", "rclog", "rc/seq256.yml", "--json"])
    case(
        "resume-check-log-iteration-5",
        ["resume-check", "rclog/neox_epoch.jsonl", "rc/seq256.yml", "--iteration", "5", "--json"],
    )
    case("resume-check-log-iteration-missing", ["resume-check", "rclog", "rc/seq256.yml", "--iteration", "7", "--json"])


def resume_mcore(work: str, case: AddCase) -> None:
    """Megatron-core with the live counters: a DeepSpeed checkpoint, resumed with another DeepSpeed config."""
    counters = {
        "format": 1,
        "iteration": 100,
        "consumed_samples": 1600,
        "samples": {"web": 771, "code": 829},
        "global_batch_size_planned": 16,
        "dataset_size": 12160,
        "global_batch_size": 16,
    }
    deepspeed_tag(
        os.path.join(work, "ckpt_mcore"),
        "iter_100",
        {"iteration": 100, "consumed_samples": 1600, "neox_epoch_counters": counters},
    )
    write_json(
        os.path.join(work, "rc", "ds_28.json"),
        {"train_batch_size": 28, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 7},
    )
    case("resume-check-mcore-counters", ["resume-check", "ckpt_mcore", "rc/ds_28.json", "--world-size", "2", "--json"])
    case(
        "resume-check-mcore-counters-world-3",
        ["resume-check", "ckpt_mcore", "rc/ds_28.json", "--world-size", "3", "--json"],
    )
    case("resume-check-missing-checkpoint", ["resume-check", "nowhere", "rc/new_121.yml", "--json"])


def check_batch_cases(work: str, case: AddCase) -> None:
    """Check-batch (tests/batch/test_check_batch.py)."""
    write_text(f"{work}/hosts/2x4", "node1 slots=4\nnode2 slots=4\n")
    write_text(f"{work}/hosts/2x8", "node1 slots=8\nnode2 slots=8\n")
    write_json(
        os.path.join(work, "cb", "pp2.json"),
        {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "pipe_parallel_size": 2},
    )
    write_json(
        os.path.join(work, "cb", "tp.json"),
        {
            "train_batch_size": 64,
            "train_micro_batch_size_per_gpu": 2,
            "pipeline": {"stages": 2},
            "tensor_parallel": {"autotp_size": 2},
        },
    )
    write_json(
        os.path.join(work, "cb", "bad.json"),
        {"train_batch_size": 12, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2},
    )
    write_json(os.path.join(work, "cb", "fixme.json"), {"train_batch_size": 32, "gradient_accumulation_steps": 3})
    write_text(f"{work}/cb/a.yml", '{"pipe-parallel-size": 2, "model-parallel-size": 2,}\n')
    write_text(
        f"{work}/cb/b.yml",
        "train-batch-size: 16\ntrain_micro_batch_size_per_gpu: 4\ngradient_accumulation_steps: 2\n"
        "hostfile: hosts/2x4\n",
    )
    write_text(
        f"{work}/cb/neox.yml",
        "train_batch_size: 32\ntrain_micro_batch_size_per_gpu: 4\ngradient_accumulation_steps: 2\n"
        "hostfile: hosts/2x8\ninclude: node1:0,1\nnum_gpus: 4\n",
    )
    case("check-batch-pp2-hostfile", ["check-batch", "cb/pp2.json", "-H", "hosts/2x4", "--json"])
    case("check-batch-tp-2x8", ["check-batch", "cb/tp.json", "-H", "hosts/2x8", "--json"])
    case("check-batch-inconsistent", ["check-batch", "cb/bad.json", "--num_gpus", "2", "--json"])
    case("check-batch-neox-merge", ["check-batch", "cb/a.yml", "cb/b.yml", "--json"])
    case(
        "check-batch-include-exclude",
        ["check-batch", "cb/pp2.json", "-H", "hosts/2x8", "-i", "node1@node2:0,1", "-e", "node1:7", "--json"],
    )
    case(
        "check-batch-fix-json",
        ["check-batch", "cb/fixme.json", "--num_gpus", "2", "--fix", "out/fixed.json", "--json"],
        ("out/fixed.json",),
    )
    case("check-batch-fix-neox", ["check-batch", "cb/neox.yml", "--fix", "out/fixed.yml", "--json"], ("out/fixed.yml",))
    case(
        "check-batch-shipped-config",
        ["check-batch", "configs/blend_per_source_epochs.yml", "-H", "hosts/one", "--json"],
    )


def report_cases(work: str, case: AddCase) -> None:
    """Report: run logs in the hooks' format."""
    write_text(os.path.join(work, "runs", "one", "neox_epoch.jsonl"), one_source_log("rc/web"))
    write_text(os.path.join(work, "runs", "stop", "neox_epoch.jsonl"), one_source_log("rc/web", stop=100))
    case("report-one", ["report", "runs/one", "--json"])
    case("report-one-file", ["report", "runs/one/neox_epoch.jsonl", "--json"])
    case("report-stopped-early", ["report", "runs/stop", "--json"])
    case("report-launch-dirs", ["report", "runs", "--json", "--title", "two launches"])
    case("report-missing", ["report", "runs/none", "--json"])
    case("resume-check-run-log", ["resume-check", "runs/one", "rc/seq256.yml", "--iteration", "80", "--json"])
