"""GPT-NeoX's real CPU training with the hooks' log_dir on a filesystem that fills up, or turns read-only, mid-run.

One real launch per case (the 3-source blend of tests/neox/test_neox_training.py, targets a 1, b 2, c 0.5 passes,
separate_epochs, 245 iterations of 4, counters every iteration), through ``neox-epoch launch`` as users launch it,
with the launch fixtures of tests/neox/test_neox_training.py. ``log_dir`` is on a small tmpfs of its own (we are root
in the test container and CI: ``mount -t tmpfs``). Once training has written its first counters, a thread in the
test takes the log's filesystem away for 30 iterations (counted from the batches
rank 0 has trained):

- full: a filler file takes every free page, then is removed;
- read-only: ``mount -o remount,ro``, then ``remount,rw``.

The sink keeps at most 2 records in memory (``NEOX_EPOCH_LOG_QUEUE=2``), so records are dropped during the outage.
Each case asserts: the launch finishes (exit 0), trains exactly what the unbroken run trains (every iteration once,
4 samples each, the same per-token histograms and draws as test_blend_every_token_seen_its_target_passes...), the
failure is reported once on stderr naming the file and that training goes on, the log has no torn line, every
counters record written equals the recorded draws, the log_gap record names exactly the iterations whose
counters records are absent, and ``neox-epoch report`` names them (text and --json).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import frameworks
import neox_trained as nt
import numpy as np
import pytest

import tests.neox.test_neox_training as tn
from neox_epoch.formats.runlog import read_jsonl
from neox_epoch.neox.counters import JSONL_NAME

pytestmark = [pytest.mark.neox, pytest.mark.slow]

ITERS = 245
HOLD = 30
"""Iterations the log's filesystem stays full or read-only (a full disk fails the log's writes once the page
it is writing into is used up: about 15 records)."""


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, text=True, timeout=60)


def _remount(target: str, mode: str) -> None:
    """remount ro can fail (busy) while the sink has the file open for a write: retry."""
    for _ in range(500):
        if subprocess.run(["mount", "-o", f"remount,{mode}", target], capture_output=True, timeout=60).returncode == 0:
            return
        time.sleep(0.005)
    raise AssertionError(f"mount -o remount,{mode} {target} kept failing")


def _fill(folder: str) -> str:
    """A file taking every free page of the filesystem at ``folder``."""
    filler = os.path.join(folder, "filler")
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler


def _trained(record_dir: str) -> int:
    """Iterations rank 0 has trained so far: the batch recorder appends 2 rows of seq_length + 2 int64 per
    iteration (micro batch 2) and flushes each call."""
    try:
        return os.path.getsize(os.path.join(record_dir, "train-rank0.bin")) // (2 * (tn.SEQ + 2) * 8)
    except OSError:
        return 0


def _last_written(jsonl: str) -> int:
    """The last iteration whose counters record is in the log (read as ``report`` reads it: a line being written is
    a torn record; 0: none yet)."""
    return max((r["iteration"] for _, r in read_jsonl(jsonl) if r["event"] == "counters"), default=0)


def _interrupt(
    jsonl: str,
    record_dir: str,
    block: Callable[[], Any],
    unblock: Callable[[Any], None],
    done: threading.Event,
    seen: dict[str, Any],
) -> None:
    """Once the log holds the plan and training is under way: block for HOLD iterations, then unblock."""
    while not done.is_set() and not (os.path.exists(jsonl) and _trained(record_dir) >= 3):
        time.sleep(0.005)
    if done.is_set():
        return
    seen["written"] = _last_written(jsonl)  # (records of later iterations may still wait for the sink's thread)
    token = block()
    seen["blocked"] = _trained(record_dir)
    while not done.is_set() and _trained(record_dir) < seen["blocked"] + HOLD:
        time.sleep(0.005)
    unblock(token)
    seen["unblocked"] = _trained(record_dir)


def _run(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    block: Callable[[str], Callable[[], Any]],
    unblock: Callable[[str], Callable[[Any], None]],
) -> dict[str, Any]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs for log_dir needs root (the test container and CI run as root)")
    run = tn._new_run(tmp_path_factory, name)
    fs = run.path("logfs")
    os.makedirs(fs)
    _mount("-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", fs)
    log_dir = os.path.join(fs, "epoch")
    seen: dict[str, Any] = {}
    try:
        os.makedirs(log_dir)
        cfg = tn._config(run.root, ["a", "b", "c"], tn.BLEND_BLOCK, log_interval=1)
        cfg["neox_epoch"]["log_dir"] = log_dir
        done = threading.Event()
        watcher = threading.Thread(
            target=_interrupt,
            args=(os.path.join(log_dir, JSONL_NAME), run.path("rec", name), block(fs), unblock(fs), done, seen),
            daemon=True,
        )
        watcher.start()
        try:
            result = tn._launch(run, cfg, name, frameworks.neox_dir(), extra_env={"NEOX_EPOCH_LOG_QUEUE": "2"})
        finally:
            done.set()
            watcher.join(timeout=HOLD + 60)
        shutil.copytree(log_dir, run.path("logs", "epoch"))
    finally:
        subprocess.run(["mount", "-o", "remount,rw", fs], capture_output=True, timeout=60)
        subprocess.run(["umount", fs], capture_output=True, timeout=60)
    report = subprocess.run(
        [sys.executable, "-m", "neox_epoch.cli", "report", run.path("logs", "epoch"), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    text = subprocess.run(
        [
            sys.executable,
            "-m",
            "neox_epoch.cli",
            "report",
            run.path("logs", "epoch"),
            "--html",
            run.path("report.html"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return {"run": run, "result": result, "seen": seen, "report": report, "text": text}


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _run(tmp_path_factory, "full", lambda fs: lambda: _fill(fs), lambda fs: os.unlink)


@pytest.fixture(scope="module")
def readonly_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _run(
        tmp_path_factory, "readonly", lambda fs: lambda: _remount(fs, "ro"), lambda fs: lambda _: _remount(fs, "rw")
    )


@pytest.fixture(params=["full_run", "readonly_run"])
def case(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    yield request.getfixturevalue(request.param)


def _lines(case: dict[str, Any]) -> list[bytes]:
    with open(case["run"].path("logs", "epoch", JSONL_NAME), "rb") as f:
        return f.read().split(b"\n")


def test_the_run_finishes_and_trains_exactly(case: dict[str, Any]) -> None:
    run, result = case["run"], case["result"]
    tn._ok(result)
    assert "blocked" in case["seen"] and "unblocked" in case["seen"], "the log's filesystem was never taken away"
    rec = run.recorded()
    assert np.bincount(rec.iterations)[1:].tolist() == [4] * ITERS  # every iteration once, 4 samples
    ex = nt.exposure(rec, run.sources(["a", "b", "c"]))
    assert ex.histogram("a") == {0: 163, 1: 51584}
    assert ex.histogram("b") == {1: 168, 2: 24812}
    assert ex.histogram("c") == {0: 24329, 1: 24064}
    assert np.bincount(ex.source_of_row).tolist() == [403, 389, 188]


def test_the_failure_is_reported_once_naming_the_file(case: dict[str, Any]) -> None:
    out = case["run"].outputs[0]
    lines = [ln for ln in case["result"].stderr.splitlines() if "cannot write the run log" in ln]
    assert len(lines) == 1, lines  # once per rank; only rank 0 writes the log
    assert os.path.join("logfs", "epoch", JSONL_NAME) in lines[0] and "training goes on" in lines[0]
    assert "can be written again" in out
    assert "Traceback" not in out


def test_the_log_has_whole_lines_and_exact_counters(case: dict[str, Any]) -> None:
    lines = _lines(case)
    assert lines[-1] == b""  # ends with a newline
    records = [json.loads(x) for x in lines[:-1]]  # every line is one whole JSON object
    run = case["run"]
    rec = run.recorded()
    ex = nt.exposure(rec, run.sources(["a", "b", "c"]))
    counters = [r for r in records if r["event"] == "counters"]
    for k, name in enumerate("abc"):
        cum = nt.draws_by_iteration(rec, ex, k, ITERS)
        for r in counters:
            assert r["sources"][name]["samples"] == int(cum[r["iteration"]]), (name, r["iteration"])
    (final,) = [r for r in records if r["event"] == "final"]  # NeoX's last checkpoint's record follows it
    assert final["complete"] and final["iteration"] == ITERS
    assert {n: v["samples"] for n, v in final["sources"].items()} == {"a": 403, "b": 389, "c": 188}
    assert [r["event"] for r in records].count("plan") == 1 and records[0]["event"] == "plan"


def _gap(case: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any], int, int]:
    """The log's records, its one log_gap record and the first and last iteration of the counters it misses."""
    records = [json.loads(x) for x in _lines(case)[:-1]]
    (gap,) = [r for r in records if r["event"] == "log_gap"]
    first, last = gap["missing_events"]["counters"]["iterations"]
    return records, gap, first, last


def test_the_gap_names_exactly_the_missing_iterations(case: dict[str, Any]) -> None:
    records, gap, first, last = _gap(case)
    written = [r["iteration"] for r in records if r["event"] == "counters"]
    assert written == sorted(written) and len(written) == len(set(written))
    absent = sorted(set(range(1, ITERS + 1)) - set(written))
    # records are dropped oldest first, so the missing ones are one run of iterations, right where the gap stands
    assert absent == list(range(first, last + 1)) and gap["missing_events"]["counters"]["records"] == len(absent) > 0
    assert gap["missing"] == sum(v["records"] for v in gap["missing_events"].values())
    at = records.index(gap)
    before = [r["iteration"] for r in records[:at] if r["event"] == "counters"]
    after = [r["iteration"] for r in records[at:] if r["event"] == "counters"]
    assert before[-1] == first - 1 and after[0] == last + 1
    assert gap["lost"] == 0 and gap["file"].endswith(os.path.join("epoch", JSONL_NAME))
    full = case["run"].launches[0] == "full"
    assert gap["error"].startswith("No space left on device" if full else "Read-only file system"), gap["error"]
    assert gap["until"] > gap["since"]
    written, unblocked = case["seen"]["written"], case["seen"]["unblocked"]
    # within the outage: after the last record written before it (records of iterations trained before it may still
    # have waited for the sink's thread, and are lost with the others), and the last 2 waited in memory
    assert written < first and last < unblocked + 2


def test_the_report_names_the_missing_records(case: dict[str, Any]) -> None:
    report, text = case["report"], case["text"]
    assert report.returncode == 0 and text.returncode == 0, report.stderr + text.stderr
    records, gap, first, last = _gap(case)
    (missing,) = json.loads(report.stdout)["missing"]
    n = last - first + 1
    assert (missing["kind"], missing["records"], missing["line"]) == ("log_gap", gap["missing"], records.index(gap) + 1)
    assert missing["events"]["counters"] == {"records": n, "iterations": [first, last]}
    counted = f"{n} counters records at iterations {first}..{last}"
    assert counted in missing["label"] and "training went on" in missing["label"]
    assert f"launch 1: {JSONL_NAME}:{records.index(gap) + 1}: {gap['missing']} records missing (" in text.stdout
    assert counted in text.stdout
    with open(case["run"].path("report.html"), encoding="utf-8") as f:
        page = f.read()
    assert "<h2>Missing records</h2>" in page and counted in page
