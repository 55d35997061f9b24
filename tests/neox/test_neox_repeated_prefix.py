"""A prefix listed twice in ``train_data_paths``, judged by REAL GPT-NeoX data code.

scripts/neox_repeated_prefix.py runs NeoX's own build_train_valid_test_data_loaders in NeoX's environment and
reports, per listed copy, what NeoX asked its index build for and whether its index equals the first copy's,
and per prefix the samples its blend draws and how many distinct samples (token spans) those are. The plan must
show the prefix as one row with the same drawn and distinct counts, and warn naming it.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import frameworks
import pytest

from neox_epoch.cli import main
from neox_epoch.formats.corpus import write_random_corpus
from neox_epoch.plan.plan_warnings import DISTINCT_UNKNOWABLE

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
SCRIPT = os.path.join(HERE, "..", "scripts", "neox_repeated_prefix.py")


def neox_draws(spec: dict[str, Any], tmp_path: Any) -> dict[str, Any]:
    """What NeoX's own data code builds and draws for ``spec``."""
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    env = dict(os.environ, NEOX_DIR=frameworks.neox_dir())
    done = subprocess.run(
        [frameworks.neox_python(), SCRIPT, str(path)], check=True, capture_output=True, text=True, timeout=600, env=env
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def plan_json(
    spec: dict[str, Any], tmp_path: Any, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, str, str]:
    cfg = {
        "train_data_paths": spec["prefixes"],
        "train_data_weights": spec["weights"],
        "valid_data_paths": [spec["valid"]],
        "test_data_paths": [spec["test"]],
        "seq_length": spec["seq_length"],
        "train_batch_size": spec["train_batch_size"],
        "train_micro_batch_size_per_gpu": spec["train_batch_size"],
        "train_iters": spec["train_iters"],
        "eval_interval": 1000,
        "eval_iters": 1,
    }
    path = tmp_path / "run.yml"
    path.write_text(json.dumps(cfg))
    code = main(["plan", str(path), "--json", *extra])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("repeated")
    out = {}
    for label, seed, docs in (("web", 5, 300), ("code", 6, 200), ("val", 7, 30)):
        out[label] = str(d / label)
        write_random_corpus(out[label], seed, docs, 1, 300)
    return out


@pytest.mark.neox
@pytest.mark.parametrize("train_iters, same, drawn, distinct", [(60, True, 360, 240), (200, False, 1200, None)])
def test_repeated_prefix_one_row_as_neox_draws_it(
    corpora: dict[str, str],
    tmp_path: Any,
    capsys: pytest.CaptureFixture[str],
    train_iters: int,
    same: bool,
    drawn: int,
    distinct: int | None,
) -> None:
    """web listed twice (weights 1 and 2) beside code: at 60 iterations both copies are built for 1 epoch and NeoX
    gives them one index (the second copy's 240 draws re-train the first's 120: 240 distinct of 360); at 200 the
    heavier copy is built for 2 epochs, its index differs, and the plan does not claim a distinct count."""
    spec = {
        "prefixes": [corpora["web"], corpora["web"], corpora["code"]],
        "weights": [1, 2, 1],
        "seq_length": 64,
        "train_iters": train_iters,
        "train_batch_size": 8,
        "valid": corpora["val"],
        "test": corpora["val"],
    }
    neox = neox_draws(spec, tmp_path)
    web = neox["prefixes"][corpora["web"]]
    copy = neox["datasets"][1]["same_index_as_first"]
    assert (web["drawn"], all(copy.values())) == (drawn, same), neox
    if same:
        assert web["distinct"] == distinct
    code, out, err = plan_json(spec, tmp_path, capsys)
    assert code == 0, err
    plan = json.loads(out)
    rows = [s for s in plan["sources"] if s["split"] == "train"]
    assert [(s["name"], s["copies"]) for s in rows] == [("web", 2), ("code", 1)]
    assert (rows[0]["samples_drawn"], rows[0]["samples_distinct"]) == (web["drawn"], distinct)
    assert rows[0]["samples_requested"] == sum(d["num_samples"] for d in neox["datasets"][:2])
    assert rows[1]["samples_drawn"] == neox["prefixes"][corpora["code"]]["drawn"]
    found = [w["text"] for w in plan["warnings"] if w["code"] == "repeated-prefix"]
    assert len(found) == 1 and f"{corpora['web']} is listed 2 times" in found[0], found
    assert (f"{distinct} distinct of {drawn} drawn" in found[0]) == same, found
    if not same:  # NeoX's copies differ in doc_idx: the distinct spans are counted only from both built indices
        assert not copy["doc_idx"] and web["distinct"] == 1198, (copy, web)  # NeoX's spans: 1,198 of 1,200
        assert (
            "for 1, 2 epochs, each its own shuffle: 1200 samples drawn" in found[0] and DISTINCT_UNKNOWABLE in found[0]
        ), found
    assert "list it once with the weights added" in found[0]


def test_exact_mode_refuses_a_repeated_prefix(
    corpora: dict[str, str], tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exact mode: no weights give a repeated prefix its passes (its copies re-train one shuffle); one line."""
    spec = {
        "prefixes": [corpora["web"], corpora["web"], corpora["code"]],
        "weights": [1, 2, 1],
        "seq_length": 64,
        "train_iters": 60,
        "train_batch_size": 8,
        "valid": corpora["val"],
        "test": corpora["val"],
    }
    code, out, err = plan_json(spec, tmp_path, capsys, "--epochs", "1")
    assert code != 0 and out == ""
    assert err.strip().splitlines() == [
        f"neox-epoch plan: error: train_data_paths: {os.path.normpath(corpora['web'])} is listed 2 times; expected "
        "each prefix once in exact mode (NeoX builds one dataset per listing with the same shuffle, so the copies "
        "re-train the same samples); list it once with the weights added (3)"
    ]
