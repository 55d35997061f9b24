"""Megatron-LM's own TensorBoard and W&B writers (``megatron.training.global_vars``), keyed on consumed samples.

Megatron-LM makes them on its last rank only. TensorBoard scalars are written at step = consumed train samples
(``args.consumed_train_samples``), so a batch ramp or a resume with another batch keeps one x axis; W&B's step
must only grow and Megatron-LM logs at the iteration, so W&B gets the same keys at the iteration plus
``neox_epoch/consumed_samples``.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("neox_epoch.megatron_lm")
#: the W&B key carrying the consumed samples beside the per-source scalars
CONSUMED_KEY = "neox_epoch/consumed_samples"


@dataclass
class MegatronWriters:
    tensorboard: Any = None
    wandb: Any = None

    @classmethod
    def from_megatron(cls) -> MegatronWriters:
        gv = importlib.import_module("megatron.training.global_vars")
        tb = getattr(gv, "get_tensorboard_writer", lambda: None)()
        wb = getattr(gv, "get_wandb_writer", lambda: None)()
        return cls(tb, wb)

    @property
    def has_any(self) -> bool:
        return self.tensorboard is not None or self.wandb is not None

    def scalar_writer(self, hooks: Any) -> Any:
        """An ``add_scalar(tag, value, step)`` object for the live counters (None without writers)."""
        return _Scalars(self, hooks) if self.has_any else None


class _Scalars:
    """What the counters write to: ``step`` (their iteration) becomes consumed samples for TensorBoard."""

    def __init__(self, writers: MegatronWriters, hooks: Any) -> None:
        self.writers = writers
        self.hooks = hooks

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        counters = self.hooks.counters
        consumed = int(counters.consumed_samples) if counters is not None else int(step)
        try:
            if self.writers.tensorboard is not None:
                self.writers.tensorboard.add_scalar(tag, value, consumed)
            if self.writers.wandb is not None:
                self.writers.wandb.log({tag: value, CONSUMED_KEY: consumed}, step=int(step))
        except Exception as err:  # noqa: BLE001 - a writer's failure never stops the run
            log.warning("neox_epoch: the scalar writer failed (%s: %s); training continues", type(err).__name__, err)
