"""Run logs (``neox_epoch.jsonl``) written by the hooks' own writers, for the run-report tests.

A launch is simulated exactly as the NeoX hooks drive the writers: ``after_build`` (the hooks' function, with
a plan from the real planner over real .bin/.idx corpora) writes the "plan" event and builds the
:class:`PassCounters`; then the ``train`` wrapper's ``start(iteration)``, the ``training_log`` wrapper's
``step(i)`` once per iteration, and the ``final(iteration)`` of its ``finally``. Nothing here writes JSON itself.
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

from neox_epoch.formats.neox_config import EpochBlock
from neox_epoch.neox.block import HookBlock
from neox_epoch.neox.counters import JSONL_NAME
from neox_epoch.neox.hook_build import after_build
from neox_epoch.neox.hook_state import State
from neox_epoch.neox.planning import make_run_plan


def blend_values(
    prefixes: list[str], weights: list[float], seq_length: int, train_batch_size: int, **more: Any
) -> dict[str, Any]:
    """NeoX's values for a train_data_paths run (valid/test on the first prefix)."""
    return {
        "train_data_paths": prefixes,
        "valid_data_paths": prefixes[:1],
        "test_data_paths": prefixes[:1],
        "train_data_weights": weights,
        "seq_length": seq_length,
        "train_batch_size": train_batch_size,
        "eval_interval": 1000,
        "eval_iters": 1,
        **more,
    }


def launch(
    log_dir: str,
    values: dict[str, Any],
    block: EpochBlock,
    start: int = 0,
    stop: int | None = None,
    log_interval: int = 10,
) -> str:
    """One launch from ``start`` (a checkpoint's iteration; 0: from scratch) to ``stop`` (None: train_iters;
    fewer: NeoX stopped early, e.g. exit_interval). Returns the JSONL path."""
    block = EpochBlock(**{**block.__dict__, "log_dir": log_dir})
    rp = make_run_plan(values, block)
    state = State(hook=HookBlock(block), modules={})
    args = SimpleNamespace(iteration=start, log_interval=log_interval, gradient_accumulation_steps=1)
    after_build(state, rp, args, loaders={})
    counters = state.counters
    assert counters is not None
    end = max(start, rp.train_iters if stop is None else stop)  # NeoX's loop runs while iteration < train_iters
    counters.start(start)
    for it in range(start + 1, end + 1):
        counters.step(it)
    counters.final(end)
    return os.path.join(log_dir, JSONL_NAME)
