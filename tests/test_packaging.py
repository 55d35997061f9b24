"""The sdist and the wheel: what they carry, one version, and ``neox-epoch demo`` from the installed wheel.

One module fixture builds both as a user would, offline: the sdist (``setup.py sdist``) from a copy of this checkout
(MANIFEST.in decides what goes in), then the wheel (``setup.py bdist_wheel``) from the unpacked sdist, which proves
the sdist builds; the wheel is installed (``pip --no-deps --no-index``) into a fresh venv that sees this
interpreter's packages (numpy, pyyaml) but not this checkout, and runs there from a directory outside it.
About 10-40 s (compiling the three C extensions, the demo's plans).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from typing import Any

import pytest
from paths import REPO

from neox_epoch import __version__

ROOT = REPO  # the checkout
EXTENSIONS = ("_greedy", "_exposure", "_mapguard")
#: what a copy of the checkout leaves out (built files, the venvs and caches, which are links to elsewhere)
NOT_COPIED = shutil.ignore_patterns(
    ".git", ".venv*", ".cache", "build", "dist", "demo", "__pycache__", "*.so", "*.egg-info", ".*_cache", ".hypothesis"
)


def _run(cmd: list[str], cwd: str, env: dict[str, str] | None = None) -> str:
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"{cmd}: {r.stdout[-2000:]}{r.stderr[-3000:]}"
    return r.stdout


def compiler() -> str | None:
    """The C compiler setup.py's extensions build with, when there is one."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(cc)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("dist")
    src = str(tmp / "checkout")
    shutil.copytree(ROOT, src, ignore=NOT_COPIED)
    out = str(tmp / "out")
    _run([sys.executable, "setup.py", "-q", "sdist", "-d", out], src)
    (sdist,) = glob.glob(os.path.join(out, "*.tar.gz"))
    with tarfile.open(sdist) as t:
        t.extractall(str(tmp / "unpacked"), filter="data")
        sdist_names = [n.split("/", 1)[1] for n in t.getnames() if "/" in n]
    (unpacked,) = glob.glob(str(tmp / "unpacked" / "*"))
    _run([sys.executable, "setup.py", "-q", "bdist_wheel", "-d", out], unpacked)
    (wheel,) = glob.glob(os.path.join(out, "*.whl"))
    with zipfile.ZipFile(wheel) as z:
        wheel_names = z.namelist()
        metadata = z.read(next(n for n in wheel_names if n.endswith(".dist-info/METADATA"))).decode("utf-8")
    return {
        "tmp": tmp,
        "sdist": sdist,
        "sdist_names": set(sdist_names),
        "wheel": wheel,
        "wheel_names": wheel_names,
        "metadata": metadata,
    }


def _checkout(pattern: str) -> set[str]:
    return {os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, pattern), recursive=True)}


def test_sdist_carries_tests_docs_configs_and_c_sources(dist: dict[str, Any]) -> None:
    names = dist["sdist_names"]
    wanted = set().union(
        *(
            _checkout(p)
            for p in (
                "tests/**/test_*.py",
                "tests/**/*.json",
                "docs/*.md",
                "configs/*.yml",
                "scripts/*.py",
                "scripts/*.sh",
            )
        ),
        {f"neox_epoch/{e}.c" for e in EXTENSIONS},
        {"LICENSE", "MANIFEST.in", "README.md", "pyproject.toml", "setup.py", "patches/neox_epoch_hook.patch"},
    )
    assert len(wanted) > 80 and not wanted - names, sorted(wanted - names)
    assert not [n for n in names if n.endswith((".so", ".pyc")) or "__pycache__" in n]
    assert os.path.basename(dist["sdist"]) == f"neox_epoch-{__version__}.tar.gz"


def test_wheel_carries_configs_data_licence_and_kernels(dist: dict[str, Any]) -> None:
    names = dist["wheel_names"]
    configs = {f"neox_epoch/configs/{os.path.basename(p)}" for p in _checkout("configs/*.yml")}
    assert len(configs) == 3 and configs <= set(names)
    assert {
        "neox_epoch/py.typed",
        "neox_epoch/data/neox_keys.json",
        "neox_epoch/data/megatron_flags/0.19.2.json",
    } <= set(names)
    assert f"neox_epoch-{__version__}.dist-info/licenses/LICENSE" in names
    assert not [n for n in names if n.startswith("tests/") or n.endswith(".c")]
    kernels = {e for e in EXTENSIONS if f"neox_epoch/{e}{sysconfig.get_config_var('EXT_SUFFIX')}" in names}
    assert kernels == (set(EXTENSIONS) if compiler() else set())  # optional extensions: none without a compiler
    meta = dist["metadata"]
    assert f"\nVersion: {__version__}\n" in meta and "\nLicense: Apache-2.0\n" in meta
    # no version pin on deepspeed or torch in any extra: GPT-NeoX's DeeperSpeed fork must stay (README: Install)
    pins = re.findall(r"^Requires-Dist: (deepspeed|torch)(\S*);", meta, re.M)
    assert pins and all(spec == "" for _, spec in pins), pins


def test_one_version() -> None:
    """``neox_epoch.__version__`` is the only place the version is written; setup.py and the CLI read it."""
    for name in ("setup.py", "pyproject.toml"):
        with open(os.path.join(ROOT, name), encoding="utf-8") as f:
            assert __version__ not in f.read(), name
    out = _run([sys.executable, "-m", "neox_epoch.cli", "plan", "--version"], ROOT)
    assert out.strip() == f"neox-epoch {__version__}"


@pytest.fixture(scope="module")
def installed(dist: dict[str, Any]) -> dict[str, Any]:
    """The wheel in a fresh venv; numpy and pyyaml from this interpreter's site-packages (a .pth line: its .pth files,
    such as an editable install of this checkout, are not run)."""
    venv = str(dist["tmp"] / "venv")
    _run([sys.executable, "-m", "venv", "--without-pip", venv], str(dist["tmp"]))
    python = os.path.join(venv, "bin", "python")
    site = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], venv).strip()
    with open(os.path.join(site, "outer.pth"), "w", encoding="utf-8") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")
    pip = [sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", dist["wheel"]]
    _run(pip, venv)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {"python": python, "bin": os.path.join(venv, "bin"), "site": site, "env": env}


def test_installed_wheel_demo_plans_its_shipped_configs(installed: dict[str, Any], tmp_path: Any) -> None:
    """From a directory outside any checkout: the package imported is the installed one, and ``neox-epoch demo``
    plans the three configs it ships (and the Megatron-LM line): 121 iterations for the last, as in a checkout."""
    code = "import neox_epoch, neox_epoch._greedy" if compiler() else "import neox_epoch"  # the compiled kernel loads
    where = _run([installed["python"], "-c", code + "; print(neox_epoch.__file__)"], str(tmp_path), installed["env"])
    assert where.startswith(installed["site"])
    r = subprocess.run(
        [os.path.join(installed["bin"], "neox-epoch"), "demo"],
        cwd=tmp_path,
        env=installed["env"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    shipped = re.findall(r"^\$ neox-epoch plan (\S+\.yml)$", r.stdout, re.M)
    assert [os.path.basename(p) for p in shipped] == sorted(os.path.basename(p) for p in _checkout("configs/*.yml"))
    assert all(p.startswith(os.path.join(installed["site"], "neox_epoch", "configs")) for p in shipped), shipped
    assert r.stdout.count("$ neox-epoch plan ") == 4 and "train_iters 121 -> 1,936 train samples" in r.stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    r = subprocess.run(
        [os.path.join(installed["bin"], "neox-epoch"), "demo", "--configs", str(empty)],
        cwd=tmp_path,
        env=installed["env"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"neox-epoch demo: error: --configs {empty}: no NeoX configs (*.yml) there; give the directory holding them"
    ]


def _neox_env_pin(package: str) -> str:
    """The version scripts/neox_env.sh installs into NeoX's venv (deepspeed stands in for DeeperSpeed there)."""
    with open(os.path.join(ROOT, "scripts", "neox_env.sh"), encoding="utf-8") as f:
        found = re.search(rf"\b{package}==([\w.]+)", f.read())
    assert found is not None, f"scripts/neox_env.sh pins no {package}"
    return found.group(1)


@pytest.mark.neox
def test_neox_environment_keeps_its_deepspeed(dist: dict[str, Any]) -> None:
    """In GPT-NeoX's environment (NEOX_PYTHON): installing the wheel with the ``deepspeed`` and ``neox`` extras
    would install neox-epoch alone (pip's own resolver, ``--dry-run --no-index``: nothing replaces NeoX's DeepSpeed,
    torch or numpy), and check-batch runs on that DeepSpeed's own launcher and config rules (on CPU without a hostfile
    NeoX counts 0 GPUs: the batch is refused, exit 2), its JSON stamped and naming that DeepSpeed."""
    import json

    import frameworks

    python = frameworks.neox_python()
    report = str(dist["tmp"] / "pip-report.json")
    wheel = f"neox-epoch[deepspeed,neox] @ file://{dist['wheel']}"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    _run([python, "-m", "pip", "install", "--dry-run", "--no-index", "--quiet", "--report", report, wheel], ROOT, env)
    with open(report, encoding="utf-8") as f:
        would = [(p["metadata"]["name"], p["metadata"]["version"]) for p in json.load(f)["install"]]
    assert would == [("neox-epoch", __version__)]
    env = {**env, "PYTHONPATH": ROOT, "DS_ACCELERATOR": "cpu"}
    code = (
        "import sys, neox_epoch.neox.hooks, neox_epoch.neox.worker; from neox_epoch.cli import main; sys.exit(main())"
    )
    cmd = [python, "-c", code, "check-batch", "configs/one_source_one_epoch.yml", "--json"]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and r.stderr.startswith("neox-epoch check-batch: error: batch inconsistent"), r.stderr
    out = json.loads(r.stdout)
    assert (out["version"], out["schema"], out["consistent"]) == (__version__, 1, False)
    assert out["deepspeed_version"] == _neox_env_pin("deepspeed")
