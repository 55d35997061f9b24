"""Fault suite, special files and the environment: no writer replaces anything but a regular file, and a write
that the system refuses (disk full, read-only) is exit 2 in one line, never exit 3.

Special files are made in a temporary folder (never the system's /dev): character devices 1,3 (as /dev/null)
and 1,7 (as /dev/full) with mknod (root only: skipped otherwise), a FIFO, a unix socket, a directory and a
symlink to a FIFO. Each case asserts the exit code, the one-line message and that the special file is still
the same node (type, mode, inode, device numbers) and that nothing else in the folder changed.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from typing import Any

import pytest
from faults_util import ROOT, batch_config, cli, corpus, neox_cache, plan_config, refused, run_log, snap, temps, tree


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = str(tmp_path_factory.mktemp("special"))
    prefix = corpus(os.path.join(d, "data"))
    w = {"dir": d, "config": plan_config(d, prefix), "cache": neox_cache(d), "log": run_log(d)}
    w["batch"], _ = batch_config(d)
    return w


def _special(kind: str, folder: str) -> str:
    """A special file of ``kind`` named like each writer's output (``out.yml``: the config writers check it first)."""
    path = os.path.join(folder, "out.yml")
    if kind in ("null", "full"):
        try:
            os.mknod(path, 0o20666, os.makedev(1, 3 if kind == "null" else 7))
        except PermissionError:
            pytest.skip("mknod needs root (CAP_MKNOD); the FIFO, socket and directory cases run")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(path)
        s.close()
    elif kind == "dir":
        os.mkdir(path)
    elif kind == "symlink-to-fifo":
        os.mkfifo(os.path.join(folder, "pipe"))
        os.symlink("pipe", path)
    return path


KINDS = {
    "null": "a character device",
    "full": "a character device",
    "fifo": "a FIFO",
    "socket": "a socket",
    "dir": "is a directory",
    "symlink-to-fifo": "a FIFO",
}
WRITERS = {
    "report --html": (["report", "{log}", "--html", "{out}"], "report", "--html"),
    "audit --manifest": (
        ["audit", "{cache}", "--consumed", "40", "--manifest", "{out}", "--no-progress"],
        "audit",
        "--manifest",
    ),
    "audit --plot": (["audit", "{cache}", "--consumed", "40", "--plot", "{out}", "--no-progress"], "audit", "--plot"),
    "plan --write-config": (["plan", "{config}", "--write-config", "{out}"], "plan", "--write-config"),
    "check-batch --fix": (["check-batch", "{batch}", "--fix", "{out}"], "check-batch", "--fix"),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_writer_never_replaces_a_special_file(work: dict[str, str], tmp_path: Any, writer: str, kind: str) -> None:
    out = _special(kind, str(tmp_path))
    args, command, option = WRITERS[writer]
    before, inputs = tree(str(tmp_path)), tree(work["dir"])
    refused(cli([a.format(out=out, **work) for a in args], timeout=60), command, option, KINDS[kind])
    assert tree(str(tmp_path)) == before
    assert tree(work["dir"]) == inputs


@pytest.mark.parametrize("kind", ["fifo", "null"])
def test_demo_never_replaces_a_special_file(tmp_path: Any, kind: str) -> None:
    """The demo corpus: a FIFO or device where a .bin goes is refused, the node stays."""
    data = tmp_path / "data"
    data.mkdir()
    (tmp_path / "configs").mkdir()  # one config: the demo refuses a configs folder without any
    plan_config(str(tmp_path / "configs"), str(data / "web_text_document"))
    special = _special(kind, str(tmp_path))
    os.rename(special, data / "web_text_document.bin")
    before = tree(str(tmp_path))
    refused(
        cli(["demo", "--data-dir", str(data), "--configs", str(tmp_path / "configs")]),
        "demo",
        "--data-dir",
        "web_text_document.bin",
        "a FIFO" if kind == "fifo" else "a character device",
    )
    after = tree(str(tmp_path))
    assert after["data/web_text_document.bin"] == before["data/web_text_document.bin"]


def test_bad_plot_extension_is_exit_2(work: dict[str, str], tmp_path: Any) -> None:
    """--plot draws SVG: another extension (here .png, matplotlib's old default) is refused before the audit."""
    out = str(tmp_path / "exposure.png")
    refused(
        cli(["audit", work["cache"], "--consumed", "40", "--plot", out, "--no-progress"]),
        "audit",
        "--plot",
        "an SVG image",
        "not .png",
        "exposure.svg",
    )
    assert os.listdir(tmp_path) == []


# ----------------------------------------------------------------------------------------------------------
# disk full and read-only: a tmpfs of its own, mounted in a private mount namespace (gone with the process)


def _in_namespace(setup: str, args: list[str], cwd: str) -> tuple[int, str, str]:
    """Run ``setup`` (shell: mounts ``$D``) then the CLI with ``args``, in a private mount namespace."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no private mount namespace here (unshare -m: {probe.stderr.decode().strip()})")
    env = {**os.environ, "D": os.path.join(cwd, "mnt"), "PYTHONPATH": ROOT}
    script = f'{setup} && exec "$0" -m neox_epoch.cli "$@"'
    p = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script, sys.executable, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if "mount:" in p.stderr:
        pytest.skip(f"tmpfs cannot be mounted here: {p.stderr.strip()}")
    return p.returncode, p.stdout, p.stderr


FULL = 'mount -t tmpfs -o size=64k tmpfs "$D" && (head -c 1048576 /dev/zero > "$D/fill" 2>/dev/null; true)'
READ_ONLY = 'mount -t tmpfs -o ro,size=64k tmpfs "$D"'
ENVIRONMENT = {
    "report --html disk full": (
        FULL,
        ["report", "{log}", "--html", "mnt/run.html"],
        "report",
        ["--html", "No space left on device", "free space"],
    ),
    "audit --manifest disk full": (
        FULL,
        ["audit", "{cache}", "--consumed", "40", "--manifest", "mnt/m.csv", "--no-progress"],
        "audit",
        ["--manifest", "No space left on device"],
    ),
    "report --html read-only": (
        READ_ONLY,
        ["report", "{log}", "--html", "mnt/run.html"],
        "report",
        ["--html", "Read-only file system", "writable"],
    ),
    "audit --manifest read-only": (
        READ_ONLY,
        ["audit", "{cache}", "--consumed", "40", "--manifest", "mnt/m.csv", "--no-progress"],
        "audit",
        ["--manifest", "Read-only file system"],
    ),
    "plan --write-config read-only": (
        READ_ONLY,
        ["plan", "{config}", "--write-config", "mnt/exact.yml"],
        "plan",
        ["--write-config", "Read-only file system"],
    ),
}


@pytest.mark.parametrize("case", sorted(ENVIRONMENT))
def test_full_or_read_only_disk_is_exit_2(work: dict[str, str], tmp_path: Any, case: str) -> None:
    setup, args, command, needles = ENVIRONMENT[case]
    (tmp_path / "mnt").mkdir()
    inputs = tree(work["dir"])
    refused(_in_namespace(setup, [a.format(**work) for a in args], str(tmp_path)), command, *needles)
    assert tree(work["dir"]) == inputs
    assert os.listdir(tmp_path / "mnt") == []  # the tmpfs is gone with its namespace; nothing leaked here
    assert temps(str(tmp_path)) == []


def test_a_directory_as_out_is_exit_2(work: dict[str, str], tmp_path: Any) -> None:
    for args, command, option in (WRITERS["report --html"], WRITERS["audit --manifest"]):
        refused(
            cli([a.format(out=str(tmp_path), **work) for a in args]),
            command,
            option,
            "is a directory; expected a file path",
        )
    assert snap(str(tmp_path)) is not None and os.listdir(tmp_path) == []


def _unprivileged(args: list[str], locked: str) -> tuple[list[str], str, bool]:
    """How to meet a permission error writing into ``locked``: (command, the error's words, chattr used). As a
    user: the directory's mode 0555. As root (who writes anywhere): the CLI as uid 65534 through setpriv when
    this interpreter runs as that user, else the directory made immutable (chattr +i: EPERM even for root)."""
    if os.geteuid() != 0:
        return args, "Permission denied", False
    drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    if shutil.which("setpriv"):
        probe = subprocess.run([*drop, sys.executable, "-c", "import numpy"], capture_output=True, text=True)
        if probe.returncode == 0:
            return [*drop, *args], "Permission denied", False
    if shutil.which("chattr") and subprocess.run(["chattr", "+i", locked], capture_output=True).returncode == 0:
        return args, "Operation not permitted", True
    pytest.skip("root, and neither setpriv to uid 65534 nor chattr +i works here: no permission error to meet")


def test_permission_denied_is_exit_2() -> None:
    """OUT in a directory the user may not write: exit 2 naming --html and the fix; inputs in a world-readable
    folder (for uid 65534), nothing changed."""
    import tempfile

    d = tempfile.mkdtemp(prefix="neox_epoch_faults_")
    locked = os.path.join(d, "locked")
    immutable = False
    try:
        os.chmod(d, 0o755)
        log = run_log(d)
        os.mkdir(locked)
        for root, dirs, files in os.walk(d):
            for name in dirs + files:
                os.chmod(os.path.join(root, name), 0o555 if name in dirs else 0o644)
        args = [sys.executable, "-m", "neox_epoch.cli", "report", log, "--html", os.path.join(locked, "run.html")]
        args, words, immutable = _unprivileged(args, locked)
        before = tree(d)
        p = subprocess.run(
            args, cwd=d, env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True, text=True, timeout=60
        )
        refused((p.returncode, p.stdout, p.stderr), "report", "--html", words, "write to a directory you may write to")
        assert tree(d) == before
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", locked], check=True)
        for root, dirs, _ in os.walk(d):
            for name in dirs:
                os.chmod(os.path.join(root, name), 0o755)
        shutil.rmtree(d)
