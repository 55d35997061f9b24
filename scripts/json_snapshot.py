"""Snapshot the JSON every neox-epoch command prints on deterministic corpora, and compare two snapshots.

Written to prove a restructure of the package changes no behaviour: run it on the code before, run it on the
code after, compare; every case must be identical.

    python scripts/json_snapshot.py OUT_DIR                 # write OUT_DIR/<case>.json and OUT_DIR/index.json
    python scripts/json_snapshot.py --compare A_DIR B_DIR   # identical/different per case; exit 1 if any differ

Only the command-line surface is exercised: each case runs ``python -m neox_epoch.cli ...`` in a subprocess
(the interpreter running this script, with this checkout's root first on PYTHONPATH) and records its exit code,
its stdout (exactly as printed), its stderr (kept apart from stdout: the one-line errors and the --fix notes)
and the contents of any file the command writes (``--write-config``, ``--fix``, ``--manifest``). All of it is
compared. The package itself is imported only in
:func:`corpus_writers` (the tokenized-corpus writers, looked up where they live before and after the
restructure). Inputs the package does not write are written here from plain data: NeoX configs (the shipped
``configs/*.yml`` and the configs of ``tests/fixtures/neox/neox_golden.json``'s cases), DeepSpeed/NeoX batch
configs and hostfiles, checkpoints in DeepSpeed's and Megatron-LM's layouts (zip-format pickles of plain
dicts, as ``tests/formats/test_checkpoint.py`` writes them), run logs (``neox_epoch.jsonl``) and a megatron-core
index cache built by the installed megatron-core's own BlendedMegatronDatasetBuilder (skipped, and said so in
the index, when megatron-core or torch is not importable).

Paths: the corpora, configs and caches are built in a fresh temporary directory; every command runs with that
directory as its working directory and names its inputs by relative paths wherever the command allows it
(megatron-core's cache file names hash the dataset paths they were built with, so these are relative too).
Where an absolute path still shows in the captured text (stdout, stderr, written files), the temporary
directory is replaced by ``<TMP>`` and this checkout's root by ``<REPO>``; nothing else is rewritten.

Nondeterminism: two runs on the same code (two temporary directories, cases run concurrently) gave
byte-identical files for every case: no timings or timestamps reach the JSON of these cases (the run logs given
to ``report`` carry fixed "time" values), so no field is normalised by name. ``NORMALISED_FIELDS`` below lists
any that ever must be, and the index records it. Not random but machine-dependent, so compare snapshots taken
on the same machine and environment: check-batch's ``deepspeed_version`` (the installed DeepSpeed), the
megatron-core version the plan defaults to, and the GPU count NeoX and the launcher see where a case gives no
hostfile or world size.

Commands covered: plan, audit, resume-check, check-batch and report, each with ``--json``. Not covered:
``demo`` (prints tables, no --json; its corpus writer is used here) and ``launch`` (runs GPT-NeoX).

The environment of each command is this one's minus the variables DeepSpeed's launcher reads for the world
(DLTS_HOSTFILE, LOCAL_SIZE, CUDA_VISIBLE_DEVICES, MASTER_ADDR), so check-batch and plan count the same world on
every machine; a /job/hostfile on the machine would still be read by cases without a hostfile (reported in the
index as ``job_hostfile_exists``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import difflib
import io
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(REPO, "tests", "fixtures", "neox", "neox_golden.json")
NEOX_CACHE = os.path.join(REPO, "tests", "fixtures", "neox", "neox_cache")
LAUNCH_ENV = ("DLTS_HOSTFILE", "LOCAL_SIZE", "CUDA_VISIBLE_DEVICES", "MASTER_ADDR")
#: fields found to vary between two runs on the same code: none so far (see the module docstring)
NORMALISED_FIELDS: tuple[str, ...] = ()
INDEX = "index.json"


def corpus_writers() -> tuple[Any, Any, Any]:
    """(write_random_corpus, write_sized_corpus, write_demo_corpus): the only imports of the package here."""
    import importlib

    sys.path.insert(0, REPO)
    for name in ("neox_epoch.corpus", "neox_epoch.formats.corpus"):
        try:
            corpus = importlib.import_module(name)
            break
        except ImportError:
            continue
    else:
        raise SystemExit("json_snapshot: no neox_epoch.corpus or neox_epoch.formats.corpus to write corpora with")
    demo = importlib.import_module("neox_epoch.demo")
    return corpus.write_random_corpus, corpus.write_sized_corpus, demo.write_demo_corpus


# ---------------------------------------------------------------------------------------------------------
# inputs


def _write(path: str, text: str) -> str:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def _write_json(path: str, obj: Any) -> str:
    return _write(path, json.dumps(obj, indent=1, sort_keys=True) + "\n")


def _zip_pickle(obj: Any) -> bytes:
    """A torch.save zip-format file holding ``obj`` (plain Python objects only), as tests/formats/test_checkpoint.py."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps(obj, protocol=2))
    return buf.getvalue()


def _deepspeed_tag(root: str, tag: str, saved: dict[str, Any]) -> str:
    os.makedirs(os.path.join(root, tag), exist_ok=True)
    _write(os.path.join(root, "latest"), tag)
    with open(os.path.join(root, tag, "mp_rank_00_model_states.pt"), "wb") as f:
        f.write(_zip_pickle(saved))
    return os.path.join(root, tag)


def _golden_configs(work: str, write_random_corpus: Any) -> list[str]:
    """One NeoX config per case of tests/fixtures/neox/neox_golden.json (accepted and refused cases), its corpus
    labels pointing at neox/<label>: the copied fixture corpora, the others regenerated from their recorded
    seeds. Returns the case names in order."""
    with open(GOLDEN, encoding="utf-8") as f:
        golden = json.load(f)
    data = os.path.join(work, "neox")
    os.makedirs(data, exist_ok=True)
    for label, c in sorted(golden["corpora"].items()):
        if c.get("copied"):
            for ext in (".bin", ".idx"):
                shutil.copyfile(os.path.join(NEOX_CACHE, label + ext), os.path.join(data, label + ext))
        else:
            write_random_corpus(os.path.join(data, label), c["seed"], c["num_documents"], c["min_len"], c["max_len"])

    def path(label: str) -> str:
        return f"neox/{label}"

    names = []
    cases = [*sorted(golden["cases"].items()), *sorted(golden.get("refused", {}).items())]
    for name, case in cases:
        params = {k: v for k, v in case["params"].items() if v is not None}
        if "data_path" in params:
            params["data_path"] = path(params["data_path"])
        for key in ("train_data_paths", "valid_data_paths", "test_data_paths"):
            if key in params:
                params[key] = [path(p) for p in params[key]]
        _write_json(os.path.join(work, "golden", f"{name}.yml"), params)
        names.append(name)
    return names


def _copy_neox_index_files(work: str) -> str:
    """The index files real GPT-NeoX wrote (tests/fixtures/neox/neox_cache), beside their corpora."""
    dest = os.path.join(work, "neox_cache")
    shutil.copytree(NEOX_CACHE, dest)
    return "neox_cache"


MCORE_BUILD = r"""
import dataclasses, json, os, socket, sys
import torch.distributed as dist
from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

def null_tokenizer():
    try:
        from megatron.core.tokenizers.text.libraries.null_tokenizer import NullTokenizer
        return NullTokenizer(vocab_size=65536)
    except ImportError:
        from megatron.training.tokenizer.tokenizer import _NullTokenizer
        return _NullTokenizer(65535)

with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
os.environ["MASTER_ADDR"] = "127.0.0.1"
os.environ["MASTER_PORT"] = str(port)
dist.init_process_group("gloo", rank=0, world_size=1)
names = {f.name for f in dataclasses.fields(GPTDatasetConfig)}
for job in json.loads(sys.argv[1]):
    kw = dict(random_seed=job["seed"], sequence_length=job["seq"], blend=(job["prefixes"], job["weights"]),
              split=job["split"], path_to_cache=job["cache"], tokenizer=null_tokenizer(), reset_position_ids=False,
              reset_attention_mask=False, eod_mask_loss=False, add_extra_token_to_sequence=True)
    cfg = GPTDatasetConfig(**{k: v for k, v in kw.items() if k in names})
    BlendedMegatronDatasetBuilder(GPTDataset, job["sizes"], lambda: True, cfg).build()
print("built")
"""

#: megatron-core caches: one direct dataset, one three-source blend (relative paths: see the docstring)
MCORE_JOBS = [
    {
        "cache": "mcore_one",
        "prefixes": ["mc/one"],
        "weights": None,
        "split": "90,5,5",
        "sizes": [900, 20, 10],
        "seq": 32,
        "seed": 1234,
    },
    {
        "cache": "mcore_blend",
        "prefixes": ["mc/a", "mc/b", "mc/c"],
        "weights": [3.0, 1.0, 2.0],
        "split": "80,10,10",
        "sizes": [1200, 30, 10],
        "seq": 16,
        "seed": 77,
    },
]


def _mcore_caches(work: str, write_random_corpus: Any, env: dict[str, str]) -> str | None:
    """Build MCORE_JOBS with the installed megatron-core; None when it builds, else why not."""
    write_random_corpus(os.path.join(work, "mc", "one"), 31, 120, 5, 250)
    for seed, name in enumerate("abc", start=41):
        write_random_corpus(os.path.join(work, "mc", name), seed, 60 + 20 * (seed - 41), 5, 200)
    r = subprocess.run(
        [sys.executable, "-c", MCORE_BUILD, json.dumps(MCORE_JOBS)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if r.returncode != 0 or "built" not in r.stdout:
        return "megatron-core cache not built: " + (r.stderr.strip().splitlines() or ["(no stderr)"])[-1]
    return None


def _one_source_log(prefix: str, stop: int | None = None) -> str:
    """A run log of one source (NeoX data_path, 2 passes, epochs separated) in the hooks' record format: the plan
    event, counters every 10 iterations, the second pass's start, checkpoint records at 80 and 160, the final
    record. ``stop``: the run stopped early at that iteration (no checkpoint past it)."""
    t = 1795673106.4
    plan = {
        "time": t,
        "event": "plan",
        "iteration": 0,
        "train_iters": 163,
        "train_batch_size": 4,
        "seq_length": 32,
        "mode": "exact",
        "blended": False,
        "separate_epochs": True,
        "settings": {"train_iters": 163, "train_batch_size": 4},
        "sources": [
            {
                "name": "web",
                "prefix": prefix,
                "dataset": "train",
                "documents": 118,
                "tokens": 10482,
                "samples_per_epoch": 327,
                "samples_requested": 652,
                "epochs_built": 2,
                "samples_built": 655,
                "length": 654,
                "samples_drawn": 652,
                "passes": 1.993884,
                "target_passes": 2.0,
                "tokens_unseen": 0,
                "separate_epochs": True,
            }
        ],
        "remainder": {"samples": 2, "tokens": 64},
        "eval_splits": "built as NeoX builds them (x1.005, epochs shuffled jointly): evaluation does not train, so "
        "how often it sees a token changes no weight; only the train split is made exact",
        "warnings": [
            {
                "code": "exact-remainder",
                "split": "train",
                "source": "web",
                "text": "exact: web: 2 of its 654 target samples fall in the remainder under one global batch "
                "(64 tokens not drawn)",
            }
        ],
        "problems": [],
    }
    end = 163 if stop is None else stop
    records: list[dict[str, Any]] = [plan]

    def source(it: int) -> dict[str, Any]:
        samples = 4 * it
        return {"samples": samples, "passes": round(samples / 327, 6), "pass": 1 if samples <= 327 else 2}

    for it in [*range(10, end, 10), end]:
        if it == 90:
            records.append(
                {"time": t, "event": "pass_start", "iteration": 83, "source": "web", "pass": 2, "sample": 328}
            )
        records.append(
            {
                "time": t,
                "event": "counters",
                "iteration": it,
                "consumed_samples": 4 * it,
                "sources": {"web": source(it)},
            }
        )
        if it in (80, 160):
            state = {
                "blend_samples": [],
                "blend_weights": [],
                "builds": {
                    "train": {"epochs": 2, "num_samples": 652, "samples_built": 655, "separate_final_epoch": False}
                },
                "consumed_samples": 4 * it,
                "drawn": [],
                "eval_interval": 1000,
                "eval_iters": 1,
                "greedy_weights": [],
                "iteration": it,
                "loader_batch": 4,
                "samples_total": 652,
                "seq_length": 32,
                "train_batch_size": 4,
                "train_iters": 163,
                "valid_samples": 4,
                "version": 1,
            }
            records.append(
                {"time": t, "event": "checkpoint", "iteration": it, "tag": f"global_step{it}", "state": state}
            )
    final = {
        "time": t,
        "event": "final",
        "iteration": end,
        "train_iters": 163,
        "complete": stop is None,
        "sources": {"web": {**source(end), "planned_passes": 2.0}},
    }
    records.append(final)
    return "".join(json.dumps(r) + "\n" for r in records)


# ---------------------------------------------------------------------------------------------------------
# the cases


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

    # --- plan: Megatron-LM flags and pasted command lines (tests/plan/test_plan_cli.py, tests/formats/test_pasted_line.py)
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

    # --- resume-check (tests/formats/test_checkpoint.py's layouts)
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

    # --- check-batch (tests/batch/test_check_batch.py)
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


def _normalise(text: str, work: str) -> str:
    for path, mark in (
        (os.path.realpath(work), "<TMP>"),
        (work, "<TMP>"),
        (os.path.realpath(REPO), "<REPO>"),
        (REPO, "<REPO>"),
    ):
        text = text.replace(path, mark)
    return text


def _run(case: dict[str, Any], work: str, env: dict[str, str]) -> dict[str, Any]:
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "neox_epoch.cli", *case["argv"]],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    files = {}
    for rel in case["files"]:
        path = os.path.join(work, rel)
        files[rel] = _normalise(open(path, encoding="utf-8").read(), work) if os.path.isfile(path) else None
    record = {
        "case": case["name"],
        "argv": [_normalise(a, work) for a in case["argv"]],
        "exit_code": r.returncode,
        "stdout": _normalise(r.stdout, work),
        "stderr": _normalise(r.stderr, work),
        "files": files,
    }
    return {"record": record, "seconds": round(time.monotonic() - t0, 2)}


def snapshot(out_dir: str, jobs: int) -> int:
    os.makedirs(out_dir, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_ENV}
    env["PYTHONPATH"] = os.pathsep.join([REPO, *filter(None, [os.environ.get("PYTHONPATH")])])
    env.setdefault("DS_ACCELERATOR", "cpu")
    started = time.monotonic()
    work = tempfile.mkdtemp(prefix="neox-epoch-snapshot-")
    try:
        cases, notes = build_inputs(work, env)
        names = [c["name"] for c in cases]
        assert len(set(names)) == len(names), "duplicate case names"
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(lambda c: _run(c, work, env), cases))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for res in results:
        rec = res["record"]
        _write(os.path.join(out_dir, rec["case"] + ".json"), json.dumps(rec, indent=1, sort_keys=True) + "\n")
    index = {
        "cases": {r["record"]["case"]: r["record"]["exit_code"] for r in results},
        "notes": {
            **notes,
            "normalised_fields": list(NORMALISED_FIELDS),
            "paths": "temporary directory -> <TMP>, checkout root -> <REPO>",
            "job_hostfile_exists": os.path.exists("/job/hostfile"),
        },
    }
    _write(os.path.join(out_dir, INDEX), json.dumps(index, indent=1, sort_keys=True) + "\n")
    slowest = sorted(results, key=lambda r: -r["seconds"])[:3]
    print(
        f"{len(results)} cases in {time.monotonic() - started:.1f}s -> {out_dir} (slowest: "
        + ", ".join(f"{r['record']['case']} {r['seconds']}s" for r in slowest)
        + ")"
    )
    for k, v in notes.items():
        print(f"  {k}: {v}")
    return 0


def _lines(rec: dict[str, Any]) -> list[str]:
    """A case record as lines to diff: exit code, stdout, each written file, stderr."""
    out = [f"exit_code: {rec.get('exit_code')}", "--- stdout"]
    out += rec.get("stdout", "").splitlines()
    for name, text in sorted((rec.get("files") or {}).items()):
        out.append(f"--- file {name}")
        out += (text or "(not written)").splitlines()
    out.append("--- stderr")
    out += rec.get("stderr", "").splitlines()
    return out


def compare(a_dir: str, b_dir: str, context: int = 3, max_lines: int = 40) -> int:
    def cases(d: str) -> set[str]:
        return {f[:-5] for f in os.listdir(d) if f.endswith(".json") and f != INDEX}

    a, b = cases(a_dir), cases(b_dir)
    differ = 0
    for name in sorted(a | b):
        if name not in a or name not in b:
            print(f"{name}: only in {a_dir if name in a else b_dir}")
            differ += 1
            continue
        ra = open(os.path.join(a_dir, name + ".json"), encoding="utf-8").read()
        rb = open(os.path.join(b_dir, name + ".json"), encoding="utf-8").read()
        if ra == rb:
            print(f"{name}: identical")
            continue
        differ += 1
        print(f"{name}: different")
        diff = list(
            difflib.unified_diff(_lines(json.loads(ra)), _lines(json.loads(rb)), a_dir, b_dir, n=context, lineterm="")
        )
        for line in diff[:max_lines]:
            print("    " + line)
        if len(diff) > max_lines:
            print(f"    ... {len(diff) - max_lines} more diff lines")
    print(f"{len(a | b) - differ} identical, {differ} different")
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir", nargs="?", help="write the snapshot here")
    p.add_argument("--compare", nargs=2, metavar=("A_DIR", "B_DIR"), help="compare two snapshots")
    p.add_argument("--jobs", type=int, default=max(1, min(4, os.cpu_count() or 1)), help="cases run at once")
    args = p.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if not args.out_dir:
        p.error("give OUT_DIR or --compare A_DIR B_DIR")
    return snapshot(args.out_dir, args.jobs)


if __name__ == "__main__":
    sys.exit(main())
