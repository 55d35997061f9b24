"""A consistent batch for the launcher's world that keeps the global batch (train_batch_size) fixed.

Keeping ``train_batch_size`` keeps samples per step, so a planned ``train_iters`` still covers the same
epochs. The fix changes ``gradient_accumulation_steps`` first (micro batch kept) and the micro batch
only when the per-rank batch is not a multiple of it (then the largest divisor not above the old
micro batch, so memory per step never grows). For NeoX configs whose own GPU count differs from the
launcher's, it also sets ``global_num_gpus`` to the launcher's world, which NeoX then uses instead of
counting. Impossible when ``train_batch_size`` is not a multiple of dp.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from neox_epoch.batch.check import BatchReport
from neox_epoch.batch.config import BatchConfig, LauncherSettings
from neox_epoch.errors import BatchError
from neox_epoch.util.config_out import (
    Input,
    check_output_path,
    config_inputs,
    config_output,
    write_config_text,
    yaml_config_text,
)


@dataclass(frozen=True, kw_only=True)
class BatchFix:
    """The consistent values and what changed."""

    train_batch_size: int
    """Kept from the config (or from what NeoX derived when the config gave none)."""
    train_micro_batch_size_per_gpu: int
    """Micro batch per rank (changed only when grad accumulation alone cannot fit)."""
    gradient_accumulation_steps: int
    """Grad accumulation for the launcher's dp."""
    data_parallel_size: int
    """The launcher's dp the values are consistent with."""
    global_num_gpus: int | None
    """NeoX only: the launcher's world, set when NeoX's own count would differ; None otherwise."""
    changes: tuple[str, ...]
    """``gradient_accumulation_steps 2 -> 4`` style, in the order applied."""

    def settings(self) -> dict[str, int]:
        """The keys to write, ``{key: value}``."""
        out = {
            "train_batch_size": self.train_batch_size,
            "train_micro_batch_size_per_gpu": self.train_micro_batch_size_per_gpu,
            "gradient_accumulation_steps": self.gradient_accumulation_steps,
        }
        if self.global_num_gpus is not None:
            out["global_num_gpus"] = self.global_num_gpus
        return out

    def summary(self) -> str:
        """``set gradient_accumulation_steps: 4 (train_batch_size stays 32)`` for messages."""
        changed = ", ".join(self.changes) if self.changes else "no change needed"
        return f"{changed} (train_batch_size stays {self.train_batch_size})"


def consistent_micro_and_accumulation(train_batch_size: int, micro_batch: int, dp: int) -> tuple[int, int]:
    """``(micro, grad_accum)`` with ``micro * grad_accum * dp == train_batch_size``, micro <= ``micro_batch``.

    Keeps ``micro_batch`` when the per-rank batch is a multiple of it, else the largest divisor of the
    per-rank batch below it. Raises :class:`BatchError` when ``train_batch_size`` is not a multiple of dp.
    """
    if train_batch_size % dp:
        lower = train_batch_size - train_batch_size % dp
        upper = lower + dp
        options = f"{lower} or {upper}" if lower > 0 else f"{upper}"
        raise BatchError(
            f"train_batch_size {train_batch_size} cannot be kept on dp {dp}: it is not a multiple of dp, so no "
            f"micro batch and grad accumulation give it; use train_batch_size {options} (and re-plan the "
            f"iterations), or launch a world whose dp divides {train_batch_size}"
        )
    per_rank = train_batch_size // dp
    micro = max(1, min(micro_batch, per_rank))
    while per_rank % micro:
        micro -= 1
    return micro, per_rank // micro


def plan_fix(config: BatchConfig, report: BatchReport) -> BatchFix:
    """The consistent values for ``report``'s launcher world, keeping the global batch fixed."""
    reference = report.neox_batch if report.neox_batch is not None else report.batch
    tbs = config.train_batch_size if config.train_batch_size is not None else reference.train_batch_size
    micro_ref = config.train_micro_batch_size_per_gpu
    if micro_ref is None:
        micro_ref = max(1, reference.train_micro_batch_size_per_gpu)
    dp = report.data_parallel_size
    micro, gas = consistent_micro_and_accumulation(tbs, micro_ref, dp)

    changes: list[str] = []
    old_gas = config.gradient_accumulation_steps if config.gradient_accumulation_steps_given else None
    if config.flavor == "neox" and old_gas is None:
        old_gas = 1
    if old_gas != gas:
        changes.append(f"gradient_accumulation_steps {old_gas if old_gas is not None else '(derived)'} -> {gas}")
    if config.train_micro_batch_size_per_gpu != micro:
        old = config.train_micro_batch_size_per_gpu
        changes.append(f"train_micro_batch_size_per_gpu {old if old is not None else '(derived)'} -> {micro}")
    if config.train_batch_size is None:
        changes.append(f"train_batch_size (derived) -> {tbs}")
    global_num_gpus = None
    if (
        config.flavor == "neox"
        and report.neox_world_size is not None
        and (report.neox_world_size != report.world_size or config.global_num_gpus is not None)
    ):
        global_num_gpus = report.world_size
        if config.global_num_gpus != report.world_size:
            old_gpus = (
                config.global_num_gpus
                if config.global_num_gpus is not None
                else f"(NeoX counts {report.neox_world_size})"
            )
            changes.append(f"global_num_gpus {old_gpus} -> {report.world_size}")
    return BatchFix(
        train_batch_size=tbs,
        train_micro_batch_size_per_gpu=micro,
        gradient_accumulation_steps=gas,
        data_parallel_size=dp,
        global_num_gpus=global_num_gpus,
        changes=tuple(changes),
    )


def fixed_config(config: BatchConfig, fix: BatchFix, launcher: LauncherSettings | None = None) -> dict[str, Any]:
    """The config with the fixed keys (and, for NeoX, the launcher settings that were checked) applied."""
    data = dict(config.data)
    for key, value in fix.settings().items():
        data[key] = value
    if config.flavor == "neox" and launcher is not None:
        data.update(launcher.given())
    return data


def render(config: BatchConfig, data: Mapping[str, Any], fix: BatchFix, out_path: str) -> str:
    """Text of the fixed config: JSON for a DeepSpeed config, YAML for NeoX."""
    if config.flavor == "deepspeed":
        return json.dumps(data, indent=2) + "\n"
    header = [
        f"written by neox-epoch check-batch --fix from {', '.join(os.path.basename(p) for p in config.paths)}",
        f"dp {fix.data_parallel_size}: {fix.summary()}",
    ]
    return yaml_config_text(header, data)


def write_fixed_config(
    config: BatchConfig,
    fix: BatchFix,
    out_path: str,
    launcher: LauncherSettings | None = None,
    read: Sequence[Input] = (),
) -> str:
    """Write the fixed config to ``out_path`` through the output policy (never over an input file: the configs
    and the other files ``read``, such as the hostfile); return the text."""
    out = config_output(out_path, "--fix", ".fixed")
    inputs = config_inputs(config.paths, read)
    neox = config.flavor != "deepspeed"
    check_output_path(
        out,
        inputs,
        extensions=(".yml", ".yaml") if neox else (".json",),
        kind="NeoX YAML" if neox else "DeepSpeed JSON",
    )
    text = render(config, fixed_config(config, fix, launcher), fix, out_path)
    write_config_text(out, text, inputs)
    return text
