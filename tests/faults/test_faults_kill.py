"""Fault suite, kill -9: at any moment of any writer, OUT holds its old content or the complete new content, and no
temporary file remains (faults_kill_driver.py: seeded delays spread over each writer's measured wall time).

Seven writers x 16 runs = 112 kills, plus a few kills of the CLI started cold (``python -m neox_epoch.cli``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
from faults_util import ROOT, batch_config, corpus, neox_cache, plan_config, run_log, temps

HERE = os.path.dirname(os.path.abspath(__file__))
RUNS = 16
STATE = """
from neox_epoch.neox.resume_state import ResumeState, TrainBuild, write_state
write_state({tag!r}, ResumeState(iteration=10, consumed_samples=40, train_batch_size=4, loader_batch=4,
                                 samples_total=80, train_iters=20, builds={{"train": TrainBuild(80, 1, 90)}},
                                 seq_length=128))
"""


def _writers(d: str) -> list[dict[str, Any]]:
    prefix = corpus(os.path.join(d, "data"))
    config, cache, log = plan_config(d, prefix), neox_cache(d), run_log(d)
    batch, _ = batch_config(d)
    out = os.path.join(d, "out")
    demo = os.path.join(d, "demo")
    for folder in (out, demo, os.path.join(d, "demo_configs"), os.path.join(d, "tag")):
        os.mkdir(folder)
    plan_config(os.path.join(d, "demo_configs"), prefix)  # one config: the demo refuses a folder without any
    old = "old content\n"
    writers = [
        {
            "name": "report --html",
            "argv": ["report", log, "--html", f"{out}/run.html"],
            "files": {f"{out}/run.html": old},
        },
        {
            "name": "audit --manifest",
            "argv": ["audit", cache, "--consumed", "200", "--manifest", f"{out}/m.csv", "--no-progress"],
            "files": {f"{out}/m.csv": old},
        },
        {
            "name": "plan --write-config",
            "argv": ["plan", config, "--write-config", f"{out}/exact.yml"],
            "files": {f"{out}/exact.yml": old},
        },
        {
            "name": "demo corpus",
            "argv": ["demo", "--data-dir", demo, "--configs", os.path.join(d, "demo_configs")],
            "files": {
                f"{demo}/{n}_text_document.{e}": (old if e == "bin" else None)
                for n in ("web", "code", "books")
                for e in ("bin", "idx")
            },
        },
        {
            "name": "hooks resume state",
            "python": STATE.format(tag=os.path.join(d, "tag")),
            "files": {os.path.join(d, "tag", "neox_epoch_state.json"): old},
        },
        {
            "name": "check-batch --fix",
            "argv": ["check-batch", batch, "--fix", f"{out}/fixed.yml"],
            "files": {f"{out}/fixed.yml": old},
        },
    ]
    writers.insert(
        2,
        {
            "name": "audit --plot",
            "argv": ["audit", cache, "--consumed", "200", "--plot", f"{out}/e.svg", "--no-progress"],
            "files": {f"{out}/e.svg": old},
        },
    )
    return writers


def _summary(results: list[dict[str, Any]]) -> str:
    return "; ".join(
        f"{r['name']}: {r['runs']} kills over {r['wall']:.3f} s, old {r['old']}, new {r['new']}, "
        f"mixed {r['mixed']}, temporary left then removed {r['healed']}"
        for r in results
    )


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    d = str(tmp_path_factory.mktemp("kill"))
    spec = {"seed": 20261129, "runs": RUNS, "writers": _writers(d)}
    with open(os.path.join(d, "spec.json"), "w", encoding="utf-8") as f:
        json.dump(spec, f)
    p = subprocess.run(
        [
            sys.executable,
            os.path.join(os.path.dirname(HERE), "helpers", "faults_kill_driver.py"),
            os.path.join(d, "spec.json"),
            os.path.join(d, "result.json"),
        ],
        env={**os.environ, "PYTHONPATH": ROOT},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    with open(os.path.join(d, "result.json"), encoding="utf-8") as f:
        found = list(json.load(f))
    print(_summary(found))  # shown with -s: the measured spread of the kills
    return found


def test_kill_9_leaves_old_or_complete_new_content(results: list[dict[str, Any]]) -> None:
    assert sum(r["runs"] for r in results) >= 100
    for r in results:
        assert r["runs"] == RUNS, r
        assert r["torn"] == [], r  # never a half-written file
        if r["name"] != "demo corpus":
            assert r["mixed"] == 0, r  # one file: old or new
    # the kills are spread over the writers' work: both outcomes are seen (delays up to 1.2 x the wall time)
    assert sum(r["old"] for r in results) > 0 and sum(r["new"] for r in results) > 0, results


def test_kill_9_leaves_no_temporary_file(results: list[dict[str, Any]]) -> None:
    """No temporary file after a kill; one left in the microseconds between link and rename is removed by the
    next writer (its pid is gone)."""
    for r in results:
        assert r["unhealed"] == [], r
        assert r["temps_left"] == r["healed"], r


def test_kill_9_of_the_cli_started_cold(tmp_path: Any) -> None:
    """A few kills of ``python -m neox_epoch.cli report --html`` from its start: old or new, no temporary file."""
    log = run_log(str(tmp_path))
    out = tmp_path / "run.html"
    env = {**os.environ, "PYTHONPATH": ROOT}
    argv = [sys.executable, "-m", "neox_epoch.cli", "report", log, "--html", str(out)]
    start = time.monotonic()
    subprocess.run(argv, env=env, check=True, capture_output=True)
    wall = time.monotonic() - start
    new = out.read_bytes()
    rng = random.Random(7)
    for _ in range(6):
        out.write_bytes(b"old\n")
        p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.5 * wall, 1.2 * wall))
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        content = out.read_bytes()
        assert content in (b"old\n", new)
        assert temps(str(tmp_path)) == []
