"""An install without a C compiler is slower, not poorer (issue 36): the audit's exposure and the plan are the same.

The extensions are switched off the way a user can, ``NEOX_EPOCH_NO_EXTENSIONS=1`` (the loader then behaves as on an
install built without a compiler: numpy's stream pass, numpy's greedy lanes, reads copied instead of mapped under the
SIGBUS guard), and the CLI's JSON output is compared byte for byte with the compiled kernels' on real caches: the
ones real GPT-NeoX wrote (tests/fixtures/neox, its blends through their configs) and NeoX-like packed indexes of two
and three epochs (the kernel's pair path and its general one), with a manifest; and the plans of the shipped configs.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys

import pytest

from neox_epoch.demo import write_demo_corpus
from neox_epoch.semantics import blend, greedy_numpy
from neox_epoch.util import extensions
from tests.audit.test_audit_unit import write_neox_index

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "neox")
CACHE = os.path.join(FIXTURES, "neox_cache")
CONFIGS = sorted(f for f in os.listdir(os.path.join(ROOT, "configs")) if f.endswith(".yml"))
WARNING = "neox_epoch._exposure is switched off by NEOX_EPOCH_NO_EXTENSIONS"


def cli(args: list[str], cwd: str, off: bool) -> tuple[str, str]:
    """``neox-epoch ARGS`` in a fresh process, the extensions on or switched off: (stdout, stderr)."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop(extensions.SWITCH, None)
    if off:
        env[extensions.SWITCH] = "1"
    code = "import sys; from neox_epoch.cli import main; sys.exit(main(sys.argv[1:]))"
    run = subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert run.returncode in (0, 1), run.stderr
    return run.stdout, run.stderr


def both(args: list[str], cwd: str, manifest: str | None = None) -> tuple[str, str, str]:
    """The output with the kernels and without (manifests compared too); returns (stdout, stderr without, stdout)."""
    extra = ["--manifest", manifest + ".on"] if manifest else []
    on, _ = cli(args + extra, cwd, off=False)
    extra = ["--manifest", manifest + ".off"] if manifest else []
    off, err = cli(args + extra, cwd, off=True)
    if manifest:
        with open(manifest + ".on", "rb") as a, open(manifest + ".off", "rb") as b:
            assert a.read() == b.read(), "the manifest differs without the kernel"
    return off, err, on


def exposures(out: str) -> list[dict | None]:
    data = json.loads(out)
    return [i["exposure"] for i in data["indexes"]] + [b.get("exposure") for b in data.get("blends", [])]


@pytest.mark.skipif(not os.path.isdir(CACHE), reason="NeoX fixtures missing (scripts/neox_golden.py)")
def test_audit_of_real_neox_caches_is_the_same_without_the_kernel(tmp_path):
    off, err, on = both(
        ["audit", CACHE, "--consumed", "3000", "--json", "--no-progress"], ROOT, str(tmp_path / "m.tsv")
    )
    assert off == on
    assert any(e is not None and e["token_exposures"] > 0 for e in exposures(on))  # (an exposure to compare)
    assert err.count(WARNING) == 1  # said once, with the fix
    with open(os.path.join(FIXTURES, "neox_golden.json"), encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    keys = ("train_data_paths", "train_data_weights", "train_iters", "train_batch_size", "seq_length")
    blends = [c["params"] for c in cases.values() if len(c["params"].get("train_data_paths") or []) > 1]
    blends = [p for p in blends if p.get("train_iters")][:2]  # (one launch each way per blend: two of them)
    assert blends
    for k, params in enumerate(blends):
        cfg = tmp_path / f"run{k}.yml"
        cfg.write_text(json.dumps({key: params[key] for key in keys if key in params}), encoding="utf-8")
        off, _, on = both(["audit", CACHE, "--config", str(cfg), "--json", "--no-progress"], ROOT)
        assert off == on
        assert any(e is not None for e in exposures(on))


@pytest.mark.parametrize("epochs", [2, 3])
def test_audit_of_multi_epoch_indexes_is_the_same_without_the_kernel(tmp_path, epochs):
    lengths = [(37 * i) % 301 + 1 for i in range(400)] + [5000, 0, 1]
    write_neox_index(str(tmp_path), "corpus", lengths, 32, epochs)
    args = ["audit", str(tmp_path), "--consumed", str(1500 * epochs), "--json", "--no-progress"]
    off, _, on = both(args, str(tmp_path), str(tmp_path / "m.tsv"))
    assert off == on
    assert exposures(on)[0] is not None and exposures(on)[0]["token_exposures"] > 0


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("demo")
    write_demo_corpus(str(d / "demo" / "data"))
    shutil.copytree(os.path.join(ROOT, "configs"), d / "configs")
    return str(d)


@pytest.mark.parametrize("config", CONFIGS)
def test_plan_of_shipped_configs_is_the_same_without_the_kernel(demo_dir, config):
    off, _, on = both(["plan", f"configs/{config}", "--json"], demo_dir)
    assert off == on and json.loads(on)["sources"]


def test_the_fix_named_is_the_one_for_this_checkout(monkeypatch):
    """A source checkout (setup.py beside the package, as here) rebuilds in place; the switch names itself."""
    monkeypatch.delenv(extensions.SWITCH, raising=False)
    assert extensions.editable() and "pip install -e ." in extensions.fix()
    monkeypatch.setenv(extensions.SWITCH, "1")
    assert extensions.disabled() and extensions.SWITCH in extensions.fix()


def _compiler_less_install(tmp: str) -> str:
    """The sdist of this checkout installed into a fresh venv (this stack's packages on its path), ``CC=/bin/false``:
    every extension build fails, as on a machine without a compiler. Returns the venv's bin directory."""
    src = os.path.join(tmp, "src")
    skip = shutil.ignore_patterns(".*", "*.so", "build", "dist", "*.egg-info", "__pycache__", "demo_out*")
    shutil.copytree(ROOT, src, ignore=skip)
    built = subprocess.run(
        [sys.executable, "setup.py", "-q", "sdist", "-d", tmp], cwd=src, capture_output=True, text=True
    )
    assert built.returncode == 0, built.stderr
    (sdist,) = [f for f in os.listdir(tmp) if f.endswith(".tar.gz")]
    venv = os.path.join(tmp, "venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    purelib = subprocess.run(
        [sys.executable, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    target = subprocess.run(
        [os.path.join(venv, "bin", "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    with open(os.path.join(target, "stack.pth"), "w", encoding="utf-8") as f:
        f.write(purelib + "\n")  # numpy, pyyaml, setuptools and pip of this stack (a plain path: no .pth of theirs)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", extensions.SWITCH)}
    pip = [
        os.path.join(venv, "bin", "python"),
        "-m",
        "pip",
        "install",
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
    ]
    run = subprocess.run(
        [*pip, os.path.join(tmp, sdist)], env=dict(env, CC="/bin/false"), capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout + run.stderr
    installed = os.path.join(target, "neox_epoch")
    assert os.path.isdir(installed) and not [f for f in os.listdir(installed) if f.endswith(".so")]
    return os.path.join(venv, "bin")


def test_a_compiler_less_install_audits_and_plans_the_same(tmp_path, demo_dir):
    """The real thing once: no extension built (CC fails), then `neox-epoch audit` and `plan` from that install give
    the compiled kernels' JSON byte for byte, and the one warning names the fix for an installed sdist."""
    bin_dir = _compiler_less_install(str(tmp_path))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", extensions.SWITCH)}
    runs = {
        "audit": ["audit", CACHE, "--consumed", "3000", "--json", "--no-progress"],
        "plan": ["plan", "configs/blend_per_source_epochs.yml", "--json"],
    }
    for name, args in runs.items():
        cwd = ROOT if name == "audit" else demo_dir
        run = subprocess.run(
            [os.path.join(bin_dir, "neox-epoch"), *args], cwd=cwd, env=env, capture_output=True, text=True
        )
        assert run.returncode in (0, 1), run.stderr
        on, _ = cli(args, cwd, off=False)
        assert run.stdout == on, f"{name}: the compiler-less install's JSON differs"
        if name == "audit":
            assert any(e is not None and e["token_exposures"] > 0 for e in exposures(on))
            assert run.stderr.count("is not built (no C compiler at install time)") == 1, run.stderr
            assert "pip install --force-reinstall --no-binary neox-epoch neox-epoch" in run.stderr


def _blends() -> list[list[float]]:
    rng = random.Random(36)
    out = [blend.normalize([1.0] * n) for n in (2, 7, 22)]  # exact ties
    out += [blend.normalize([rng.choice([1.0, 2.0, 3.0]) / 3.0 for _ in range(n)]) for n in (3, 12)]  # near-ties
    out += [blend.normalize([10 ** rng.uniform(-4, 0) for _ in range(n)]) for n in (2, 3, 5, 8, 22, 40)]
    return out


@pytest.mark.parametrize("k", range(len(_blends())))
def test_greedy_without_the_extension_equals_the_c_loop(monkeypatch, k):
    """The fallback's three ways (numpy lanes, the jump with numpy's candidates, marks between jumps) against the C
    extension's plain loop, in the same process: the same counts and mark positions."""
    oracle = extensions.load("_greedy")
    if oracle is None:
        pytest.skip("neox_epoch._greedy is not built here: nothing to compare with")
    w = _blends()[k]
    n = len(w)
    monkeypatch.setattr(blend, "_greedy", None)
    for start, stop in ((0, 3_000), (1, 150_001), (0, 300_000)):
        counts = list(oracle.advance_plain(w, 0, [0] * n, start, [])[0])
        marks = [(i, max(1, int(w[i] * stop * 0.7))) for i in range(n)]
        want = oracle.advance_plain(w, start, counts, stop, marks)
        assert greedy_numpy.replay(w, start, counts, stop) == list(want[0])
        assert blend.advance(w, start, counts, stop)[0] == list(want[0])
        assert blend.advance(w, start, counts, stop, marks) == (list(want[0]), list(want[1]))
