"""The ``neox_epoch`` block as the NeoX hooks receive it, and its transport to every worker.

A user writes ``"neox_epoch": {"epochs": 1}`` in a NeoX config. ``neox-epoch plan --write-config``
writes the same block with the exact settings it computed (``targets``, ``weights``); both forms are
accepted here. ``neox-epoch launch`` (and the deepy patch) hand the validated block plus the planned
settings to the workers in one environment variable, :data:`ENV_VAR`, whose prefix
:data:`EXPORT_PREFIX` is added to DeepSpeed's ``runner.EXPORT_ENVS`` so multi-node launchers export it.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from neox_epoch.errors import ConfigError
from neox_epoch.formats.neox_config import BLOCK, EpochBlock

#: environment variable carrying ``{"neox_epoch": block, "settings": {...}}`` (base64 of JSON) to the workers
ENV_VAR = "NEOX_EPOCH_BLOCK"
#: prefix appended to ``deepspeed.launcher.runner.EXPORT_ENVS`` so pdsh/MPI launchers export :data:`ENV_VAR`
EXPORT_PREFIX = "NEOX_EPOCH"
#: keys ``neox-epoch plan --write-config`` adds to the block: exact settings, checked against the live plan
SETTINGS_KEYS = ("targets", "weights")


@dataclass(frozen=True)
class HookBlock:
    """A validated block plus the exact settings computed for it (empty until planned)."""

    block: EpochBlock
    """The user's keys (epochs, blend_buffer, separate_epochs, log_dir, enforce)."""
    settings: dict[str, Any] = field(default_factory=dict)
    """Planned settings: train_iters, train_batch_size, blend_buffer, and for blends targets/weights."""

    def to_env(self) -> str:
        """The :data:`ENV_VAR` value."""
        payload = {BLOCK: self.block.to_mapping(), "settings": self.settings}
        return base64.urlsafe_b64encode(json.dumps(payload, sort_keys=True).encode("utf-8")).decode("ascii")


def parse_block(raw: Any, where: str = BLOCK) -> HookBlock:
    """Validate a ``neox_epoch`` mapping (unknown key -> did-you-mean); split off plan-written settings."""
    if isinstance(raw, EpochBlock):
        return HookBlock(raw)
    if isinstance(raw, HookBlock):
        return raw
    if not isinstance(raw, Mapping):
        raise ConfigError(f'{where}: expected a mapping such as {{"epochs": 1}}, found {raw!r}')
    full = EpochBlock.from_mapping(dict(raw), where)  # the one validation of the block, settings included
    settings = {k: getattr(full, k) for k in SETTINGS_KEYS if getattr(full, k) is not None}
    block = replace(full, targets=None, weights=None)  # SETTINGS_KEYS
    return HookBlock(block, settings)


def decode_env(value: str) -> HookBlock:
    """Parse an :data:`ENV_VAR` value written by :meth:`HookBlock.to_env`."""
    try:
        payload = json.loads(base64.urlsafe_b64decode(value.encode("ascii")).decode("utf-8"))
    except (ValueError, binascii.Error, UnicodeError) as err:
        raise ConfigError(f"{ENV_VAR}: not a value written by neox-epoch launch ({err}); unset it or relaunch") from err
    if not isinstance(payload, dict) or BLOCK not in payload:
        raise ConfigError(f"{ENV_VAR}: no {BLOCK} block in the payload; unset it or relaunch with neox-epoch launch")
    hb = parse_block(payload[BLOCK], ENV_VAR)
    settings = payload.get("settings") or {}
    if not isinstance(settings, dict):
        raise ConfigError(f"{ENV_VAR}: settings: expected a mapping, found {settings!r}; relaunch")
    return HookBlock(hb.block, {**hb.settings, **settings})


def from_environ(environ: Mapping[str, str] | None = None) -> HookBlock | None:
    """The block handed to this worker, or None when :data:`ENV_VAR` is unset or empty."""
    value = (os.environ if environ is None else environ).get(ENV_VAR, "")
    return decode_env(value) if value else None
