"""The cases: every input written into the work directory and the command lines run on them."""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

from snapshot.common import REPO, _write, _write_json, corpus_writers
from snapshot.inputs import _copy_neox_index_files, _deepspeed_tag, _golden_configs, _mcore_caches, _one_source_log


def build_inputs(work: str, env: dict[str, str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Write every input into ``work`` and return (cases, notes). A case: name, argv (after ``neox_epoch.cli``),
    files (paths relative to ``work`` the command writes, recorded after it ran), after (cases it reads)."""
    write_random_corpus, write_sized_corpus, write_demo_corpus = corpus_writers()
    notes: dict[str, Any] = {}
    cases: list[dict[str, Any]] = []

    def case(name: str, argv: list[str], files: tuple[str, ...] = ()) -> None:
        cases.append({"name": name, "argv": argv, "files": list(files)})

    # --- plan: the shipped configs on the demo corpus (they name demo/data/... relative to the working directory)
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
    _write(f"{work}/hosts/two", "localhost slots=2\n")
    case("plan-world-size-2-refused", ["plan", "configs/one_source_one_epoch.yml", "--world-size", "2", "--json"])
    _write(f"{work}/hosts/one", "localhost slots=1\n")
    case("plan-hostfile-refused", ["plan", "configs/data_path_split.yml", "-H", "hosts/two", "--json"])
    case("plan-hostfile", ["plan", "configs/data_path_split.yml", "-H", "hosts/one", "--json"])

    # --- plan: the NeoX configs of the golden fixture's cases (normal, and exact mode for the accepted ones)
    golden = _golden_configs(work, write_random_corpus)
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

    # --- plan: Megatron-LM flags and pasted command lines (tests/test_plan_cli.py, tests/test_pasted_line.py)
    web, code = "demo/data/web_text_document", "demo/data/code_text_document"
    model = ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--lr", "3e-4"]
    case(
        "plan-megatron-flags",
        [
            "plan",
            "--framework-version",
            "0.16.1",
            "--data-path",
            web,
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
        web,
        "1",
        code,
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
    pasted = [
        "torchrun",
        "--nproc-per-node",
        "2",
        "--nnodes",
        "2",
        "pretrain_gpt.py",
        "--data-path",
        "0.7",
        web,
        "0.3",
        code,
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
        *model,
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
            web,
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
            *model,
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
            web,
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
            web,
            "1",
            code,
            "--valid-data-path",
            web,
            "--test-data-path",
            code,
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
            *model,
            "--json",
        ],
    )
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
    _write(
        f"{work}/bad/train_iter.yml",
        f'{{"seq_length": 512, "train_batch_size": 16, "data_path": "{web}", "train_iter": 5}}\n',
    )
    case("plan-bad-config-key", ["plan", "bad/train_iter.yml", "--json"])

    # --- audit: NeoX's own index files, a megatron-core cache, with and without consumption
    cache = _copy_neox_index_files(work)
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
    _write_json(os.path.join(work, "audit", "c1.yml"), c1)
    case("audit-neox-config-blend", ["audit", cache, "--config", "audit/c1.yml", "--json", "--no-progress"])
    _write(os.path.join(work, "audit", "empty", ".keep"), "")
    case("audit-nothing-found", ["audit", "audit/empty", "--json", "--no-progress"])
    why = _mcore_caches(work, write_random_corpus, env)
    notes["megatron_core_cache"] = why or "built"
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

    # --- resume-check (tests/test_checkpoint.py's layouts)
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
    tag = _deepspeed_tag(os.path.join(work, "ckpt_stock"), "global_step105", stock)
    _write_json(os.path.join(tag, "configs", "run.yml"), blend([2.0, 1.0, 1.0]))
    _deepspeed_tag(os.path.join(work, "ckpt_noconf"), "global_step105", stock)
    _write_json(os.path.join(work, "rc", "new_121.yml"), blend([1.0, 2.0, 1.0]))
    _write_json(os.path.join(work, "rc", "new_211.yml"), blend([2.0, 1.0, 1.0]))
    _write_json(
        os.path.join(work, "rc", "new_211_gas2.yml"), {**blend([2.0, 1.0, 1.0]), "gradient_accumulation_steps": 2}
    )
    case("resume-check-blend-changed", ["resume-check", "ckpt_stock", "rc/new_121.yml", "--json"])
    case("resume-check-same-blend", ["resume-check", "ckpt_stock", "rc/new_211.yml", "--json"])
    case("resume-check-batch-doubled", ["resume-check", "ckpt_stock", "rc/new_211_gas2.yml", "--json"])
    case("resume-check-world-2", ["resume-check", "ckpt_stock", "rc/new_211.yml", "--world-size", "2", "--json"])
    case("resume-check-exposure", ["resume-check", "ckpt_stock", "rc/new_121.yml", "--exposure", "--json"])
    case("resume-check-no-saved-configs", ["resume-check", "ckpt_noconf", "rc/new_121.yml", "--json"])
    # a checkpoint with the hooks' state (seq_length 128), resumed with 256; the same state from a run log
    saved = {
        "iteration": 10,
        "dp_world_size": 1,
        "ds_config": {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1},
    }
    tag = _deepspeed_tag(os.path.join(work, "ckpt_state"), "global_step10", saved)
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
    _write_json(os.path.join(tag, "neox_epoch_state.json"), state)
    write_random_corpus(os.path.join(work, "rc", "web"), 1, 300, 20, 200)
    _write_json(
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
    _write(
        os.path.join(work, "rclog", "neox_epoch.jsonl"),
        "".join(json.dumps(r) + "\n" for r in [{"event": "plan"}, *records]),
    )
    case("resume-check-log-last", ["resume-check", "rclog", "rc/seq256.yml", "--json"])
    case(
        "resume-check-log-iteration-5",
        ["resume-check", "rclog/neox_epoch.jsonl", "rc/seq256.yml", "--iteration", "5", "--json"],
    )
    case("resume-check-log-iteration-missing", ["resume-check", "rclog", "rc/seq256.yml", "--iteration", "7", "--json"])
    # megatron-core with the live counters: a DeepSpeed checkpoint, resumed with another DeepSpeed config
    counters = {
        "format": 1,
        "iteration": 100,
        "consumed_samples": 1600,
        "samples": {"web": 771, "code": 829},
        "global_batch_size_planned": 16,
        "dataset_size": 12160,
        "global_batch_size": 16,
    }
    _deepspeed_tag(
        os.path.join(work, "ckpt_mcore"),
        "iter_100",
        {"iteration": 100, "consumed_samples": 1600, "neox_epoch_counters": counters},
    )
    _write_json(
        os.path.join(work, "rc", "ds_28.json"),
        {"train_batch_size": 28, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 7},
    )
    case("resume-check-mcore-counters", ["resume-check", "ckpt_mcore", "rc/ds_28.json", "--world-size", "2", "--json"])
    case(
        "resume-check-mcore-counters-world-3",
        ["resume-check", "ckpt_mcore", "rc/ds_28.json", "--world-size", "3", "--json"],
    )
    case("resume-check-missing-checkpoint", ["resume-check", "nowhere", "rc/new_121.yml", "--json"])

    # --- check-batch (tests/test_check_batch.py)
    _write(f"{work}/hosts/2x4", "node1 slots=4\nnode2 slots=4\n")
    _write(f"{work}/hosts/2x8", "node1 slots=8\nnode2 slots=8\n")
    _write_json(
        os.path.join(work, "cb", "pp2.json"),
        {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "pipe_parallel_size": 2},
    )
    _write_json(
        os.path.join(work, "cb", "tp.json"),
        {
            "train_batch_size": 64,
            "train_micro_batch_size_per_gpu": 2,
            "pipeline": {"stages": 2},
            "tensor_parallel": {"autotp_size": 2},
        },
    )
    _write_json(
        os.path.join(work, "cb", "bad.json"),
        {"train_batch_size": 12, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2},
    )
    _write_json(os.path.join(work, "cb", "fixme.json"), {"train_batch_size": 32, "gradient_accumulation_steps": 3})
    _write(f"{work}/cb/a.yml", '{"pipe-parallel-size": 2, "model-parallel-size": 2,}\n')
    _write(
        f"{work}/cb/b.yml",
        "train-batch-size: 16\ntrain_micro_batch_size_per_gpu: 4\ngradient_accumulation_steps: 2\n"
        "hostfile: hosts/2x4\n",
    )
    _write(
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

    # --- report: run logs in the hooks' format
    _write(os.path.join(work, "runs", "one", "neox_epoch.jsonl"), _one_source_log("rc/web"))
    _write(os.path.join(work, "runs", "stop", "neox_epoch.jsonl"), _one_source_log("rc/web", stop=100))
    case("report-one", ["report", "runs/one", "--json"])
    case("report-one-file", ["report", "runs/one/neox_epoch.jsonl", "--json"])
    case("report-stopped-early", ["report", "runs/stop", "--json"])
    case("report-launch-dirs", ["report", "runs", "--json", "--title", "two launches"])
    case("report-missing", ["report", "runs/none", "--json"])
    case("resume-check-run-log", ["resume-check", "runs/one", "rc/seq256.yml", "--iteration", "80", "--json"])
    return cases, notes


# ---------------------------------------------------------------------------------------------------------
# running and recording
