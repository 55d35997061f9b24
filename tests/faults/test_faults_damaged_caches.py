"""A megatron-core description.txt that is self-consistent (its md5 is the files' name) but holds a seed numpy cannot
take or a NaN split matrix: a finding naming the key (exit 1), never exit 3; the cache unchanged."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import numpy as np
import pytest
from test_faults_special_read import snapshot

from tests.audit.test_audit_unit import write_neox_index

CASES = [
    ("random_seed", -1),
    ("random_seed", 1 << 32),
    ("random_seed", 1 << 70),
    ("random_seed", 1.5),
    ("sequence_length", 0),
    ("split_matrix", [[float("nan"), 1.0], None, None]),
    ("split_matrix", [[0.5, 0.2], None, None]),
    ("split_matrix", [["0", 1], None, None]),
    ("split_matrix", [[0, float("inf")], None, None]),
]


@pytest.mark.parametrize("key,value", CASES)
def test_bad_self_consistent_description(tmp_path, key, value):  # type: ignore[no-untyped-def]
    (tmp_path / "data").mkdir()
    prefix, arr = write_neox_index(str(tmp_path / "data"), "m", [25, 3, 41, 8, 19, 33, 2, 16], 8, 1)
    desc = {
        "class": "GPTDataset",
        "dataset_path": prefix,
        "num_samples": 10,
        "index_split": "train",
        "random_seed": 1234,
        "sequence_length": 8,
        "split": "100,0,0",
        "split_matrix": [[0, 1.0], None, None],
        "tokenizer": {"class": "NullTokenizer"},
        key: value,
    }
    text = json.dumps(desc, indent=4)  # (NaN and Infinity as Python's json writes and reads them)
    digest = hashlib.md5(text.encode("utf-8")).hexdigest()
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / f"{digest}-GPTDataset-train-description.txt").write_text(text, encoding="utf-8")
    for name, array in (("document", "doc"), ("sample", "sample"), ("shuffle", "shuffle")):
        np.save(str(cache / f"{digest}-GPTDataset-train-{name}_index.npy"), arr[array])
    before = snapshot(str(tmp_path))
    out = subprocess.run(
        [sys.executable, "-m", "neox_epoch.cli", "audit", str(cache), "--consumed", "10", "--no-progress"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr and f"description {key}" in out.stdout, out.stdout
    assert snapshot(str(tmp_path)) == before
