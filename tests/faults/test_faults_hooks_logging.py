"""The hooks' run log (the JSONL sink) on a full, read-only or vanished log_dir: training's counters go on.

No training here: the NeoX hooks' own :class:`PassCounters` (and megatron-core's writers' sink class) drive the
sink as the hooks do, on real filesystems made for the test (we are root in the test container and CI): a tiny
tmpfs that fills (``ENOSPC``), the same remounted read-only (``EROFS``), a device node 1,7 (the kernel's full
device: every write ``ENOSPC``) in place of the log file, and a log_dir removed mid-run. Each case asserts the
counts are kept, the failure is logged once per process and file (naming the file, the error, that training goes
on), writing resumes when it can, a ``log_gap`` record says which records are missing, no half line is left, and
``neox-epoch report`` names the missing records.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from neox_epoch.cli import main
from neox_epoch.formats.runlog import JSONL_NAME, JsonlSink, read_jsonl, scalars_writer
from neox_epoch.neox.counters import PassCounters, counters_for
from neox_epoch.run_report import log as run_log

ITERS = 60
WEIGHTS = (0.5, 0.3, 0.2)
SPE = (40, 30, 20)


def _counters(sink: JsonlSink) -> PassCounters:
    """Three sources of 40, 30 and 20 samples per pass, batches of 4, a record every iteration."""
    bounds = [[k * s for k in range(1, 8)] for s in SPE]
    return counters_for(["a", "b", "c"], SPE, bounds, [3.0, 3.0, 3.0], WEIGHTS, 4, ITERS, 1, sink=sink)


def _plan(c: PassCounters) -> dict[str, Any]:
    """A plan record as the hooks write it, with the fields the report reads."""
    return {
        "event": "plan",
        "iteration": 0,
        "train_iters": ITERS,
        "train_batch_size": 4,
        "seq_length": 8,
        "sources": [{"name": s.name, "samples_per_epoch": s.samples_per_epoch} for s in c.sources],
    }


def _root() -> None:
    if os.geteuid() != 0:
        pytest.skip("mount and mknod need root (the test container and CI run as root)")


@pytest.fixture
def tmpfs(tmp_path: Any) -> Iterator[str]:
    """A 64 kB tmpfs, unmounted after the test."""
    _root()
    target = str(tmp_path / "fs")
    os.makedirs(target)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", target], check=True, timeout=60)
    try:
        yield target
    finally:
        subprocess.run(["umount", target], timeout=60)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def _whole(path: str) -> list[dict[str, Any]]:
    """Every line of the log, each a whole JSON object (json.loads fails on a half line)."""
    with open(path, "rb") as f:
        data = f.read()
    assert data.endswith(b"\n")
    return [json.loads(line) for line in data.split(b"\n")[:-1]]


def _run_through(c: PassCounters, until: int, start: int = 1) -> None:
    for it in range(start, until + 1):
        c.step(it)


def _expected(c: PassCounters, iteration: int) -> dict[str, int]:
    return dict(zip("abc", c.counts_at(iteration)))


def test_a_full_disk_keeps_counting_drops_the_oldest_and_says_which(
    tmpfs: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="neox_epoch")
    subprocess.run(["mount", "-o", "remount,size=4k", tmpfs], check=True, timeout=60)  # one page
    log_dir = os.path.join(tmpfs, "epoch")
    sink = JsonlSink(log_dir, max_pending=5)
    c = _counters(sink)
    sink.write(_plan(c))
    c.start(0)
    _run_through(c, 40)  # 4 kB hold about 15 records: the disk fills on the way
    assert sink.error is not None and sink.error.startswith("No space left on device")
    assert len([e for e in sink.pending if not hasattr(e, "lost")]) == 5  # the bound
    subprocess.run(["mount", "-o", "remount,size=1m", tmpfs], check=True, timeout=60)
    _run_through(c, ITERS, 41)
    report = c.final(ITERS)
    assert {n: v["samples"] for n, v in report["sources"].items()} == _expected(c, ITERS)
    assert sink.error is None and not sink.pending
    records = _whole(os.path.join(log_dir, JSONL_NAME))
    (gap,) = [r for r in records if r["event"] == "log_gap"]
    written = [r["iteration"] for r in records if r["event"] == "counters"]
    first, last = gap["missing_events"]["counters"]["iterations"]
    assert sorted(set(range(1, ITERS + 1)) - set(written)) == list(range(first, last + 1))
    assert gap["missing"] == sink.dropped == sum(v["records"] for v in gap["missing_events"].values()) > 0
    assert gap["error"].startswith("No space left on device") and gap["lost"] == 0
    for r in records:  # what was written is exact
        if r["event"] == "counters":
            assert {n: v["samples"] for n, v in r["sources"].items()} == _expected(c, r["iteration"])
    warned = [w for w in _warnings(caplog) if "cannot write the run log" in w]
    assert len(warned) == 1 and log_dir in warned[0] and "training goes on" in warned[0]
    assert any("can be written again" in r.getMessage() for r in caplog.records)


def test_read_only_then_writable_again_nothing_lost_within_the_bound(
    tmpfs: str, caplog: pytest.LogCaptureFixture
) -> None:
    log_dir = os.path.join(tmpfs, "epoch")
    sink = JsonlSink(log_dir)  # the default bound: every record waits
    c = _counters(sink)
    sink.write(_plan(c))
    c.start(0)
    _run_through(c, 10)
    subprocess.run(["mount", "-o", "remount,ro", tmpfs], check=True, timeout=60)
    _run_through(c, 30, 11)
    assert sink.error is not None and "Read-only file system" in sink.error
    subprocess.run(["mount", "-o", "remount,rw", tmpfs], check=True, timeout=60)
    _run_through(c, ITERS, 31)
    c.final(ITERS)
    records = _whole(os.path.join(log_dir, JSONL_NAME))
    assert [r["iteration"] for r in records if r["event"] == "counters"] == list(range(1, ITERS + 1))
    (gap,) = [r for r in records if r["event"] == "log_gap"]
    assert gap["missing"] == 0 and gap["missing_events"] == {} and records.index(gap) == 11  # before iteration 11
    assert len([w for w in _warnings(caplog) if "cannot write the run log" in w]) == 1
    main(["report", log_dir, "--json"])  # reads it whole: the gap says nothing is missing


def test_a_removed_log_dir_is_made_again_with_the_plan(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    log_dir = str(tmp_path / "epoch")
    sink = JsonlSink(log_dir)
    c = _counters(sink)
    sink.write(_plan(c))
    c.start(0)
    _run_through(c, 20)
    shutil.rmtree(log_dir)
    _run_through(c, ITERS, 21)
    c.final(ITERS)
    records = _whole(os.path.join(log_dir, JSONL_NAME))
    assert records[0]["event"] == "plan" and records[1]["event"] == "log_gap"
    assert records[1]["lost"] == 21 and records[1]["missing"] == 0  # the plan and 20 counters went with the file
    assert [r["iteration"] for r in records if r["event"] == "counters"] == list(range(21, ITERS + 1))
    capsys.readouterr()
    assert main(["report", log_dir]) == 2  # no --html or --json: still one line
    assert main(["report", log_dir, "--json"]) == 0
    (missing,) = json.loads(capsys.readouterr().out)["missing"]
    assert "the 21 records written before it are not in this file" in missing["label"]


def test_the_full_device_as_the_log_never_raises_and_says_what_is_lost(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    _root()
    log_dir = tmp_path / "epoch"
    log_dir.mkdir()
    os.mknod(log_dir / JSONL_NAME, 0o666 | 0o020000, os.makedev(1, 7))  # the kernel's full device
    sink = JsonlSink(str(log_dir), max_pending=3)
    c = _counters(sink)
    sink.write(_plan(c))
    c.start(0)
    _run_through(c, ITERS)
    report = c.final(ITERS)
    assert {n: v["samples"] for n, v in report["sources"].items()} == _expected(c, ITERS)
    sink.close()
    warned = _warnings(caplog)
    assert len([w for w in warned if "cannot write the run log" in w]) == 1
    (lost,) = [w for w in warned if "are lost with this process" in w]
    assert str(log_dir / JSONL_NAME) in lost and "No space left on device" in lost
    assert os.stat(log_dir / JSONL_NAME).st_rdev == os.makedev(1, 7)  # still the device, not replaced


def test_a_line_torn_by_a_crash_is_closed_and_named(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    log_dir = str(tmp_path / "epoch")
    sink = JsonlSink(log_dir)
    c = _counters(sink)
    sink.write(_plan(c))
    c.start(0)
    _run_through(c, 10)
    path = os.path.join(log_dir, JSONL_NAME)
    with open(path, "ab") as f:  # a crash in the middle of a write, by an older writer
        f.write(b'{"time": 1.0, "event": "counters", "iteration": 11, "sour')
    _run_through(c, ITERS, 12)
    c.final(ITERS)
    found = read_jsonl(path)
    torn = [(n, r) for n, r in found if r["event"] == "torn_line"]
    assert [n for n, _ in torn] == [12]  # its own line: the next record starts on a new one
    assert [r["iteration"] for _, r in found if r["event"] == "counters"] == list(range(1, 11)) + list(range(12, 61))
    assert main(["report", log_dir, "--json"]) == 0
    (missing,) = json.loads(capsys.readouterr().out)["missing"]
    assert missing["events"] == {"counters": {"records": 1, "iterations": [11, 11]}}
    # an older writer appended the next record to the torn line: both are read
    with open(path, encoding="utf-8") as f:
        text = f.read().splitlines()
    joined = tmp_path / "joined.jsonl"
    joined.write_text("\n".join(text[:11] + [text[11] + text[12]] + text[13:]) + "\n")
    rl = run_log.read_run(str(joined))
    assert [m.line for m in rl.missing] == [12] and rl.launches[0].counters[10].iteration == 12


def test_a_failing_scalar_writer_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        calls = 0

        def add_scalar(self, tag: str, value: float, step: int) -> None:
            Broken.calls += 1
            raise OSError(28, "No space left on device")

    write = scalars_writer(Broken())
    assert write is not None
    for step in range(5):
        write({"neox_epoch/passes/a": 0.5}, step)
    assert Broken.calls == 5  # tried every time: it may work again
    assert len([w for w in _warnings(caplog) if "cannot write the TensorBoard scalars" in w]) == 1
