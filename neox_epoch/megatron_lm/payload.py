"""What ``neox-epoch launch`` hands every Megatron-LM rank: one environment variable, base64 of JSON.

Torch-free. The launcher writes it (:func:`encode`), the worker reads it (:func:`from_environ`); torchrun and
``python`` pass the environment to their children unchanged.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from neox_epoch.errors import ConfigError

#: environment variable carrying the :class:`Payload` to every rank
ENV_VAR = "NEOX_EPOCH_MEGATRON_LM"


@dataclass(frozen=True)
class Payload:
    """The launch's decisions, as every rank needs them."""

    mode: str = "observe"
    """``exact`` (passes asked: the flags were applied) or ``observe`` (the line runs as given)."""
    version: str = ""
    """The megatron-core version the plan mirrors (its flag table)."""
    settings: dict[str, Any] = field(default_factory=dict)
    """The exact plan's settings (targets, weights, train_iters, megatron_flags, schedule); empty when observing."""
    log_dir: str | None = None
    """``--log-dir`` (None: Megatron-LM's --tensorboard-dir, else --save)."""
    enforce: bool = True
    """Stop the run when a source draws past its planned samples."""
    log_interval: int | None = None
    """Iterations between counters records (None: Megatron-LM's --log-interval)."""
    warnings: list[str] = field(default_factory=list)
    """The plan's warnings (a remainder, a phase boundary): logged in the run too."""

    def encode(self) -> str:
        return base64.urlsafe_b64encode(json.dumps(asdict(self), sort_keys=True).encode("utf-8")).decode("ascii")


def decode(value: str) -> Payload:
    try:
        raw = json.loads(base64.urlsafe_b64decode(value.encode("ascii")).decode("utf-8"))
    except (ValueError, binascii.Error, UnicodeError) as err:
        raise ConfigError(f"{ENV_VAR}: not a value written by neox-epoch launch ({err}); unset it or relaunch") from err
    if not isinstance(raw, dict):
        raise ConfigError(f"{ENV_VAR}: expected a JSON object; unset it or relaunch with neox-epoch launch")
    known = set(Payload.__dataclass_fields__)
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"{ENV_VAR}: unknown keys {unknown} (written by another neox-epoch version?); relaunch")
    return Payload(**raw)


def from_environ(environ: Mapping[str, str] | None = None) -> Payload | None:
    value = (os.environ if environ is None else environ).get(ENV_VAR, "")
    return decode(value) if value else None
