"""Megatron-LM 0.19's real pretrain_gpt.py trains on CPU (2 ranks, torchrun, gloo), launched with
``neox-epoch launch --source-epochs a=1 b=2 torchrun ...`` on a weighted blend of two tiny real corpora, stopped
at a checkpoint (--exit-interval) and resumed: with the same global batch, with another one, and on a rewritten
corpus (which stops before its first step).

The CUDA calls Megatron-LM makes go to a test double for the GPU (tests/helpers/megatron_lm_cpu/sitecustomize.py); every
trained row is recorded from outside Megatron-LM's code (tests/helpers/megatron_lm_cpu/recorder.py) and rebuilt token by
token from the .bin/.idx and megatron-core's cached indices; the live counters, neox_epoch.jsonl, the
TensorBoard scalars Megatron-LM's own writer wrote (read back) and ``neox-epoch report --json`` must equal those
recorded draws. The stack: megatron-core 0.19.2's megatron/training
with core_v0.19.0's pretrain_gpt.py (tests/megatron_lm/test_megatron_lm_training_016.py runs the same on core_v0.16.1).
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
from collections import Counter
from typing import Any

import frameworks
import numpy as np
import pytest
from paths import HELPERS

sys.path.insert(0, os.path.join(HELPERS, "megatron_lm_cpu"))
import harness  # noqa: E402

pytestmark = [pytest.mark.megatron_lm, pytest.mark.slow, frameworks.needs_stack("today")]

PASSES = {"a": 1, "b": 2}
READ_TB = os.path.join(HELPERS, "neox_cpu", "read_tb.py")
STOP = 4


@pytest.fixture(scope="module")
def mlm_stack() -> tuple[str, dict[str, str]]:
    """This stack's pretrain_gpt.py and the environment that imports its Megatron-LM."""
    tree = frameworks.megatron_lm_019_dir()
    return os.path.join(tree, "pretrain_gpt.py"), frameworks.megatron_lm_today_env()


def _ok(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stderr[-4000:]}\n{proc.stdout[-4000:]}"


@pytest.fixture(scope="module")
def first(mlm_stack: tuple[str, dict[str, str]], tmp_path_factory: pytest.TempPathFactory) -> harness.Run:
    """The launch that stops at the checkpoint of iteration 4 (--exit-interval, --save-interval)."""
    script, env = mlm_stack
    run = harness.new_run(str(tmp_path_factory.mktemp("mlm") / "first"), script, env)
    _ok(run.launch(4, "--save-interval", str(STOP), "--exit-interval", str(STOP)))
    return run


def _resumed(first: harness.Run, root: str, batch: int) -> harness.Run:
    run = first.copy(root)
    _ok(run.launch(batch, "--load", run.path("ckpt"), "--save-interval", str(STOP)))
    return run


@pytest.fixture(scope="module")
def blend_run(first: harness.Run, tmp_path_factory: pytest.TempPathFactory) -> harness.Run:
    return _resumed(first, str(tmp_path_factory.mktemp("mlm") / "same"), 4)


@pytest.fixture(scope="module")
def batch_run(first: harness.Run, tmp_path_factory: pytest.TempPathFactory) -> harness.Run:
    return _resumed(first, str(tmp_path_factory.mktemp("mlm") / "batch"), 8)


def _plan(run: harness.Run) -> dict[str, Any]:
    """The plan the last launch logged (a resume with another batch replans)."""
    return [r for r in run.jsonl() if r["event"] == "plan"][-1]


def _blend(run: harness.Run, size: int) -> list[int]:
    """The blend's source of each of its first ``size`` positions (every cached BlendedDataset of the run)."""
    paths = glob.glob(run.path("cache", "*-BlendedDataset-train-dataset_index.npy"))
    blends = {tuple(int(x) for x in np.load(p)[:size]) for p in paths}
    assert len(blends) == 1, f"the launches built different blends: {paths}"
    return list(blends.pop())


def _not_trained(run: harness.Run) -> int:
    """The trailing samples the resumed launch said are not trained (not a whole global batch), else 0."""
    match = re.search(r"the last (\d+) samples are not a whole global batch", run.procs[-1].stderr)
    return int(match.group(1)) if match else 0


def _exact_passes(run: harness.Run) -> None:
    """Every row equals the files' tokens and the blend's position it came from; every position up to the
    consumed samples is trained once; each token of each source is an input at most its passes times, and the
    token draws short of that are exactly each pass's tail plus the samples the launches name as not trained."""
    rows, plan = run.rows(), _plan(run)
    sources = harness.sources(run)
    assert rows
    mismatched = [r for r in rows if sources[r["dataset_id"], r["build"]].tokens(r["sample_id"]) != r["tokens"]]
    assert not mismatched, f"{len(mismatched)} of {len(rows)} rows differ from the files"
    assert sorted(r["blend_index"] for r in rows) == list(range(len(rows)))
    assert len(rows) == plan["train_samples"] - _not_trained(run)
    blend = _blend(run, plan["train_samples"])
    assert all(blend[r["blend_index"]] == r["dataset_id"] for r in rows)
    for k, name in enumerate(("a", "b")):
        info = next(s for s in plan["sources"] if s["name"] == name)
        coverage = Counter(
            t for r in rows if r["dataset_id"] == k for t in sources[k, r["build"]].inputs(r["sample_id"])
        )
        tokens = int(next(iter(s for (j, _), s in sources.items() if j == k)).sizes.sum())
        assert max(coverage.values()) == PASSES[name]
        untrained = blend[len(rows) :].count(k)
        remainder = PASSES[name] * info["samples_per_epoch"] - info["samples_drawn"]
        assert remainder == _named_remainder(run, name)
        assert sum(1 for r in rows if r["dataset_id"] == k) == info["samples_drawn"] - untrained
        tail = tokens - info["samples_per_epoch"] * harness.SEQ
        missing = PASSES[name] * tokens - sum(coverage.values())
        assert missing == PASSES[name] * tail + (remainder + untrained) * harness.SEQ, (name, missing, tail)


def _named_remainder(run: harness.Run, name: str) -> int:
    """The remainder samples the last launch named for ``name`` on stderr (0 when none)."""
    match = re.search(rf"exact: {name}: (\d+) of its \d+ target samples fall in the remainder", run.procs[-1].stderr)
    return int(match.group(1)) if match else 0


def _counters_equal_rows(run: harness.Run) -> None:
    rows, records = run.rows(), run.jsonl()
    counters = [r for r in records if r["event"] == "counters"]
    assert {c["iteration"] for c in counters} == {r["iteration"] for r in rows}
    for c in counters:
        drawn = Counter("ab"[r["dataset_id"]] for r in rows if r["iteration"] <= c["iteration"])
        assert {n: s["samples"] for n, s in c["sources"].items()} == {"a": drawn["a"], "b": drawn["b"]}, c
    final = [r for r in records if r["event"] == "final"][-1]
    total = Counter("ab"[r["dataset_id"]] for r in rows)
    assert final["consumed_samples"] == len(rows)
    assert final["complete"] == (_not_trained(run) == 0)
    assert {n: s["samples"] for n, s in final["sources"].items()} == dict(total)
    resume = next(r for r in records if r["event"] == "resume")
    before = Counter("ab"[r["dataset_id"]] for r in rows if r["iteration"] <= resume["iteration"])
    assert {n: s["samples"] for n, s in resume["sources"].items()} == dict(before)


def _tensorboard_equals_rows(run: harness.Run) -> None:
    """Megatron-LM's own TensorBoard writer carries each source's samples and passes keyed on consumed samples."""
    rows, plan = run.rows(), _plan(run)
    proc = subprocess.run(
        [sys.executable, READ_TB, run.path("tb"), "neox_epoch/"], capture_output=True, text=True, check=True
    )
    scalars = json.loads(proc.stdout)
    for k, name in enumerate(("a", "b")):
        info = next(s for s in plan["sources"] if s["name"] == name)
        samples = scalars[f"neox_epoch/samples/{name}"]
        assert max(step for step, _ in samples) == len(rows)
        for step, value in samples:
            assert value == sum(1 for r in rows if r["dataset_id"] == k and r["blend_index"] < step), (name, step)
        for step, value in scalars[f"neox_epoch/passes/{name}"]:
            drawn = sum(1 for r in rows if r["dataset_id"] == k and r["blend_index"] < step)
            assert value == pytest.approx(drawn / info["samples_per_epoch"], abs=1e-6), (name, step)


def _report_equals_rows(run: harness.Run) -> None:
    rows, report = run.rows(), run.report()
    assert report["complete"] == (_not_trained(run) == 0)
    for source in report["sources"]:
        k = "ab".index(source["name"])
        for point in source["points"]:
            drawn = sum(1 for r in rows if r["dataset_id"] == k and r["iteration"] <= point["iteration"])
            assert point["samples"] == drawn, (source["name"], point)


def test_first_launch_stops_at_its_checkpoint(first: harness.Run) -> None:
    rows = first.rows()
    assert {r["iteration"] for r in rows} == set(range(1, STOP + 1))
    assert os.path.isfile(first.path("ckpt", f"iter_{STOP:07d}", "neox_epoch_state.json"))
    assert "--train-iters 1000 ->" in first.procs[0].stderr


def test_resumed_run_trains_every_token_its_passes(blend_run: harness.Run) -> None:
    _exact_passes(blend_run)
    assert Counter(r["rank"] for r in blend_run.rows()) == {
        0: len(blend_run.rows()) // 2,
        1: len(blend_run.rows()) // 2,
    }


def test_resumed_run_counters_jsonl_and_report_equal_the_recorded_draws(blend_run: harness.Run) -> None:
    _counters_equal_rows(blend_run)
    _report_equals_rows(blend_run)
    assert _not_trained(blend_run) == 0


def test_resumed_run_tensorboard_scalars_equal_the_recorded_draws(blend_run: harness.Run) -> None:
    _tensorboard_equals_rows(blend_run)


def test_resume_with_another_global_batch_stays_exact(batch_run: harness.Run) -> None:
    _exact_passes(batch_run)
    _counters_equal_rows(batch_run)
    _report_equals_rows(batch_run)
    _tensorboard_equals_rows(batch_run)
    assert _not_trained(batch_run) == 4
    after = [r for r in batch_run.rows() if r["iteration"] > STOP]
    per_step = Counter(r["iteration"] for r in after)
    assert set(per_step.values()) == {8}


def test_resume_on_a_rewritten_corpus_stops_before_its_first_step(
    first: harness.Run, tmp_path_factory: pytest.TempPathFactory
) -> None:
    run = first.copy(str(tmp_path_factory.mktemp("mlm") / "rewritten"))
    before = run.rows()
    os.remove(run.path("b.bin"))
    os.remove(run.path("b.idx"))
    harness.write_random_corpus(run.path("b"), 3, 12, 20, 100)
    proc = run.launch(4, "--load", run.path("ckpt"), "--save-interval", str(STOP))
    assert proc.returncode == 2, proc.stderr[-3000:]
    message = proc.stderr.strip().splitlines()[-1]
    assert "neox_epoch_state.json" in message and "the data changed" in message and "'b'" in message, message
    assert run.rows() == before
    assert not [r for r in run.jsonl() if r["event"] == "counters" and r["iteration"] > STOP]
