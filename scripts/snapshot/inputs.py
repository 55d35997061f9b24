"""Inputs the package does not write: checkpoints, the golden fixture's NeoX configs, NeoX's index files,
megatron-core caches, run logs."""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import subprocess
import sys
import zipfile
from typing import Any

from snapshot.common import GOLDEN, NEOX_CACHE, write_json, write_text


def zip_pickle(obj: Any) -> bytes:
    """A torch.save zip-format file holding ``obj`` (plain Python objects only), as tests/formats/test_checkpoint.py."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps(obj, protocol=2))
    return buf.getvalue()


def deepspeed_tag(root: str, tag: str, saved: dict[str, Any]) -> str:
    os.makedirs(os.path.join(root, tag), exist_ok=True)
    write_text(os.path.join(root, "latest"), tag)
    with open(os.path.join(root, tag, "mp_rank_00_model_states.pt"), "wb") as f:
        f.write(zip_pickle(saved))
    return os.path.join(root, tag)


def golden_configs(work: str, write_random_corpus: Any) -> list[str]:
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
        write_json(os.path.join(work, "golden", f"{name}.yml"), params)
        names.append(name)
    return names


def copy_neox_index_files(work: str) -> str:
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


def mcore_caches(work: str, write_random_corpus: Any, env: dict[str, str]) -> str | None:
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


def one_source_log(prefix: str, stop: int | None = None) -> str:
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
