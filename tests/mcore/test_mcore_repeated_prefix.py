"""A prefix listed twice in a Megatron-LM blend: the plan's table shows it as one row, as NeoX's plan does
(plan/repeated.py), with the distinct samples the copies draw together. Checked against the REAL megatron-core
builder of this stack (0.16.1 on NeoX's, 0.19.2 on today's): the copies get byte-identical indices (same seed,
same documents, same epochs), so the later copy's draws re-train the first's."""

from __future__ import annotations

import json
from typing import Any

import optional
import pytest

optional.require("torch")  # the truth script builds with megatron-core, which imports torch

from mcore_env import installed_version, run_truth  # noqa: E402

from neox_epoch.cli import main  # noqa: E402
from neox_epoch.formats.corpus import write_random_corpus  # noqa: E402


def test_megatron_plan_one_row_per_prefix_against_real_megatron_core(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    version = installed_version()
    assert version is not None
    web, code = str(tmp_path / "web_pages_of_the_long_tail"), str(tmp_path / "code")
    write_random_corpus(web, 7, 200, 1, 100)
    write_random_corpus(code, 8, 100, 1, 100)
    argv = [
        "pretrain_gpt.py",
        "--lr",
        "1e-4",
        "--seq-length",
        "8",
        "--micro-batch-size",
        "4",
        "--global-batch-size",
        "4",
        "--data-path",
        "1",
        web,
        "1",
        code,
        "1",
        web,
        "--split",
        "100,0,0",
        "--train-iters",
        "1000",
        "--eval-iters",
        "0",
        "--eval-interval",
        "1000",
    ]
    assert main(["plan", "--framework-version", version, *argv, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    rows = [
        (s["name"], s["copies"], s["samples_drawn"], s["samples_distinct"], s["samples_requested"])
        for s in plan["sources"]
        if s["split"] == "train"
    ]
    assert rows == [("web_pages_of_the_long_tail", 2, 2667, 1334, 2682), ("code", 1, 1333, None, 1341)]
    assert main(["plan", "--framework-version", version, *argv]) == 0
    text = capsys.readouterr().out
    assert "web_pages_of_the_long_tail (listed 2x)" in text and "2,667 (1,334 distinct)" in text
    assert (
        "megatron-core builds 2 datasets with the same shuffle, so the later copies re-train the first samples: "
        "1334 distinct of 2667 drawn"
    ) in text
    case = {
        "id": "repeated",
        "prefixes": [web, code, web],
        "weights": [1.0, 1.0, 1.0],
        "split": "100,0,0",
        "blend_per_split": None,
        "sizes": [4000, 0, 0],
        "seq_length": 8,
        "seed": 1234,
        "path_to_cache": str(tmp_path / "cache"),
    }
    real = run_truth([case], version, str(tmp_path / "truth"))["cases"][0]
    assert real["error"] is None, real
    first, _, second = real["splits"]["train"]["datasets"]
    assert first["sha1"] == second["sha1"]  # one index: the copies draw the same samples from their first on
    assert (first["num_samples"], first["num_epochs"], first["len"]) == (1341, 2, 2581)
