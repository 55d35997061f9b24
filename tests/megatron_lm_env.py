"""Find Megatron-LM's training code (tag core_v0.16.1) and run ``tests/megatron_lm_truth.py`` under it.

``megatron_lm_dir()`` is the one lookup: ``MEGATRON_LM_DIR`` if set, else the tarball
``../shared/vendor/Megatron-LM-core_v0.16.1.tar.gz`` (beside the repository) extracted once into
``.cache/`` (gitignored) with the installed megatron-core wheel's compiled ``helpers_cpp*.so`` copied in
(the tree's own megatron.core shadows the wheel's and ships no compiled helper). It can be swapped for
``tests/frameworks.py``'s ``megatron_lm_dir()`` when that lands. Returns None (tests skip) when neither
is available; ``LAST_FAILURE`` says why.
"""

from __future__ import annotations

import fcntl
import functools
import glob
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from importlib import metadata
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRUTH_SCRIPT = os.path.join(REPO, "tests", "megatron_lm_truth.py")
TARBALL = os.path.join(REPO, "..", "shared", "vendor", "Megatron-LM-core_v0.16.1.tar.gz")
CACHE = os.path.join(REPO, ".cache")
TREE = os.path.join(CACHE, "megatron-lm-core_v0.16.1", "Megatron-LM")
LAST_FAILURE: dict[str, str] = {}


def _wheel_helper() -> str | None:
    """The installed megatron-core wheel's compiled helpers_cpp*.so (found without importing megatron)."""
    try:
        dist = metadata.distribution("megatron-core")
    except metadata.PackageNotFoundError:
        return None
    for f in dist.files or ():
        if f.name.startswith("helpers_cpp") and f.name.endswith(".so"):
            return str(f.locate())
    return None


def _usable(tree: str) -> bool:
    """A tree with megatron/training and a compiled dataset helper."""
    return os.path.isfile(os.path.join(tree, "megatron", "training", "arguments.py")) and bool(
        glob.glob(os.path.join(tree, "megatron", "core", "datasets", "helpers_cpp*.so")))


def _extract() -> str | None:
    """Extract the tarball into .cache once (under a lock) and copy the wheel's helper in."""
    helper = _wheel_helper()
    if not os.path.isfile(TARBALL) or helper is None:
        LAST_FAILURE["dir"] = ("MEGATRON_LM_DIR is not set and ../shared/vendor/Megatron-LM-core_v0.16.1.tar.gz "
                               "or the megatron-core wheel's helpers_cpp*.so is missing")
        return None
    os.makedirs(CACHE, exist_ok=True)
    with open(os.path.join(CACHE, "megatron-lm.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _usable(TREE):
            return TREE
        tmp = tempfile.mkdtemp(prefix="megatron-lm.tmp", dir=CACHE)
        with tarfile.open(TARBALL) as tar:
            tar.extractall(tmp, filter="data")
        shutil.copy2(helper, os.path.join(tmp, "Megatron-LM", "megatron", "core", "datasets"))
        final = os.path.dirname(TREE)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
    return TREE


@functools.cache
def megatron_lm_dir() -> str | None:
    """The Megatron-LM tree to import: MEGATRON_LM_DIR, else the extracted tarball; None if neither."""
    env = os.environ.get("MEGATRON_LM_DIR")
    if env:
        if _usable(env):
            return env
        LAST_FAILURE["dir"] = f"MEGATRON_LM_DIR={env} has no megatron/training or no compiled helpers_cpp*.so"
        return None
    return _extract()


def missing_imports() -> list[str]:
    """Packages Megatron-LM's training side needs on top of megatron-core that are not installed."""
    import importlib.util

    return [m for m in ("six", "regex", "triton", "pydantic", "torch") if importlib.util.find_spec(m) is None]


def run_truth(cases: list[dict[str, Any]], workdir: str, timeout: float = 120.0) -> dict[str, Any]:
    """Run the truth script on ``cases`` with the Megatron-LM tree first on PYTHONPATH; its OUT.json."""
    tree = megatron_lm_dir()
    if tree is None:
        raise RuntimeError(LAST_FAILURE.get("dir", "no Megatron-LM tree"))
    os.makedirs(workdir, exist_ok=True)
    cases_path = os.path.join(workdir, "mlm-cases.json")
    out_path = os.path.join(workdir, "mlm-truth.json")
    with open(cases_path, "w", encoding="utf-8") as f:
        json.dump(cases, f)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (tree, env.get("PYTHONPATH", "")) if p)
    env.pop("WORLD_SIZE", None)
    env.pop("RANK", None)
    proc = subprocess.run([sys.executable, TRUTH_SCRIPT, cases_path, out_path, "--timeout", str(timeout)],
                          env=env, capture_output=True, text=True, cwd=workdir)
    if proc.returncode != 0 or not os.path.isfile(out_path):
        raise RuntimeError(f"megatron_lm_truth.py failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    with open(out_path, encoding="utf-8") as f:
        return json.load(f)
