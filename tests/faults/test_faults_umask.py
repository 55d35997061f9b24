"""Fault suite, modes: a new file gets the mode the umask gives (0o666 & ~umask), an existing file keeps its mode.

On main before the output policy every atomic writer created its files 0600 whatever the umask (the temporary
file's mode), and turned an existing 0644 file into 0600: other users and jobs on shared storage could not read
them. Each writer runs in a process with the umask set (022, 027, 077); the hooks' resume state and the index
caches, written inside training, run through their functions in such a process.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from typing import Any

import pytest
from faults_util import ROOT, batch_config, cli, corpus, neox_cache, plan_config, run_log, temps

UMASKS = (0o022, 0o027, 0o077)

STATE = """
import sys
from neox_epoch.neox.resume_state import ResumeState, TrainBuild, write_state
write_state(sys.argv[1], ResumeState(iteration=10, consumed_samples=40, train_batch_size=4, loader_batch=4,
                                     samples_total=80, train_iters=20, builds={"train": TrainBuild(80, 1, 90)},
                                     seq_length=128))
"""
CACHE = """
import sys
import numpy as np
from neox_epoch.semantics.neox_index import save_atomic
save_atomic(sys.argv[1] + "/web_train_indexmap_80ns_32sl_1234s_packedpi_ac_doc_idx.npy", np.arange(10))
"""


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = str(tmp_path_factory.mktemp("umask"))
    prefix = corpus(os.path.join(d, "data"))
    w = {"dir": d, "config": plan_config(d, prefix), "cache": neox_cache(d), "log": run_log(d)}
    w["batch"], _ = batch_config(d)
    w["demo_configs"] = os.path.join(d, "demo_configs")  # one config: the demo refuses a folder without any
    os.mkdir(w["demo_configs"])
    plan_config(w["demo_configs"], prefix)
    return w


def _python(code: str, arg: str, umask: int) -> None:
    p = subprocess.run(
        [sys.executable, "-c", code, arg],
        env={**os.environ, "PYTHONPATH": ROOT},
        preexec_fn=lambda: os.umask(umask),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr


#: writer -> (how to run it into folder OUT, the files it writes there)
WRITERS = {
    "plan --write-config": (["plan", "{config}", "--write-config", "{out}/exact.yml"], ["exact.yml"]),
    "check-batch --fix": (["check-batch", "{batch}", "--fix", "{out}/fixed.yml"], ["fixed.yml"]),
    "audit --manifest": (
        ["audit", "{cache}", "--consumed", "40", "--manifest", "{out}/m.csv", "--no-progress"],
        ["m.csv"],
    ),
    "audit --plot": (["audit", "{cache}", "--consumed", "40", "--plot", "{out}/e.svg", "--no-progress"], ["e.svg"]),
    "report --html": (["report", "{log}", "--html", "{out}/run.html"], ["run.html"]),
    "demo corpus": (
        ["demo", "--data-dir", "{out}", "--configs", "{demo_configs}"],
        [f"{n}_text_document.{e}" for n in ("web", "code", "books") for e in ("bin", "idx")],
    ),
    "hooks resume state": (STATE, ["neox_epoch_state.json"]),
    "hooks index cache": (CACHE, ["web_train_indexmap_80ns_32sl_1234s_packedpi_ac_doc_idx.npy"]),
}


def _write(work: dict[str, str], writer: str, out: str, umask: int) -> None:
    how, _ = WRITERS[writer]
    if isinstance(how, str):
        _python(how, out, umask)
        return
    code, _, err = cli([a.format(out=out, **work) for a in how], umask=umask)
    assert code in (0, 1), err  # check-batch --fix of an inconsistent config: 1


def _modes(folder: str, names: list[str]) -> dict[str, int]:
    return {n: stat.S_IMODE(os.stat(os.path.join(folder, n)).st_mode) for n in names}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_new_files_get_the_umask_mode(work: dict[str, str], tmp_path: Any, writer: str) -> None:
    names = WRITERS[writer][1]
    for umask in UMASKS:
        out = tmp_path / f"u{umask:03o}"
        out.mkdir()
        _write(work, writer, str(out), umask)
        assert _modes(str(out), names) == dict.fromkeys(names, 0o666 & ~umask), oct(umask)
        assert temps(str(out)) == []


@pytest.mark.parametrize("writer", ["plan --write-config", "audit --manifest", "report --html", "hooks resume state"])
def test_an_existing_file_keeps_its_mode(work: dict[str, str], tmp_path: Any, writer: str) -> None:
    """0644 stays 0644 under umask 077, 0600 stays 0600 under umask 022 (the content is replaced)."""
    (name,) = WRITERS[writer][1]
    for mode, umask in ((0o644, 0o077), (0o600, 0o022)):
        path = tmp_path / name
        path.write_text("old\n")
        os.chmod(path, mode)
        _write(work, writer, str(tmp_path), umask)
        assert stat.S_IMODE(os.stat(path).st_mode) == mode
        assert path.read_text() != "old\n"
    assert temps(str(tmp_path)) == []
