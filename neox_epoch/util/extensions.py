"""The optional compiled extensions (``_greedy``, ``_exposure``, ``_mapguard``): loaded here, their absence said once.

setup.py builds them where a C compiler exists and installs without them otherwise (a wheel built without a compiler,
an sdist on a machine without one). Every result is the same without them: numpy and the jump method do the work,
slower (docs/install.md, Without a C compiler). ``NEOX_EPOCH_NO_EXTENSIONS=1`` makes an install behave as one built
without a compiler (to compare, or to rule the extensions out).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
from importlib import metadata
from types import ModuleType

log = logging.getLogger(__name__)
SWITCH = "NEOX_EPOCH_NO_EXTENSIONS"
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_said: set[str] = set()


def disabled() -> bool:
    """Whether the user switched the extensions off (``NEOX_EPOCH_NO_EXTENSIONS`` set to anything but 0/empty)."""
    return os.environ.get(SWITCH, "").strip().lower() not in ("", "0", "false", "no")


def load(name: str) -> ModuleType | None:
    """``neox_epoch.<name>``, or None when it is not built or switched off."""
    if disabled():
        return None
    try:
        return importlib.import_module(f"neox_epoch.{name}")
    except ImportError:
        return None


def editable() -> bool:
    """Whether this neox_epoch runs from a source checkout (setup.py beside the package) or an editable install
    (``direct_url.json``'s ``dir_info.editable``): the fix is then a rebuild in place."""
    if os.path.exists(os.path.join(os.path.dirname(_PACKAGE), "setup.py")):
        return True
    try:
        text = metadata.distribution("neox-epoch").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return False
    try:
        return bool(json.loads(text or "{}").get("dir_info", {}).get("editable", False))
    except (ValueError, AttributeError):
        return False


def fix() -> str:
    """How to get the extensions, for the way this copy was installed."""
    if disabled():
        return f"unset {SWITCH} to use them"
    if editable():
        return (
            "install a C compiler (gcc) and the Python headers (python3-dev), then rebuild: pip install -e . "
            "(or python setup.py build_ext --inplace) in the source checkout"
        )
    return (
        "install a C compiler (gcc) and the Python headers (python3-dev), then: "
        "pip install --force-reinstall --no-binary neox-epoch neox-epoch"
    )


def say_missing(name: str, what: str) -> None:
    """One warning per process that ``neox_epoch.<name>`` is not used (``what``: what runs instead)."""
    if name in _said:
        return
    _said.add(name)
    why = f"switched off by {SWITCH}" if disabled() else "not built (no C compiler at install time)"
    log.warning("neox_epoch.%s is %s: %s (same results, slower); to build it: %s", name, why, what, fix())
