"""Make a given megatron-core version importable and run ``tests/helpers/mcore_truth.py`` under it.

``mcore_pythonpath(version)`` returns "" when the installed megatron-core already is that version,
else installs it once per interpreter (``pip install --no-deps --only-binary=:all: --target
<repo>/.cache/mcore-<version>-<cache tag, e.g. cpython-312>``, gitignored: the wheel's compiled helpers import only
in the Python version they were built for) and returns that directory, or None when the install fails (tests then
skip).
``run_truth(cases, version, workdir)`` runs the truth script in a subprocess with that directory first
on PYTHONPATH and returns its parsed OUT.json.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRUTH_SCRIPT = os.path.join(REPO, "tests", "helpers", "mcore_truth.py")
CACHE = os.path.join(REPO, ".cache")
#: why the last mcore_pythonpath() call returned None, for skip messages
LAST_FAILURE: dict[str, str] = {}


def _tail(text: str, lines: int = 3, chars: int = 600) -> str:
    """The last few non-empty lines of ``text``, at most ``chars`` characters."""
    kept = [line for line in text.splitlines() if line.strip()][-lines:]
    return "\n".join(kept)[-chars:]


#: the megatron-core versions each Python runs the truth tests against (0.19.x requires Python >= 3.12;
#: 0.16.1 and 0.10.0 are NeoX's stack's). NEOX_EPOCH_MCORE_VERSIONS (comma-separated) replaces them:
#: scripts/verify_megatron.sh uses it to run the truth suite against a release not yet in the table.
STACK_VERSIONS = {"neox": (("0.16.1", 1), ("0.10.0", 2)), "today": (("0.19.2", 3),)}


def truth_versions() -> list[tuple[str, int]]:
    """(version, seed) pairs the truth tests run against on this interpreter."""
    given = os.environ.get("NEOX_EPOCH_MCORE_VERSIONS", "").strip()
    if given:
        return [(v.strip(), 10 + i) for i, v in enumerate(given.split(",")) if v.strip()]
    return list(STACK_VERSIONS["today" if sys.version_info >= (3, 12) else "neox"])


def installed_version() -> str | None:
    """The megatron-core version this interpreter imports by default (None if not installed)."""
    try:
        return metadata.version("megatron-core")
    except metadata.PackageNotFoundError:
        return None


def _installed_at(target: str, version: str) -> bool:
    """True when ``target`` holds a complete install of megatron-core ``version``."""
    return os.path.isfile(os.path.join(target, "megatron", "core", "__init__.py")) and os.path.isdir(
        os.path.join(target, f"megatron_core-{version}.dist-info")
    )


@functools.cache
def mcore_pythonpath(version: str) -> str | None:
    """A PYTHONPATH entry under which megatron-core ``version`` imports ("" = the current env), or None."""
    if installed_version() == version:
        return ""
    name = f"mcore-{version}-{sys.implementation.cache_tag}"  # why: helpers_cpp is built for one Python version
    target = os.path.join(CACHE, name)
    if _installed_at(target, version):
        return target
    os.makedirs(CACHE, exist_ok=True)
    with open(os.path.join(CACHE, f"{name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test process may be installing the same version
        if _installed_at(target, version):
            return target
        tmp = tempfile.mkdtemp(prefix=f"{name}.tmp", dir=CACHE)
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--only-binary=:all:",
            "--target",
            tmp,
            f"megatron-core=={version}",
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.TimeoutExpired) as err:
            LAST_FAILURE[version] = f"pip install megatron-core=={version} failed: {err}"
            shutil.rmtree(tmp, ignore_errors=True)
            return None
        if proc.returncode != 0 or not _installed_at(tmp, version):
            LAST_FAILURE[version] = (
                f"pip install megatron-core=={version} failed (exit {proc.returncode}): {_tail(proc.stderr)}"
            )
            shutil.rmtree(tmp, ignore_errors=True)
            return None
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
    return target


def run_truth(
    cases: list[dict[str, Any]],
    version: str,
    workdir: str,
    timeout_per_case: float = 60.0,
    jobs: int = 1,
) -> dict[str, Any]:
    """Build ``cases`` with the real megatron-core ``version``; returns the truth script's OUT.json.

    Raises RuntimeError when the version cannot be made importable, the script fails, or the imported
    megatron-core is not ``version``.
    """
    entry = mcore_pythonpath(version)
    if entry is None:
        raise RuntimeError(LAST_FAILURE.get(version, f"megatron-core {version} is not installable"))
    os.makedirs(workdir, exist_ok=True)
    cases_path = os.path.join(workdir, f"cases-{version}.json")
    out_path = os.path.join(workdir, f"truth-{version}.json")
    with open(cases_path, "w", encoding="utf-8") as f:
        json.dump(cases, f)
    if os.path.exists(out_path):
        os.unlink(out_path)
    env = dict(os.environ)
    if entry:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (entry, env.get("PYTHONPATH", "")) if p)
    cmd = [
        sys.executable,
        TRUTH_SCRIPT,
        cases_path,
        out_path,
        "--timeout",
        str(timeout_per_case),
        "--jobs",
        str(jobs),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0 or not os.path.isfile(out_path):
        raise RuntimeError(
            f"mcore_truth.py failed (exit {proc.returncode}) under megatron-core {version}:\n{proc.stderr[-3000:]}"
        )
    with open(out_path, encoding="utf-8") as f:
        out = json.load(f)
    # the public version: some releases' package_info appends "+<commit>" of the git checkout they run in
    if str(out.get("megatron_core_version")).split("+")[0] != version:
        raise RuntimeError(
            f"asked for megatron-core {version} but the truth script imported {out.get('megatron_core_version')}"
        )
    return out
