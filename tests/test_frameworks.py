"""tests/helpers/frameworks.py finds the expected framework trees, and tests/conftest.py's framework markers behave.

The ``neox`` / ``megatron_lm`` tests check the trees the other framework tests run: GPT-NeoX's
arguments module is there, Megatron-LM's package_info.py says 0.16.1 (read from the file, not imported),
and Megatron-LM's training side imports and validates arguments in a subprocess on this CPU. The
unmarked tests check the extraction (checksum, once, in parallel) and the CI rule on tiny stand-ins.
"""

from __future__ import annotations

import ast
import glob
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import textwrap

import frameworks
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def _package_info_version(path: str) -> str:
    """The version MAJOR.MINOR.PATCH+PRE_RELEASE assigned in a megatron ``package_info.py``, parsed, not imported."""
    values: dict[str, object] = {}
    for node in ast.parse(open(path, encoding="utf-8").read()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in ("MAJOR", "MINOR", "PATCH", "PRE_RELEASE"):
                values[node.targets[0].id] = ast.literal_eval(node.value)
    return f"{values['MAJOR']}.{values['MINOR']}.{values['PATCH']}{values.get('PRE_RELEASE', '')}"


# --------------------------------------------------------------------------------------------------------------
# the real trees


@pytest.mark.neox
def test_neox_tree_is_gpt_neox():
    tree = frameworks.neox_dir()
    assert os.path.isfile(os.path.join(tree, "megatron", "neox_arguments", "arguments.py"))
    assert os.path.isfile(os.path.join(tree, "megatron", "data", "helpers.cpp"))
    if not os.environ.get("NEOX_DIR"):  # the vendored copy: extracted from the tarball the README describes
        stamp = json.load(open(os.path.join(tree, frameworks.STAMP), encoding="utf-8"))
        assert stamp["sha256"] == frameworks.readme_sha256(frameworks.vendor_dir(), frameworks.NEOX_TARBALL)


@pytest.mark.megatron_lm
@frameworks.needs_stack("neox")
def test_megatron_lm_tree_is_core_v0_16_1():
    tree = frameworks.megatron_lm_dir()
    assert _package_info_version(os.path.join(tree, "megatron", "core", "package_info.py")) == "0.16.1"
    assert os.path.isfile(os.path.join(tree, "megatron", "training", "arguments.py"))
    assert os.path.isfile(os.path.join(tree, "pretrain_gpt.py"))
    assert glob.glob(os.path.join(tree, "megatron", "core", "datasets", "helpers_cpp*.so")), "the wheel's helpers"


#: a test-side script: Megatron-LM's own parse_args and validate_args on this CPU. The stand-ins answer the
#: GPU architecture queries as an H100 would (tensor parallelism 2 makes validate_args ask).
MEGATRON_LM_PROBE = textwrap.dedent("""
    import json, sys
    import torch
    import megatron.training.arguments as arguments
    from megatron.training.arguments import parse_args, validate_args

    arguments.get_device_arch_version = lambda: 9
    torch.cuda.get_device_capability = lambda device=None: (9, 0)
    sys.argv = ["pretrain_gpt.py", "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
                "--seq-length", "128", "--max-position-embeddings", "128", "--micro-batch-size", "2",
                "--global-batch-size", "8", "--train-iters", "10", "--tensor-model-parallel-size", "2",
                "--tokenizer-type", "NullTokenizer", "--vocab-size", "1000", "--mock-data"]
    args = parse_args()
    validate_args(args, {})
    import megatron.core
    print("PROBE " + json.dumps({"core": megatron.core.__file__, "training": arguments.__file__,
                                 "data_parallel_size": args.data_parallel_size, "train_iters": args.train_iters}))
""")


@pytest.mark.megatron_lm
@frameworks.needs_stack("neox")
def test_megatron_lm_training_side_imports_and_validates(tmp_path):
    env = {**frameworks.megatron_lm_env(), "WORLD_SIZE": "4", "RANK": "0"}
    tree = frameworks.megatron_lm_dir()
    assert env["PYTHONPATH"].split(os.pathsep)[0] == tree and env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    r = subprocess.run(
        [sys.executable, "-c", MEGATRON_LM_PROBE], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    line = next(x for x in r.stdout.splitlines() if x.startswith("PROBE "))
    out = json.loads(line[len("PROBE ") :])
    assert out["core"].startswith(tree + os.sep) and out["training"].startswith(
        tree + os.sep
    )  # the tree, not the wheel
    assert out["data_parallel_size"] == 2 and out["train_iters"] == 10


# --------------------------------------------------------------------------------------------------------------
# extraction, on a tiny stand-in tarball


def _vendor(tmp_path, files: dict[str, bytes], sha: str | None = None) -> str:
    """A vendor directory with ``thing.tar.gz`` (top folder ``thing/``) and a README giving its sha256."""
    vendor = tmp_path / "vendor"
    vendor.mkdir()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo("thing/" + name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    (vendor / "thing.tar.gz").write_bytes(buf.getvalue())
    digest = sha or hashlib.sha256(buf.getvalue()).hexdigest()
    (vendor / "README.md").write_text(
        f"# copies\n\n`other.tar.gz`: sha256 {'0' * 64}.\n\n"
        f"`thing.tar.gz`: a thing, top folder `thing/`. sha256\n{digest}.\n"
    )
    return str(vendor)


def test_extract_once_checked_and_renamed(tmp_path):
    vendor = _vendor(tmp_path, {"a.txt": b"A", "sub/b.txt": b"B"})
    dest = str(tmp_path / "cache" / "thing-1")
    calls = []
    got = frameworks.extract_vendored("thing.tar.gz", dest, vendor, extra={"k": "v"}, finish=calls.append)
    assert got == dest and open(os.path.join(dest, "sub", "b.txt")).read() == "B"
    assert len(calls) == 1 and not calls[0].startswith(dest + os.sep)  # finished in the temporary tree, then renamed
    assert sorted(os.listdir(tmp_path / "cache")) == ["thing-1", "thing-1.lock"]  # no temporary left
    frameworks.extract_vendored("thing.tar.gz", dest, vendor, extra={"k": "v"}, finish=calls.append)
    assert len(calls) == 1  # stamped: not extracted again
    frameworks.extract_vendored("thing.tar.gz", dest, vendor, extra={"k": "w"}, finish=calls.append)
    assert len(calls) == 2  # another extra (e.g. another megatron-core wheel): extracted anew


def test_extract_refuses_a_wrong_checksum_and_a_missing_tarball(tmp_path):
    vendor = _vendor(tmp_path, {"a.txt": b"A"}, sha="f" * 64)
    dest = str(tmp_path / "cache" / "thing")
    with pytest.raises(RuntimeError, match="sha256 .* but .*README.md gives f{64}"):
        frameworks.extract_vendored("thing.tar.gz", dest, vendor)
    assert not os.path.exists(dest)
    os.unlink(os.path.join(vendor, "thing.tar.gz"))
    with pytest.raises(frameworks.FrameworkUnavailable, match="NEOX_EPOCH_VENDOR"):
        frameworks.extract_vendored("thing.tar.gz", dest, vendor)
    with pytest.raises(RuntimeError, match="names no sha256 for nothing.tar.gz"):
        frameworks.readme_sha256(vendor, "nothing.tar.gz")
    (tmp_path / "vendor" / "README.md").write_text(f"`a.tar.gz`: no checksum given.\n`b.tar.gz`: sha256 {'1' * 64}\n")
    assert frameworks.readme_sha256(vendor, "b.tar.gz") == "1" * 64
    with pytest.raises(RuntimeError, match="names no sha256 for a.tar.gz"):  # not b's
        frameworks.readme_sha256(vendor, "a.tar.gz")


def test_extract_in_parallel_processes(tmp_path):
    vendor = _vendor(tmp_path, {f"f{i}.bin": os.urandom(200_000) for i in range(20)})
    dest = str(tmp_path / "cache" / "thing")
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import frameworks; "
        "print(frameworks.extract_vendored('thing.tar.gz', sys.argv[2], sys.argv[3]))"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, os.path.join(HERE, "helpers"), dest, vendor],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0 and out.strip() == dest, err[-2000:]
    assert len(os.listdir(dest)) == 21  # 20 files and the stamp
    assert sorted(os.listdir(tmp_path / "cache")) == ["thing", "thing.lock"]


def test_vendor_dir_override(monkeypatch, tmp_path):
    monkeypatch.setenv("NEOX_EPOCH_VENDOR", str(tmp_path))
    assert frameworks.vendor_dir() == str(tmp_path)
    monkeypatch.delenv("NEOX_EPOCH_VENDOR")
    assert os.path.normpath(frameworks.vendor_dir()) == os.path.normpath(
        os.path.join(frameworks.REPO, "..", "shared", "vendor")
    )


# --------------------------------------------------------------------------------------------------------------
# the CI rule and the summary (tests/conftest.py loaded as a plugin into an inner pytest run)


INNER = textwrap.dedent("""
    import pytest

    @pytest.mark.neox
    def test_neox_skips():
        pytest.skip("no NeoX here")

    @pytest.mark.neox
    @pytest.mark.skipif(True, reason="skipped by a marker")
    def test_neox_skipif():
        pass

    @pytest.mark.megatron_lm
    def test_megatron_lm_passes():
        pass

    def test_plain_skip():
        pytest.skip("not a framework test")
""")


def _inner_pytest(tmp_path, ci: str | None, stack: str = "neox") -> subprocess.CompletedProcess[str]:
    """Run INNER under pytest with tests/conftest.py as a plugin, CI set to ``ci`` (None: unset), as ``stack``."""
    (tmp_path / "test_inner.py").write_text(INNER)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    neox: x\n    megatron_lm: x\n")
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = os.pathsep.join([HERE, os.path.join(HERE, "helpers"), env.get("PYTHONPATH", "")])
    env["NEOX_EPOCH_STACK"] = stack
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "conftest",
            "-p",
            "no:cacheprovider",
            "-q",
            "-rA",
            "--rootdir",
            str(tmp_path),
            "-c",
            str(tmp_path / "pytest.ini"),
            str(tmp_path),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_framework_skip_is_a_failure_under_ci(tmp_path):
    r = _inner_pytest(tmp_path, "true")
    assert r.returncode == 1, r.stdout
    assert "framework neox (GPT-NeoX): 2 tests, 0 ran, 0 passed, 2 failed, 0 skipped" in r.stdout
    assert "framework megatron_lm (Megatron-LM): 1 tests, 1 ran, 1 passed, 0 failed, 0 skipped" in r.stdout
    assert "CI=true: this GPT-NeoX test skipped (no NeoX here)" in r.stdout
    assert "skipped by a marker" in r.stdout
    assert "SKIPPED" in r.stdout and "not a framework test" in r.stdout  # other tests may still skip


def test_neox_tests_are_deselected_on_today_s_stack_not_skipped(tmp_path):
    """On today's stack (numpy 2) GPT-NeoX's tests are deselected with the reason, so CI=true has no skip to fail:
    the Megatron-LM test and the plain ones still run."""
    r = _inner_pytest(tmp_path, "true", stack="today")
    assert r.returncode == 0, r.stdout
    assert "framework neox (GPT-NeoX): 0 tests, 0 ran, 0 passed, 0 failed, 0 skipped" in r.stdout
    assert "framework megatron_lm (Megatron-LM): 1 tests, 1 ran, 1 passed, 0 failed, 0 skipped" in r.stdout
    assert "deselected 2 tests (neox stack only: GPT-NeoX ea7aefd8 pins numpy<2" in r.stdout
    assert "1 passed, 1 skipped, 2 deselected" in r.stdout


def test_framework_skip_is_a_skip_outside_ci(tmp_path):
    r = _inner_pytest(tmp_path, None)
    assert r.returncode == 0, r.stdout
    assert "framework neox (GPT-NeoX): 2 tests, 0 ran, 0 passed, 0 failed, 2 skipped" in r.stdout
    assert "1 passed, 3 skipped" in r.stdout
