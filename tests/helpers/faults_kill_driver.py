"""kill -9 at random moments of each writer (run by test_faults_kill.py in its own process).

``python faults_kill_driver.py SPEC.json RESULT.json``. SPEC: ``{"seed": S, "runs": N, "writers": [{"name",
"argv" (neox-epoch's arguments) or "python" (code run in the child), "files": {path: old text or null}}]}``.

Per writer: the files are set to their old state and the writer runs once to its end in this process (so the
children start warm: the kill lands in the command's own work, not in Python's start-up) which gives the new
content and, timed in a forked child, the writer's wall time. Then N times: old state restored, a child forked
that runs ``neox_epoch.cli.main(argv)`` (what ``python -m neox_epoch.cli`` runs), killed with SIGKILL after a
delay drawn uniformly from [0, 1.2 x wall time] (seeded), and each file checked: the old content or the complete
new one, and no temporary file left beside it (a leftover is counted, then a complete run must remove it).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import signal
import sys
import time
from typing import Any

from neox_epoch.cli import main


def _restore(files: dict[str, str | None]) -> None:
    for path, old in files.items():
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        if old is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(old)


def _body(writer: dict[str, Any]) -> int:
    if "python" in writer:
        exec(compile(writer["python"], "<writer>", "exec"), {})  # noqa: S102 (the test's own code)
        return 0
    return main(list(writer["argv"]))


def _child(writer: dict[str, Any]) -> int:
    pid = os.fork()
    if pid == 0:
        code = 99
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(null, 2)
            code = _body(writer)
        finally:
            os._exit(code)
    return pid


def _wait(pid: int, timeout: float = 60.0) -> int:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.002)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise RuntimeError("writer did not finish in time")


def _state(files: dict[str, str | None]) -> dict[str, bytes | None]:
    out: dict[str, bytes | None] = {}
    for path in files:
        try:
            with open(path, "rb") as f:
                out[path] = f.read()
        except FileNotFoundError:
            out[path] = None
    return out


def _temps(files: dict[str, str | None]) -> list[str]:
    dirs = {os.path.dirname(p) for p in files}
    return sorted(os.path.join(d, n) for d in dirs for n in os.listdir(d) if ".neox-epoch-" in n or n.endswith(".tmp"))


def run_writer(writer: dict[str, Any], runs: int, rng: random.Random) -> dict[str, Any]:
    files = writer["files"]
    _restore(files)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        _body(writer)  # warm: every lazy import done before the children fork
    new = _state(files)
    old = {p: (None if t is None else t.encode("utf-8")) for p, t in files.items()}
    walls = []
    for _ in range(2):
        _restore(files)
        start = time.monotonic()
        _wait(_child(writer))
        walls.append(time.monotonic() - start)
    assert _state(files) == new, f"{writer['name']}: a second complete run wrote other content"
    wall = min(walls)
    result: dict[str, Any] = {
        "name": writer["name"],
        "wall": wall,
        "runs": 0,
        "old": 0,
        "new": 0,
        "mixed": 0,
        "torn": [],
        "temps_left": 0,
        "healed": 0,
        "unhealed": [],
    }
    for _ in range(runs):
        _restore(files)
        delay = rng.uniform(0.0, 1.2 * wall)
        pid = _child(writer)
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)  # a finished child is a zombie until waited for: never another process
        os.waitpid(pid, 0)
        result["runs"] += 1
        now = _state(files)
        per_file = ["old" if now[p] == old[p] else "new" if now[p] == new[p] else "torn" for p in files]
        if "torn" in per_file:
            result["torn"].append({"delay": delay, "files": dict(zip(files, per_file))})
        result["old" if set(per_file) == {"old"} else "new" if set(per_file) == {"new"} else "mixed"] += 1
        left = _temps(files)
        if left:
            result["temps_left"] += 1
            _restore(files)
            _wait(_child(writer))
            if _temps(files):
                result["unhealed"].append(_temps(files))
            else:
                result["healed"] += 1
    return result


def run(spec: dict[str, Any]) -> list[dict[str, Any]]:
    if spec.get("no_tmpfile"):  # as on a filesystem without O_TMPFILE: the temporary file is named from the start
        del os.O_TMPFILE
    rng = random.Random(spec["seed"])
    return [run_writer(writer, spec["runs"], rng) for writer in spec["writers"]]


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    results = run(spec)
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)
