"""Fault suite, the environment: standard output full (a device node 1,7 made in a temporary folder, never the
system's /dev/full) or closed (fd 1 closed in the child) is exit 2 with one line on stderr, never exit 3 and never
a silent exit 0; a pipe closed by its reader (``| head``) stays exit 0. Each case asserts the exit code, the one
line and that no input changed (hash and mode).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from faults_util import ROOT, cli, corpus, neox_cache, plan_config, refused, run_log, tree


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = str(tmp_path_factory.mktemp("environment"))
    prefix = corpus(os.path.join(d, "data"))
    return {"dir": d, "config": plan_config(d, prefix), "cache": neox_cache(d), "log": run_log(d)}


COMMANDS = {
    "plan": ["plan", "{config}"],
    "plan --json": ["plan", "{config}", "--json"],
    "audit --json": ["audit", "{cache}", "--consumed", "40", "--json", "--no-progress"],
    "report --json": ["report", "{log}", "--json"],
}


def _run(argv: list[str], stdout: str | None) -> tuple[int, str, str]:
    """The CLI with its stdout on the file ``stdout`` (opened for writing), or with fd 1 closed (None)."""
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    if stdout is None:
        p = subprocess.run(
            [sys.executable, "-m", "neox_epoch.cli", *argv],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            preexec_fn=lambda: os.close(1),
        )
        return p.returncode, "", p.stderr
    with open(stdout, "w") as out:
        p = subprocess.run(
            [sys.executable, "-m", "neox_epoch.cli", *argv],
            env=env,
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    return p.returncode, "", p.stderr


def _full_device(folder: str) -> str:
    path = os.path.join(folder, "full")
    if not os.path.exists(path):
        try:
            os.mknod(path, 0o20666, os.makedev(1, 7))
        except PermissionError:
            pytest.skip("mknod needs root (CAP_MKNOD)")
    return path


@pytest.mark.parametrize("name", COMMANDS)
def test_stdout_full_is_exit_2(work: dict[str, str], name: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    argv = [a.format(**work) for a in COMMANDS[name]]
    device = _full_device(str(tmp_path))
    before = tree(work["dir"])
    refused(
        _run(argv, device),
        argv[0],
        "standard output: cannot write the result (No space left on device)",
        "redirect it to another file",
    )
    assert tree(work["dir"]) == before


@pytest.mark.parametrize("name", ["plan", "audit --json"])
def test_stdout_closed_is_exit_2(work: dict[str, str], name: str) -> None:
    argv = [a.format(**work) for a in COMMANDS[name]]
    before = tree(work["dir"])
    refused(_run(argv, None), argv[0], "standard output is closed", "redirect it to a file or to /dev/null")
    assert tree(work["dir"]) == before


def test_a_pipe_closed_by_its_reader_stays_exit_0(work: dict[str, str]) -> None:
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.run(
        f"{sys.executable} -m neox_epoch.cli plan {work['config']} | head -c 10 >/dev/null; echo ${{PIPESTATUS[0]}}",
        shell=True,
        executable="/bin/bash",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.stdout.strip() == "0", p.stderr
    assert "Traceback" not in p.stderr and "internal error" not in p.stderr


def test_stdout_to_a_regular_file_still_works(work: dict[str, str], tmp_path) -> None:  # type: ignore[no-untyped-def]
    code, out, err = cli(["plan", work["config"], "--json"])
    assert code == 0 and out.startswith("{") and err == ""
