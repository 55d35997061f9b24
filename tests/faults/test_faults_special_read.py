"""Special files given as inputs (FIFOs, device nodes made in a temp folder, sockets, directories) and unreadable
files: exit 2 (or the audit's finding, exit 1) with one line naming the file and what it is, never a hang, never an
unbounded read, never exit 3; nothing is written to or changes any input or special file."""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile

import pytest

from neox_epoch.formats.corpus import write_corpus
from tests.audit.test_audit_unit import write_neox_index

KINDS = {
    "fifo": "a FIFO",
    "zero": "a character device",
    "null": "a character device",
    "socket": "a socket",
    "directory": "a directory",
}
MEGATRON = [
    "--framework-version",
    "0.16.1",
    "--split",
    "100,0,0",
    "--seq-length",
    "8",
    "--global-batch-size",
    "2",
    "--micro-batch-size",
    "1",
    "--lr",
    "1e-4",
    "--eval-interval",
    "10",
    "--train-iters",
    "3",
]


def make_special(path: str, kind: str) -> None:
    """A special file of ``kind`` at ``path`` (device nodes are our own, made with mknod: never the real /dev)."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind in ("zero", "null"):
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 5 if kind == "zero" else 3))
    elif kind == "socket":
        short = tempfile.mkdtemp()  # (a socket's path is at most 107 bytes: bound there, then moved)
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(os.path.join(short, "s"))
        os.rename(os.path.join(short, "s"), path)
        os.rmdir(short)
    else:
        os.mkdir(path)


def snapshot(directory: str) -> dict[str, tuple]:
    """Every entry's mode (and device number), and the sha256 of the regular files' bytes."""
    out: dict[str, tuple] = {}
    for root, dirs, files in os.walk(directory):
        for name in dirs + files:
            path = os.path.join(root, name)
            st = os.lstat(path)
            digest = ""
            if stat.S_ISREG(st.st_mode):
                with open(path, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
            out[os.path.relpath(path, directory)] = (st.st_mode, st.st_rdev, digest)
    return out


DROP = """import contextlib, io, os, sys
from neox_epoch.cli import main
uid = int(sys.argv.pop(1))
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    main(sys.argv[1:])  # as root first: every module the command imports is loaded (the interpreter's own files
                        # may not be readable by that user)
os.setgroups([]); os.setgid(uid); os.setuid(uid)
sys.exit(main(sys.argv[1:]))"""


def cli(args: list[str], user: int | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI in a fresh interpreter; ``user``: imported as root, then run as that uid (we are root: permission
    denied needs another user; the interpreter itself may not be reachable by that user)."""
    head = ["-m", "neox_epoch.cli"] if user is None else ["-c", DROP, str(user)]
    return subprocess.run([sys.executable, *head, *args], capture_output=True, text=True, timeout=60)


def one_line(result: subprocess.CompletedProcess[str], code: int, *words: str) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == code, result.stderr
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert all(word in lines[0] for word in words), lines[0]
    return lines[0]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_special_config(tmp_path, kind):  # type: ignore[no-untyped-def]
    path = str(tmp_path / "neox.yml")
    make_special(path, kind)
    before = snapshot(str(tmp_path))
    one_line(cli(["plan", path]), 2, path, KINDS[kind])
    assert snapshot(str(tmp_path)) == before


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_special_idx(tmp_path, kind):  # type: ignore[no-untyped-def]
    """A FIFO, device, socket or directory .idx: "is a FIFO" (it said "file not found"), never a hang."""
    prefix = str(tmp_path / "web")
    write_corpus(prefix, [list(range(20))] * 4)
    os.remove(prefix + ".idx")
    make_special(prefix + ".idx", kind)
    before = snapshot(str(tmp_path))
    one_line(cli(["plan", "--data-path", prefix, *MEGATRON]), 2, prefix + ".idx", KINDS[kind])
    assert snapshot(str(tmp_path)) == before


@pytest.mark.parametrize("kind", ["fifo", "zero", "directory"])
def test_special_bin(tmp_path, kind):  # type: ignore[no-untyped-def]
    prefix = str(tmp_path / "web")
    write_corpus(prefix, [list(range(20))] * 4)
    os.remove(prefix + ".bin")
    make_special(prefix + ".bin", kind)
    before = snapshot(str(tmp_path))
    one_line(cli(["plan", "--data-path", prefix, *MEGATRON]), 2, prefix + ".bin", KINDS[kind])
    assert snapshot(str(tmp_path)) == before


def test_unreadable_idx_as_another_user(tmp_path):  # type: ignore[no-untyped-def]
    """Permission denied on the .idx (exit 3 before): one line, exit 2, run as nobody (uid 65534)."""
    data = tmp_path / "data"
    data.mkdir()
    prefix = str(data / "web")
    write_corpus(prefix, [list(range(20))] * 4)
    os.chmod(prefix + ".idx", 0o600)
    os.chmod(str(data), 0o755)
    os.chmod(str(tmp_path), 0o755)
    before = snapshot(str(tmp_path))
    one_line(cli(["plan", "--data-path", prefix, *MEGATRON], user=65534), 2, prefix + ".idx", "permission denied")
    assert snapshot(str(tmp_path)) == before


@pytest.mark.parametrize("kind", ["fifo", "zero", "socket"])
def test_special_npy_in_audit(tmp_path, kind):  # type: ignore[no-untyped-def]
    """An index file of the cache that is a FIFO or a device: a finding naming it (exit 1), the rest audited."""
    write_neox_index(str(tmp_path), "h", [30, 12, 55, 7, 21, 40], 8, 2)
    _, arr = write_neox_index(str(tmp_path), "d", [25, 3, 41, 8, 19, 33, 2, 16], 8, 2)
    path = arr["base"] + "_shuffle_idx.npy"
    os.remove(path)
    make_special(path, kind)
    before = snapshot(str(tmp_path))
    out = cli(["audit", str(tmp_path), "--consumed", "20", "--no-progress"])
    assert out.returncode == 1, out.stderr
    assert f"{path}: file type: expected a .npy index file, found is {KINDS[kind]}" in out.stdout, out.stdout
    assert snapshot(str(tmp_path)) == before


@pytest.mark.parametrize("kind", ["fifo", "zero", "directory"])
def test_special_run_log(tmp_path, kind):  # type: ignore[no-untyped-def]
    """A run log that is a FIFO or /dev/zero-like: one line, exit 2 (the reader never blocks or reads forever)."""
    from neox_epoch.errors import ConfigError
    from neox_epoch.formats.runlog import read_jsonl

    path = str(tmp_path / "neox_epoch.jsonl")
    make_special(path, kind)
    before = snapshot(str(tmp_path))
    with pytest.raises(ConfigError, match=f"{KINDS[kind]}.*; expected a run log"):
        read_jsonl(path)
    assert snapshot(str(tmp_path)) == before


def test_no_special_file_left_behind(tmp_path):  # type: ignore[no-untyped-def]
    """The helpers make their nodes only inside the temp folder."""
    for kind in KINDS:
        make_special(str(tmp_path / kind), kind)
    assert sorted(os.listdir(tmp_path)) == sorted(KINDS)
    shutil.rmtree(tmp_path)
