"""GPT-NeoX integration: the ``neox_epoch`` block applied through hooks on NeoX's own functions.

Public entry points: :func:`install` (the block mapping -> hooks in this process), :func:`install_from_env`
(what a patched ``train.py`` and the worker wrapper call), :func:`hook_deepy` (what a patched
``deepy.py`` calls), and the ``neox-epoch launch`` subcommand (``neox_epoch.neox.launch``).
Modules: ``block`` (validation, transport), ``planning`` (the plan from NeoX's values), ``hooks``
(the wrappers), ``index`` (epoch-separated index files), ``counters`` (live passes), ``installer``,
``launch`` and ``worker``. Importing this package imports neither torch nor NeoX.
"""

from __future__ import annotations

from typing import Any


def install(block: Any, settings: Any = None) -> Any:
    """Install the hooks for ``block`` (the ``neox_epoch`` mapping); see :mod:`neox_epoch.neox.installer`."""
    from neox_epoch.neox.installer import install as _install

    return _install(block, settings)


def install_from_env() -> Any:
    """Install from ``$NEOX_EPOCH_BLOCK`` when set (no-op otherwise)."""
    from neox_epoch.neox.installer import install_from_env as _install_from_env

    return _install_from_env()


def uninstall() -> None:
    """Remove the hooks."""
    from neox_epoch.neox.installer import uninstall as _uninstall

    _uninstall()


def hook_deepy() -> None:
    """For a patched ``deepy.py``: strip and apply the ``neox_epoch`` block while deepy parses its configs."""
    from neox_epoch.neox.launch import hook_deepy as _hook_deepy

    _hook_deepy()


__all__ = ["hook_deepy", "install", "install_from_env", "uninstall"]
