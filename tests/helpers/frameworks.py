"""Where the tests find the real frameworks: GPT-NeoX and Megatron-LM's training side.

Each function returns what an environment variable names when it is set, else builds it once in the
project's ignored ``.cache/`` from the third-party copies in the vendor directory (``../shared/vendor``
beside the repository, or ``NEOX_EPOCH_VENDOR``; see its README, whose sha256 sums are checked before
anything is extracted):

- ``neox_dir()``: ``NEOX_DIR``, else ``.cache/gpt-neox-ea7aefd8/`` extracted from ``gpt-neox-ea7aefd8.tar.gz``.
- ``neox_python()``: ``NEOX_PYTHON``, else ``.cache/neox-venv`` built by ``scripts/neox_env.sh`` (which also
  compiles NeoX's C++ helpers in the tree).
- ``megatron_lm_dir()`` / ``megatron_lm_env()``: ``MEGATRON_LM_DIR``, else ``.cache/Megatron-LM-core_v0.16.1/``
  with the installed megatron-core wheel's compiled dataset helpers copied in; the env puts that tree first
  on PYTHONPATH for a subprocess of this interpreter (NeoX's stack: Python 3.11, megatron-core 0.16.1).
- ``megatron_lm_019_dir()`` / ``megatron_lm_today_env()`` (today's stack: Python >= 3.12, megatron-core
  0.19.2, whose wheel carries ``megatron/training``): ``MEGATRON_LM_019_DIR``, else
  ``.cache/Megatron-LM-core_v0.19.0/`` for what the wheel lacks (``pretrain_gpt.py``, ``examples/``); the env
  puts that tree AFTER the wheel on sys.path (``MEGATRON_LM_APPEND_PATH``, read by tests/helpers/megatron_lm_truth.py),
  so the wheel's megatron.training and megatron.core are the ones imported.
- ``megatron_lm_stack()`` says which of the two this interpreter is; ``needs_stack("neox" | "today")`` is the
  conftest `stack` mark of a test that needs one of them (deselected on the other stack).

Extraction goes to a temporary directory renamed into place, and every build holds a file lock, so
parallel pytest processes neither race nor see half a tree. When a framework cannot be had on this
machine (no vendor copy, a missing dependency), ``FrameworkUnavailable`` is raised: it is pytest's skip
exception, so a test calling these functions skips with the reason (tests/conftest.py turns such a skip
into a failure under ``CI=true``). Anything else that fails (a checksum, the venv build) raises
``RuntimeError`` with what failed and how to fix it.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from importlib import metadata
from typing import Any

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.path.join(REPO, ".cache")
NEOX_TARBALL = "gpt-neox-ea7aefd8.tar.gz"
MEGATRON_LM_TARBALL = "Megatron-LM-core_v0.16.1.tar.gz"
MEGATRON_LM_019_TARBALL = "Megatron-LM-core_v0.19.0.tar.gz"
#: the Megatron-LM training code each test stack runs (``needs_stack``)
STACKS = {"neox": "0.16.1", "today": "0.19.2"}
NEOX_ENV_SCRIPT = os.path.join(REPO, "scripts", "neox_env.sh")
#: what Megatron-LM's training side imports beyond megatron-core (installed by scripts/setup.sh)
MEGATRON_LM_DEPS = ("six", "regex", "triton", "pydantic")
STAMP = ".neox-epoch-extracted"
BUILD_TIMEOUT = 3600.0


class FrameworkUnavailable(pytest.skip.Exception):  # type: ignore[misc,name-defined]
    """A framework cannot be had on this machine; raised inside a test it skips that test with this message."""

    def __init__(self, msg: str) -> None:
        super().__init__(msg=msg, allow_module_level=True)


def vendor_dir() -> str:
    """The directory holding the third-party tarballs: ``NEOX_EPOCH_VENDOR``, else ``../shared/vendor``."""
    return os.environ.get("NEOX_EPOCH_VENDOR") or os.path.join(REPO, "..", "shared", "vendor")


def readme_sha256(vendor: str, tarball: str) -> str:
    """The sha256 that ``vendor``'s README.md gives for ``tarball`` (the first one after its name, before the next)."""
    readme = os.path.join(vendor, "README.md")
    try:
        with open(readme, encoding="utf-8") as f:
            text = f.read()
    except OSError as err:
        raise FrameworkUnavailable(
            f"cannot read {readme} ({err}): it gives the checksum of {tarball}; set NEOX_EPOCH_VENDOR to the "
            "directory holding the vendored tarballs and their README.md"
        ) from err
    # from the backticked name to the first sha256 after it, without passing another backticked tarball name
    other = r"`[^`\s]+\.tar(?:\.\w+)?`"
    m = re.search(
        r"`" + re.escape(tarball) + r"`(?:(?!" + other + r").)*?sha256\s*:?\s*([0-9a-f]{64})", text, re.DOTALL
    )
    if not m:
        raise RuntimeError(f"{readme} names no sha256 for {tarball}: add it there (a line 'sha256 <64 hex digits>')")
    return m.group(1)


def file_sha256(path: str) -> str:
    """The sha256 hex digest of the file at ``path``."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@contextlib.contextmanager
def locked(name: str, cache: str = CACHE) -> Iterator[None]:
    """Hold an exclusive fcntl lock on ``cache/name.lock`` (other processes building the same thing wait)."""
    os.makedirs(cache, exist_ok=True)
    with open(os.path.join(cache, name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _read_stamp(path: str) -> dict[str, str] | None:
    """The JSON object in the stamp file ``path``, or None when it is missing or unreadable."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_stamp(path: str, data: dict[str, str]) -> None:
    """Write ``data`` as the JSON stamp file ``path``."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, sort_keys=True)


def extract_vendored(
    tarball: str,
    dest: str,
    vendor: str,
    extra: dict[str, str] | None = None,
    finish: Callable[[str], None] | None = None,
) -> str:
    """Extract ``vendor/tarball`` (one top folder) to ``dest`` once; return ``dest``.

    The checksum from ``vendor``'s README is verified first; the tree is extracted into a temporary
    directory beside ``dest``, ``finish(tree)`` may complete it there, and it is renamed into place, all
    under a lock. A stamp inside the tree records the tarball's sha256 and ``extra``: when either differs
    from the current one, the tree is extracted anew.
    """
    want = {"sha256": readme_sha256(vendor, tarball), **(extra or {})}
    stamp = os.path.join(dest, STAMP)
    if _read_stamp(stamp) == want:
        return dest
    cache, name = os.path.split(dest)
    with locked(name, cache):
        if _read_stamp(stamp) == want:  # another process finished it while we waited
            return dest
        path = os.path.join(vendor, tarball)
        if not os.path.isfile(path):
            raise FrameworkUnavailable(
                f"{path} not found: the vendored copy of {tarball} is missing; set NEOX_EPOCH_VENDOR to the directory "
                "holding it (or point the framework's environment variable at an existing tree)"
            )
        got = file_sha256(path)
        if got != want["sha256"]:
            raise RuntimeError(
                f"{path} has sha256 {got}, but {os.path.join(vendor, 'README.md')} gives {want['sha256']}: the "
                "file is damaged or not the one described; restore the vendored copy"
            )
        tmp = tempfile.mkdtemp(prefix=name + ".tmp", dir=cache)
        try:
            with tarfile.open(path) as tar:
                if hasattr(tarfile, "data_filter"):
                    tar.extractall(tmp, filter="data")
                else:  # Python < 3.11.4: no extraction filters
                    tar.extractall(tmp)  # noqa: S202 - a checksummed vendored tarball
            tops = os.listdir(tmp)
            if len(tops) != 1 or not os.path.isdir(os.path.join(tmp, tops[0])):
                raise RuntimeError(
                    f"{path} should hold one top folder, found {sorted(tops)}: restore the vendored copy"
                )
            tree = os.path.join(tmp, tops[0])
            if finish is not None:
                finish(tree)
            _write_stamp(os.path.join(tree, STAMP), want)
            shutil.rmtree(dest, ignore_errors=True)
            os.replace(tree, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


# --------------------------------------------------------------------------------------------------------------
# GPT-NeoX


def _given_tree(var: str, marker: str, what: str) -> str | None:
    """The tree an environment variable names (checked by one file it must hold), or None when unset."""
    given = os.environ.get(var)
    if not given:
        return None
    if not os.path.isfile(os.path.join(given, *marker.split("/"))):
        raise RuntimeError(
            f"{var}={given} is not a {what} (no {marker}): point it at one, or unset it to use the vendored copy"
        )
    return os.path.abspath(given)


def neox_dir() -> str:
    """A GPT-NeoX checkout: ``NEOX_DIR`` when set, else the vendored ea7aefd8 tree extracted into ``.cache``."""
    given = _given_tree("NEOX_DIR", "megatron/data/gpt2_dataset.py", "GPT-NeoX checkout")
    if given:
        return given
    return extract_vendored(NEOX_TARBALL, os.path.join(CACHE, "gpt-neox-ea7aefd8"), vendor_dir())


def _neox_helpers_built(tree: str) -> bool:
    """True when NeoX's C++ dataset helpers are compiled in ``tree``."""
    return bool(glob.glob(os.path.join(tree, "megatron", "data", "helpers*.so")))


def _log_tail(path: str, lines: int = 40) -> str:
    """The last ``lines`` lines of the log file at ``path``."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError as err:
        return f"(no log: {err})"


def neox_python() -> str:
    """A Python that runs NeoX's code: ``NEOX_PYTHON`` when set, else ``.cache/neox-venv`` built once.

    The venv is built by scripts/neox_env.sh for ``neox_dir()`` (it also compiles NeoX's helpers in that
    tree); a stamp records the tree and the script's sha256, so it is rebuilt only when either changed or
    the helpers are gone. A failed build raises RuntimeError with the tail of its log.
    """
    given = os.environ.get("NEOX_PYTHON")
    if given:
        return given
    tree = neox_dir()
    venv = os.path.join(CACHE, "neox-venv")
    python = os.path.join(venv, "bin", "python")
    stamp = os.path.join(venv, ".neox-epoch-built")
    want = {"neox_dir": tree, "script_sha256": file_sha256(NEOX_ENV_SCRIPT)}

    def ready() -> bool:
        return _read_stamp(stamp) == want and os.path.isfile(python) and _neox_helpers_built(tree)

    if ready():
        return python
    with locked("neox-venv"):
        if ready():
            return python
        log = os.path.join(CACHE, "neox-venv.log")
        env = dict(os.environ)
        env.setdefault("PYTHON", sys.executable)
        if os.path.exists(stamp):
            os.unlink(stamp)
        with open(log, "w", encoding="utf-8") as out:
            try:
                proc = subprocess.run(
                    ["bash", NEOX_ENV_SCRIPT, tree, venv],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=env,
                    timeout=BUILD_TIMEOUT,
                )
                code: int | str = proc.returncode
            except subprocess.TimeoutExpired:
                code = f"timeout after {BUILD_TIMEOUT:.0f} s"
        if code != 0 or not os.path.isfile(python) or not _neox_helpers_built(tree):
            raise RuntimeError(
                f"building the NeoX venv with `bash scripts/neox_env.sh {tree} {venv}` failed ({code}); "
                f"the last lines of {log}:\n{_log_tail(log)}\nFix the cause shown there and run the tests again "
                f"(remove {venv} to start from scratch), or set NEOX_PYTHON to a venv built by scripts/neox_env.sh"
            )
        _write_stamp(stamp, want)
    return python


# --------------------------------------------------------------------------------------------------------------
# Megatron-LM


def neox_from_ymls(
    root: str, jobs: dict[str, list[str]], name: str = "jobs", timeout: float = 1800.0
) -> dict[str, Any]:
    """NeoX's own ``NeoXArgs.from_ymls`` on every entry of ``jobs`` (name -> config files, relative to ``root``)
    in one NeoX process (scripts/neox_config_sweep.py --batch); its JSON answer per name."""
    with open(os.path.join(root, f"{name}.json"), "w", encoding="utf-8") as f:
        json.dump(jobs, f)
    env = {k: v for k, v in os.environ.items() if k != "DLTS_HOSTFILE"}
    r = subprocess.run(
        [
            neox_python(),
            os.path.join(REPO, "scripts", "neox_config_sweep.py"),
            f"{name}_out.json",
            "--batch",
            f"{name}.json",
            "--neox-dir",
            neox_dir(),
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**env, "DS_ACCELERATOR": "cpu"},
    )
    if r.returncode != 0:
        raise RuntimeError(f"neox_config_sweep.py --batch failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
    with open(os.path.join(root, f"{name}_out.json"), encoding="utf-8") as f:
        return dict(json.load(f))


def _mcore_helpers() -> tuple[str, list[str]]:
    """The installed megatron-core wheel's version and its compiled dataset helper files (absolute paths)."""
    try:
        dist = metadata.distribution("megatron-core")
    except metadata.PackageNotFoundError as err:
        raise FrameworkUnavailable(
            f"megatron-core is not installed for {sys.executable}: Megatron-LM's tree needs the wheel's compiled "
            "dataset helpers; run scripts/setup.sh (it installs megatron-core==0.16.1)"
        ) from err
    pattern = re.compile(r"megatron/core/datasets/helpers_cpp[^/]*\.so$")
    files = [str(dist.locate_file(f)) for f in dist.files or () if pattern.search(str(f))]
    files = [f for f in files if os.path.isfile(f)]
    if not files:
        raise RuntimeError(
            f"the installed megatron-core {dist.version} has no megatron/core/datasets/helpers_cpp*.so: "
            "reinstall megatron-core==0.16.1 from its wheel (scripts/setup.sh)"
        )
    return dist.version, files


def megatron_lm_dir() -> str:
    """Megatron-LM's source (training side): ``MEGATRON_LM_DIR`` when set, else the vendored core_v0.16.1 tree.

    The extracted tree gets the installed megatron-core wheel's compiled ``helpers_cpp*.so``: with the tree
    first on sys.path its megatron.core shadows the wheel's, which has the only compiled copy.
    """
    given = _given_tree("MEGATRON_LM_DIR", "megatron/training/arguments.py", "Megatron-LM tree")
    if given:
        return given
    version, helpers = _mcore_helpers()

    def copy_helpers(tree: str) -> None:
        target = os.path.join(tree, "megatron", "core", "datasets")
        for path in helpers:
            shutil.copy2(path, target)

    return extract_vendored(
        MEGATRON_LM_TARBALL,
        os.path.join(CACHE, "Megatron-LM-core_v0.16.1"),
        vendor_dir(),
        extra={"megatron_core_wheel": version},
        finish=copy_helpers,
    )


def megatron_lm_env() -> dict[str, str]:
    """The environment for a subprocess of this interpreter that imports Megatron-LM's training side.

    A copy of os.environ with ``megatron_lm_dir()`` first on PYTHONPATH and CUDA_DEVICE_MAX_CONNECTIONS=1
    (validate_args wants it with tensor or context parallelism). Raises FrameworkUnavailable when a module
    the training side imports (six, regex, triton, pydantic) is missing here.
    """
    missing = [m for m in MEGATRON_LM_DEPS if importlib.util.find_spec(m) is None]
    if missing:
        raise FrameworkUnavailable(
            f"Megatron-LM's training side imports {', '.join(missing)}, not installed for {sys.executable}: "
            f"run scripts/setup.sh (or pip install {' '.join(missing)})"
        )
    tree = megatron_lm_dir()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (tree, env.get("PYTHONPATH", "")) if p)
    env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    return env


# --------------------------------------------------------------------------------------------------------------
# the two stacks: Megatron-LM 0.16.1 (NeoX's, Python 3.11) and 0.19.2 (today's, Python >= 3.12)


def installed_megatron_core() -> str | None:
    """The megatron-core version installed for this interpreter (None: not installed)."""
    try:
        return metadata.version("megatron-core")
    except metadata.PackageNotFoundError:
        return None


def megatron_lm_stack() -> str:
    """ "today" when this interpreter runs megatron-core 0.19.x (its wheel's megatron/training, Python >= 3.12),
    else "neox" (Megatron-LM core_v0.16.1's tree over the megatron-core 0.16.1 wheel)."""
    version = installed_megatron_core() or ""
    return "today" if sys.version_info >= (3, 12) and version.startswith("0.19.") else "neox"


def needs_stack(name: str) -> pytest.MarkDecorator:
    """The ``stack`` mark (tests/conftest.py) for a test that needs Megatron-LM ``STACKS[name]``'s training code:
    on the other stack it is deselected with this reason (scripts/test.sh runs both stacks), never skipped."""
    if name == "today":
        reason = "Megatron-LM 0.19's training code comes with megatron-core 0.19.2, which requires Python >= 3.12"
    else:
        reason = "Megatron-LM core_v0.16.1's training code runs with megatron-core 0.16.1 on Python 3.11"
    return pytest.mark.stack(name, reason=reason)


def megatron_lm_019_dir() -> str:
    """Megatron-LM core_v0.19.0's tree (``MEGATRON_LM_019_DIR`` when set): pretrain_gpt.py and examples/, which
    the megatron-core 0.19.2 wheel lacks (its megatron/ is not used: the wheel's comes first)."""
    given = _given_tree("MEGATRON_LM_019_DIR", "pretrain_gpt.py", "Megatron-LM core_v0.19 tree")
    if given:
        return given
    return extract_vendored(MEGATRON_LM_019_TARBALL, os.path.join(CACHE, "Megatron-LM-core_v0.19.0"), vendor_dir())


def megatron_lm_today_env() -> dict[str, str]:
    """The environment for a subprocess of this interpreter running the megatron-core 0.19.2 wheel's training
    side with core_v0.19.0's pretrain_gpt.py: MEGATRON_LM_APPEND_PATH names the tree (appended to sys.path by
    the truth script, after the wheel) and CUDA_DEVICE_MAX_CONNECTIONS=1."""
    if megatron_lm_stack() != "today":
        raise FrameworkUnavailable(
            f"megatron-core 0.19.2 requires Python >= 3.12 (this is Python "
            f"{sys.version_info[0]}.{sys.version_info[1]} with megatron-core "
            f"{installed_megatron_core()})"
        )
    missing = [m for m in MEGATRON_LM_DEPS if importlib.util.find_spec(m) is None]
    if missing:
        raise FrameworkUnavailable(
            f"Megatron-LM's training side imports {', '.join(missing)}, not installed for {sys.executable}: "
            f"pip install {' '.join(missing)}"
        )
    env = dict(os.environ)
    env["MEGATRON_LM_APPEND_PATH"] = megatron_lm_019_dir()
    env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    return env
