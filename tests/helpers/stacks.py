"""The Python stacks the cross-stack tests run the CLI under: "neox" (GPT-NeoX's pins: numpy 1.x) and "today"
(what users install today: numpy 2.x).

Found from ``NEOX_EPOCH_STACK_PYTHONS`` ("neox=/path/bin/python,today=/path/bin/python"; a relative path is relative
to the repository) when it is set, else the interpreters of ``<repo>/.venv`` and ``<repo>/.venv-today`` where they
exist. A stack that is not found makes the
test skip (under ``CI=true``: fail) with a reason naming the variable and ``bash scripts/setup.sh``.
"""

from __future__ import annotations

import os

import pytest
from optional import in_ci

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: the variable naming each stack's interpreter
ENV = "NEOX_EPOCH_STACK_PYTHONS"
#: stack name -> its interpreter relative to the repository, when the variable is not set
DEFAULTS = {"neox": os.path.join(".venv", "bin", "python"), "today": os.path.join(".venv-today", "bin", "python")}


def _from_env(value: str) -> dict[str, str]:
    """``name=python`` pairs separated by commas; a name that is not a stack or a pair without ``=`` is an error."""
    out: dict[str, str] = {}
    for item in filter(None, (x.strip() for x in value.split(","))):
        name, eq, python = item.partition("=")
        if not eq or name.strip() not in DEFAULTS or not python.strip():
            raise ValueError(
                f"{ENV}: {item!r}: expected name=python with a name of {sorted(DEFAULTS)}, e.g. "
                f"{ENV}=neox=.venv/bin/python,today=.venv-today/bin/python"
            )
        out[name.strip()] = os.path.join(ROOT, python.strip())  # an absolute path stays as it is
    return out


def stack_pythons() -> dict[str, str]:
    """Stack name -> interpreter (an executable file), for each stack that is found."""
    value = os.environ.get(ENV, "").strip()
    wanted = _from_env(value) if value else {name: os.path.join(ROOT, path) for name, path in DEFAULTS.items()}
    return {name: python for name, python in wanted.items() if os.path.isfile(python) and os.access(python, os.X_OK)}


def require_stacks() -> dict[str, str]:
    """Both stacks' interpreters; skip (under ``CI=true``: fail) the test when one is not found."""
    found = stack_pythons()
    missing = [name for name in DEFAULTS if name not in found]
    if missing:
        where = (
            f"{ENV}={os.environ[ENV]!r}"
            if os.environ.get(ENV, "").strip()
            else f"{ENV} unset and {', '.join(DEFAULTS[m] for m in missing)} missing"
        )
        reason = (
            f"the {' and '.join(missing)} stack{'s' * (len(missing) > 1)} not found ({where}): set "
            f"{ENV}=neox=PYTHON,today=PYTHON or create the environments (bash scripts/setup.sh)"
        )
        if in_ci():
            pytest.fail(f"CI=true: {reason}")
        pytest.skip(reason)
    return found
