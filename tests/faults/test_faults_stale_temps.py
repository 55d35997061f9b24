"""Fault suite, leftovers: where O_TMPFILE is not available the temporary file has a name from the start
(``.OUT.neox-epoch-PID-HOST.tmp``); a writer killed then leaves it, and the next write to that directory
removes it because its process is gone. Temporary files of live processes and of other hosts stay."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from faults_util import ROOT, cli, corpus, plan_config, run_log

from neox_epoch.util.atomic import temp_name

HERE = os.path.dirname(os.path.abspath(__file__))


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_next_writer_removes_the_temporary_files_of_dead_writers_only(tmp_path: Any) -> None:
    log = run_log(str(tmp_path / "in"))
    out = tmp_path / "out"
    out.mkdir()
    target = str(out / "run.html")
    dead = temp_name(target, _dead_pid())
    live = temp_name(target, os.getpid())
    other_host = str(out / ".run.html.neox-epoch-1-00000000.tmp")
    for path in (dead, live, other_host):
        with open(path, "w", encoding="utf-8") as f:
            f.write("partial")
    code, _, err = cli(["report", log, "--html", target])
    assert code == 0, err
    assert sorted(os.listdir(out)) == sorted(["run.html", os.path.basename(live), os.path.basename(other_host)])


def test_kill_9_without_o_tmpfile_heals(tmp_path: Any) -> None:
    """kill -9 at seeded moments of two writers with named temporary files (2 x 16 runs): old or new content;
    a temporary file a kill left is removed by the next write."""
    d = str(tmp_path)
    prefix = corpus(os.path.join(d, "data"))
    config, log = plan_config(d, prefix), run_log(d)
    os.mkdir(os.path.join(d, "out"))
    writers = [
        {
            "name": "report --html",
            "argv": ["report", log, "--html", f"{d}/out/run.html"],
            "files": {f"{d}/out/run.html": "old\n"},
        },
        {
            "name": "plan --write-config",
            "argv": ["plan", config, "--write-config", f"{d}/out/exact.yml"],
            "files": {f"{d}/out/exact.yml": "old\n"},
        },
    ]
    with open(os.path.join(d, "spec.json"), "w", encoding="utf-8") as f:
        json.dump({"seed": 11, "runs": 16, "no_tmpfile": True, "writers": writers}, f)
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
        results = json.load(f)
    for r in results:
        assert r["runs"] == 16 and r["torn"] == [] and r["mixed"] == 0, r
        assert r["unhealed"] == [] and r["temps_left"] == r["healed"], r
    print(
        "; ".join(
            f"{r['name']}: old {r['old']}, new {r['new']}, temporary left then removed {r['healed']}" for r in results
        )
    )
