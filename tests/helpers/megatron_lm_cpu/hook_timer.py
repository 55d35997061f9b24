"""Times neox-epoch's Megatron-LM hook methods inside a run (bench/megatron_hooks_bench.py; imported by
sitecustomize.py when ``NEOX_EPOCH_MEGATRON_HOOK_TIMES`` names a directory). At exit each rank writes
``rank<R>.json``: per method, the calls and the seconds spent in them (perf_counter)."""

from __future__ import annotations

import atexit
import functools
import json
import os
import time
from collections.abc import Callable
from typing import Any

METHODS = ("request", "after_build", "after_step", "after_save", "after_pretrain")
_TIMES: dict[str, list[float]] = {}


def _timed(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(real)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            entry = _TIMES.setdefault(name, [0, 0.0])
            entry[0] += 1
            entry[1] += time.perf_counter() - start

    return wrapper


def _dump() -> None:
    path = os.path.join(os.environ["NEOX_EPOCH_MEGATRON_HOOK_TIMES"], f"rank{os.environ.get('RANK', '0')}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({name: {"calls": int(c), "seconds": s} for name, (c, s) in _TIMES.items()}, f)


def patch(module: Any) -> None:
    """Wrap the Hooks methods of neox_epoch.megatron_lm.hooks with timers."""
    for name in METHODS:
        if hasattr(module.Hooks, name):
            setattr(module.Hooks, name, _timed(name, getattr(module.Hooks, name)))
    atexit.register(_dump)
