#!/usr/bin/env python3
"""What REAL GPT-NeoX builds and draws for a prefix listed more than once in ``train_data_paths``.

Usage::

    NEOX_DIR=/path/to/gpt-neox python scripts/neox_repeated_prefix.py SPEC.json

SPEC.json: ``{"prefixes": [...], "weights": [...], "seq_length": L, "train_iters": N, "train_batch_size": B,
"valid": PREFIX, "test": PREFIX}`` (paths of existing .bin/.idx corpora). Run in the Python environment of
scripts/neox_env.sh. The script calls NeoX's own ``build_train_valid_test_data_loaders`` (through
scripts/neox_golden.py's in-memory setup: a 1-process gloo group, NeoX's mpu, a CPU stand-in for the one
``torch.cuda.LongTensor``) and prints JSON: per train dataset its name, ``num_samples``/``num_epochs`` NeoX
passed to ``_build_index_mappings``, ``len`` and whether its ``doc_idx``/``sample_idx``/``shuffle_idx`` equal
the first dataset's of the same prefix; the blend's draws among the first ``train_iters * train_batch_size``
samples; and per prefix the distinct samples (the token span each maps to) among those draws.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden.neox_setup import capture_fd1, init_distributed, install_recorders, load_neox, neox_args  # noqa: E402


def span(ds: Any, j: int) -> tuple[int, int, int, int]:
    """(first doc, offset, last doc, offset) of sample ``j`` of ``ds``, read through its shuffle_idx."""
    s = int(ds.shuffle_idx[j % len(ds)]) if j >= ds.shuffle_idx.shape[0] else int(ds.shuffle_idx[j])
    f, off_f = (int(x) for x in ds.sample_idx[s])
    last, off_l = (int(x) for x in ds.sample_idx[s + 1])
    return int(ds.doc_idx[f]), off_f, int(ds.doc_idx[last]), off_l


def main(argv: list[str]) -> int:
    """Build the spec's blend with NeoX and print what it draws."""
    spec = json.load(open(argv[0], encoding="utf-8"))
    neox = load_neox(os.environ.get("NEOX_DIR"))
    workdir = tempfile.mkdtemp(prefix="neox_repeat_")
    log = os.path.join(workdir, "neox.log")
    with capture_fd1(log):
        init_distributed(neox, workdir)
    install_recorders(neox)
    prefixes = spec["prefixes"]
    args = neox_args(
        train_data_paths=prefixes,
        valid_data_paths=[spec["valid"]],
        test_data_paths=[spec["test"]],
        train_data_weights=spec["weights"],
        valid_data_weights=[1.0],
        test_data_weights=[1.0],
        seq_length=spec["seq_length"],
        train_iters=spec["train_iters"],
        train_batch_size=spec["train_batch_size"],
        eval_interval=spec.get("eval_interval", 1000),
        eval_iters=spec.get("eval_iters", 1),
    )
    with capture_fd1(log):
        loaders = neox.data_utils.build_train_valid_test_data_loaders(args)
    blend = loaders["train"].dataset
    builds = [b for b in neox.recorder.index_builds if b["name"].startswith("train")]
    n = spec["train_iters"] * spec["train_batch_size"]
    index = np.asarray(blend.dataset_index)[:n]
    sample = np.asarray(blend.dataset_sample_index)[:n]
    first: dict[str, Any] = {}
    datasets = []
    for i, (ds, prefix, b) in enumerate(zip(blend.datasets, prefixes, builds, strict=True)):
        same = first.setdefault(prefix, ds)
        datasets.append(
            {
                "name": ds.name,
                "prefix": prefix,
                "num_samples": b["num_samples"],
                "num_epochs": b["num_epochs"],
                "len": len(ds),
                "epochs": int(ds.doc_idx.shape[0] // (b["documents"][1] - b["documents"][0])),
                "draws": int(np.sum(index == i)),
                "same_index_as_first": {
                    k: bool(np.array_equal(getattr(ds, k), getattr(same, k)))
                    for k in ("doc_idx", "sample_idx", "shuffle_idx")
                },
            }
        )
    spans: dict[str, set[tuple[int, int, int, int]]] = {}
    drawn: dict[str, int] = {}
    for i, j in zip(index.tolist(), sample.tolist()):
        prefix = prefixes[i]
        spans.setdefault(prefix, set()).add(span(blend.datasets[i], j))
        drawn[prefix] = drawn.get(prefix, 0) + 1
    out = {
        "blend_len": len(blend),
        "consumed": n,
        "datasets": datasets,
        "prefixes": {p: {"drawn": drawn.get(p, 0), "distinct": len(spans.get(p, ()))} for p in dict.fromkeys(prefixes)},
    }
    print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
