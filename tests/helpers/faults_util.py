"""Shared by the fault suite: the real CLI in a subprocess, the writers' inputs, snapshots of files.

Every writer is run as a user runs it: ``python -m neox_epoch.cli ...`` with the stack's interpreter (the one
running the tests), on inputs written by the project's own writers (``write_random_corpus``, the hooks' run log
writers through tests/helpers/run_logs.py) or copied from tests/fixtures.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import yaml

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(TESTS)
NEOX_CACHE = os.path.join(TESTS, "fixtures", "neox", "neox_cache")


def cli(
    args: list[str], cwd: str | None = None, umask: int | None = None, timeout: float = 120
) -> tuple[int, str, str]:
    """``python -m neox_epoch.cli ARGS`` with this stack's interpreter: (exit code, stdout, stderr)."""
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}

    def preexec() -> None:
        if umask is not None:
            os.umask(umask)

    p = subprocess.run(
        [sys.executable, "-m", "neox_epoch.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=preexec,
    )
    return p.returncode, p.stdout, p.stderr


def refused(result: tuple[int, str, str], command: str, *needles: str) -> str:
    """Exit 2, one stderr line in the CLI's error format, no traceback, ``needles`` in it; returns the line."""
    code, _, err = result
    assert code == 2, (code, err)
    assert "Traceback" not in err, err
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1, err
    assert lines[0].startswith(f"neox-epoch {command}: error: "), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@dataclass(frozen=True)
class Snap:
    """What a path is: its type and permission bits (lstat), inode, device number, and content hash (regular)."""

    kind: int
    mode: int
    ino: int
    rdev: int
    sha256: str | None


def snap(path: str) -> Snap | None:
    """A snapshot of ``path`` (None when absent); special files are never opened."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    digest = None
    if stat.S_ISREG(st.st_mode):
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
    return Snap(stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_ino, st.st_rdev, digest)


def snaps(paths: list[str]) -> dict[str, Snap | None]:
    return {p: snap(p) for p in paths}


def tree(directory: str) -> dict[str, Snap | None]:
    """Snapshots of every entry under ``directory`` (names relative to it)."""
    out: dict[str, Snap | None] = {}
    for root, dirs, files in os.walk(directory):
        for name in dirs + files:
            full = os.path.join(root, name)
            out[os.path.relpath(full, directory)] = snap(full)
    return out


def temps(directory: str) -> list[str]:
    """Temporary files a writer left (ours: ``.NAME.neox-epoch-PID-HOST.tmp``; any ``*.tmp``)."""
    return sorted(n for n in os.listdir(directory) if ".neox-epoch-" in n or n.endswith(".tmp"))


# ----------------------------------------------------------------------------------------------------------
# inputs of each writer


def corpus(directory: str, name: str = "small", seed: int = 3, docs: int = 60) -> str:
    """A real .bin/.idx corpus; returns its prefix."""
    from neox_epoch.formats.corpus import write_random_corpus

    os.makedirs(directory, exist_ok=True)
    prefix = os.path.join(directory, name)
    write_random_corpus(prefix, seed, docs, 5, 200)
    return prefix


def plan_config(directory: str, prefix: str, name: str = "run.yml") -> str:
    """A NeoX config over ``prefix`` with a neox_epoch block: ``plan CFG --write-config OUT`` writes an overlay."""
    values: dict[str, Any] = {
        "train_data_paths": [prefix],
        "valid_data_paths": [prefix],
        "test_data_paths": [prefix],
        "train_data_weights": [1.0],
        "seq_length": 32,
        "train_batch_size": 4,
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 1,
        "global_num_gpus": 1,
        "eval_interval": 1000,
        "eval_iters": 1,
        "train_iters": 10,
        "lr_decay_iters": 10,
        "neox_epoch": {"epochs": 1},
    }
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(values, f, sort_keys=False)
    return path


def batch_config(directory: str) -> tuple[str, str]:
    """A NeoX config inconsistent with its hostfile's world (dp 4: 4 x 2 x 4 = 32, not 16) and the
    hostfile: ``check-batch CFG --fix OUT`` writes a consistent config. Returns (config, hostfile)."""
    hostfile = os.path.join(directory, "hosts")
    with open(hostfile, "w", encoding="utf-8") as f:
        f.write("localhost slots=4\n")
    path = os.path.join(directory, "batch.yml")
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(
            {
                "train_batch_size": 16,
                "train_micro_batch_size_per_gpu": 4,
                "gradient_accumulation_steps": 2,
                "hostfile": hostfile,
            },
            f,
            sort_keys=False,
        )
    return path, hostfile


def neox_cache(directory: str) -> str:
    """A copy of the NeoX index cache fixture (its .bin/.idx and *_idx.npy files): ``audit DIR --consumed N``."""
    dest = os.path.join(directory, "neox_cache")
    shutil.copytree(NEOX_CACHE, dest)
    return dest


def run_log(directory: str) -> str:
    """A run log directory (neox_epoch.jsonl) written by the hooks' writers; returns the directory."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from run_logs import blend_values, launch

    from neox_epoch.formats.neox_config import EpochBlock

    prefixes = [corpus(os.path.join(directory, "data"), n, i + 1, 40) for i, n in enumerate(("web", "code"))]
    log_dir = os.path.join(directory, "logs")
    launch(log_dir, blend_values(prefixes, [1.0, 1.0], 32, 4), EpochBlock(epochs=1), 0, None, 5)
    return log_dir


def audit_json(directory: str, cache: str) -> str:
    """``audit CACHE --consumed 40 --json`` saved: the ``report --audit`` input."""
    code, out, err = cli(["audit", cache, "--consumed", "40", "--json", "--no-progress"])
    assert code in (0, 1), err
    path = os.path.join(directory, "audit.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write(out)
    return path
