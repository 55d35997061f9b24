"""The optional C extensions are built, and from their current sources, wherever a C compiler exists.

setup.py marks them optional so that installs without a compiler still work (numpy does the same work,
slower); the flip side is that a compile error only prints a warning and leaves an older build (or none)
in place. This test turns that into a failure where it matters: on a machine with a compiler (CI)."""

from __future__ import annotations

import importlib
import os
import shutil

import pytest

import neox_epoch

HERE = os.path.dirname(os.path.abspath(neox_epoch.__file__))


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler here")
@pytest.mark.parametrize("name", ["_exposure", "_greedy"])
def test_extension_built_from_current_source(name):
    try:
        mod = importlib.import_module(f"neox_epoch.{name}")
    except ImportError as err:  # pragma: no cover - the failure this test is for
        pytest.fail(f"neox_epoch.{name} is not built ({err}): run `pip install -e .` and read its compiler output")
    src = os.path.join(HERE, f"{name}.c")
    so = getattr(mod, "__file__", None) or ""
    if os.path.exists(src) and so.startswith(HERE):
        # why: a failed rebuild keeps the previous .so; it must not be older than the source it claims to be
        assert os.path.getmtime(so) >= os.path.getmtime(src), (
            f"{so} is older than {src}: the last build failed; rebuild with `python setup.py build_ext --inplace`"
        )
