"""``neox_epoch.neox.install(block)``: the one public entry point that puts the hooks in place in a NeoX process.

Call it before NeoX builds its data: ``neox-epoch launch`` runs it in every worker (through
``python -m neox_epoch.neox.worker``), the patched ``train.py`` runs :func:`install_from_env`, and custom
training scripts or tests call it in-process with the ``neox_epoch`` mapping::

    import neox_epoch.neox
    neox_epoch.neox.install({"epochs": 1, "log_dir": "logs/epochs"})

NeoX's modules (``megatron.training``, ``megatron.data.*``) must be importable (the NeoX checkout on
``sys.path``); they are imported here if they are not yet. Nothing in NeoX's files changes: module
globals are replaced in memory and :func:`uninstall` puts the originals back.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping
from typing import Any

from neox_epoch.errors import ConfigError
from neox_epoch.neox.block import HookBlock, from_environ, parse_block
from neox_epoch.neox.hooks import State, make_wrappers, rank
from neox_epoch.util.loghandler import ensure_log_handler as _ensure_log_handler

log = logging.getLogger("neox_epoch.neox")

_MODULES = {
    "training": "megatron.training",
    "data_utils": "megatron.data.data_utils",
    "gpt2_dataset": "megatron.data.gpt2_dataset",
    "blendable_dataset": "megatron.data.blendable_dataset",
}

_state: State | None = None


def _target(state: State, key: tuple[str, str]) -> tuple[Any, str]:
    where, attr = key
    mod, _, cls = where.partition(".")
    obj: Any = state.modules[mod]
    if cls:
        obj = getattr(obj, cls)
    return obj, attr


def install(block: Mapping[str, Any] | HookBlock, settings: Mapping[str, Any] | None = None) -> State:
    """Validate ``block`` (the ``neox_epoch`` mapping) and install the hooks; returns the live state.

    ``settings`` are the planned values ``neox-epoch launch`` hands over (checked against the plan made
    here). Installing again replaces the previous installation.
    """
    global _state
    hb = parse_block(block)
    if settings:
        hb = HookBlock(hb.block, {**hb.settings, **dict(settings)})
    if _state is not None:
        uninstall()
    try:
        modules = {k: importlib.import_module(v) for k, v in _MODULES.items()}
    except ImportError as err:
        raise ConfigError(
            f"neox_epoch.neox.install: cannot import GPT-NeoX ({err}); run from the NeoX checkout or put it on sys.path"
        ) from err
    _ensure_log_handler()
    state = State(hook=hb, modules=modules)
    wrappers = make_wrappers(state)
    for key in wrappers:
        obj, attr = _target(state, key)
        state.originals[key] = getattr(obj, attr)
    for key, fn in wrappers.items():
        obj, attr = _target(state, key)
        setattr(obj, attr, fn)
    _state = state
    if rank() == 0:
        log.info("neox_epoch: hooks installed: %s", hb.block.to_mapping())
    return state


def install_from_env() -> State | None:
    """Install from ``$NEOX_EPOCH_BLOCK`` (set by neox-epoch launch / the deepy patch); no-op when unset."""
    hb = from_environ()
    return install(hb) if hb is not None else None


def uninstall() -> None:
    """Put NeoX's original functions back."""
    global _state
    if _state is None:
        return
    for key, value in _state.originals.items():
        obj, attr = _target(_state, key)
        setattr(obj, attr, value)
    _state = None


def current() -> State | None:
    """The installed state (None when not installed)."""
    return _state
