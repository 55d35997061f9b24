"""Tests that need a package beyond the core install (deepspeed, torch, megatron-core).

With only the core installed (``pip install -e .[dev]``: numpy, pyyaml, pytest, ruff, hypothesis) those tests
skip and say which package and which install command would run them. Under ``CI=true`` (where
``scripts/setup.sh`` installs everything) nothing is skipped for a missing package: the import error is the
failure.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

#: module -> the install that provides it
INSTALL = {
    "deepspeed": "pip install -e .[deepspeed] (or bash scripts/setup.sh)",
    "torch": "pip install torch==2.13.0 (or bash scripts/setup.sh)",
    "megatron.core": "pip install -e .[megatron-core] (or bash scripts/setup.sh)",
}


def in_ci() -> bool:
    """True when the CI environment variable says this is a CI run (``CI=true``)."""
    return os.environ.get("CI", "").strip().lower() == "true"


def installed(module: str) -> bool:
    """True when ``module`` can be imported (its top-level package is found)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def _reason(module: str) -> str:
    return f"{module} is not installed (core-only install): {INSTALL[module]}"


def needs(*modules: str) -> pytest.MarkDecorator:
    """A mark that skips the test when one of ``modules`` is missing (never under CI=true)."""
    missing = [m for m in modules if not installed(m)]
    return pytest.mark.skipif(bool(missing) and not in_ci(), reason="; ".join(_reason(m) for m in missing))


def require(module: str) -> None:
    """At module level: skip the whole test module when ``module`` is missing (under CI=true: fail to collect)."""
    if not in_ci():
        pytest.importorskip(module, reason=_reason(module))
