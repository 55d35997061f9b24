"""NeoX's batch: train_batch_size, micro batch, gradient accumulation and the GPU count, derived as NeoX's
``calculate_derived`` derives them for one world. The one NeoX batch derivation: ``plan`` and
``resume-check`` use :func:`neox_batch`, ``check-batch`` uses :func:`neox_dp` and :func:`neox_derivation`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from neox_epoch.batch.check import batch_errors, derive_batch, neox_dp
from neox_epoch.batch.config import LauncherSettings, neox_launcher
from neox_epoch.batch.hostfile import neox_hostfile_path
from neox_epoch.batch.neox_count import NeoxCount, neox_gpu_count
from neox_epoch.errors import BatchError, ConfigError
from neox_epoch.formats.neox_config import NeoxConfig, get_int


@dataclass(frozen=True)
class NeoxBatch:
    """NeoX's batch numbers for one world, derived as its ``calculate_derived`` derives them."""

    train_batch_size: int
    """Samples per iteration (NeoX's train_batch_size, given or derived)."""
    micro_batch_size: int | None
    """train_micro_batch_size_per_gpu (derived; as written when the world is not needed)."""
    gradient_accumulation_steps: int | None
    """gradient_accumulation_steps (derived; as written, default 1, when the world is not needed)."""
    global_num_gpus: int | None
    """NeoX's GPU count, None when it was not needed (train_batch_size given and no world known)."""
    data_parallel_size: int | None
    """global_num_gpus / (pp * mp), None with global_num_gpus."""
    basis: str
    """How the count came about (hostfile, --world-size, global_num_gpus, torch.cuda.device_count())."""

    def describe(self) -> str:
        """One line for the report: the count, its basis and the batch arithmetic."""
        if self.global_num_gpus is None:
            return f"train_batch_size {self.train_batch_size} as written ({self.basis})"
        return (
            f"NeoX counts {self.global_num_gpus} GPUs {self.basis}; dp {self.data_parallel_size}: "
            f"train_batch_size = micro * grad_accum * dp = {self.micro_batch_size} * "
            f"{self.gradient_accumulation_steps} * {self.data_parallel_size} = {self.train_batch_size}"
        )


def _launcher(cfg: NeoxConfig, overrides: LauncherSettings | None) -> LauncherSettings:
    """The config's launcher keys (hostfile, include, exclude, num_nodes, num_gpus) with flags applied."""
    return neox_launcher(cfg.values, cfg.origin).overridden_by(overrides or LauncherSettings())


def _no_world(why: str) -> ConfigError:
    return ConfigError(
        f"train_batch_size: not set, so NeoX derives it as micro * grad_accum * dp, and {why}; give "
        "the world: --hostfile FILE (or hostfile: in a config), --world-size N, or set "
        "train_batch_size"
    )


def neox_count(
    cfg: NeoxConfig, settings: LauncherSettings, world_size: int | None = None, environ: Mapping[str, str] | None = None
) -> NeoxCount:
    """NeoX's ``global_num_gpus`` for this config: ``world_size`` (``--world-size``) when given, else the
    config's global_num_gpus, else :func:`~neox_epoch.batch.neox_count.neox_gpu_count` (the hostfile, read
    without DeepSpeed or torch when no include/exclude is set; ``torch.cuda.device_count()`` without one)."""
    if world_size is not None:
        if world_size <= 0:
            raise ConfigError(f"--world-size: {world_size}; expected a positive number of GPUs")
        return NeoxCount(count=world_size, basis="from --world-size")
    given = get_int(cfg, "global_num_gpus")
    try:
        count = neox_gpu_count(settings, global_num_gpus=given, environ=environ)
    except ImportError as err:
        if settings.include or settings.exclude:
            raise ConfigError(
                f"include/exclude: applied with DeepSpeed's own launcher functions, which cannot be "
                f"imported here ({err}); install deepspeed, or give the world with --world-size N"
            ) from None
        raise _no_world(
            "there is no hostfile, so NeoX would count torch.cuda.device_count() GPUs, but torch is not installed here"
        ) from None
    if count.count <= 0:
        raise _no_world(f"NeoX counts 0 GPUs {count.basis}{_ignored_without_hostfile(settings, environ)}")
    return count


def _ignored_without_hostfile(settings: LauncherSettings, environ: Mapping[str, str] | None) -> str:
    """`` (num_gpus 8 count only with a hostfile ...)`` when such keys are set and there is no hostfile."""
    ignored = [f"{k} {getattr(settings, k)}" for k in ("num_gpus", "num_nodes") if getattr(settings, k)]
    if not ignored or neox_hostfile_path(settings, environ) is not None:
        return ""
    return f" ({' and '.join(ignored)} count only with a hostfile, in NeoX as here)"


def world_needs_device_count(
    cfg: NeoxConfig, settings: LauncherSettings, world_size: int | None = None, environ: Mapping[str, str] | None = None
) -> bool:
    """True when NeoX's count would come from ``torch.cuda.device_count()`` (no explicit count, no hostfile
    file), i.e. when the world is a property of the machine the run starts on."""
    if world_size is not None or cfg.values.get("global_num_gpus") is not None:
        return False
    path = neox_hostfile_path(settings, environ)
    return path is None or not os.path.isfile(path)


def neox_gas(cfg: NeoxConfig) -> int | None:
    """gradient_accumulation_steps as NeoX reads it: 1 when absent, None when written as null."""
    if "gradient_accumulation_steps" not in cfg.values:
        return 1
    return get_int(cfg, "gradient_accumulation_steps")


def _dp(cfg: NeoxConfig, count: NeoxCount) -> int:
    """NeoX's dp with pp, mp below 1 counted as 1 (:func:`~neox_epoch.batch.check.neox_dp`)."""
    pp = max(get_int(cfg, "pipe_parallel_size", 1, positive=False) or 0, 1)
    mp = max(get_int(cfg, "model_parallel_size", 1, positive=False) or 0, 1)
    return neox_dp(count.count, pp, mp, counted=count.basis)


def neox_batch(
    cfg: NeoxConfig,
    world_size: int | None = None,
    launcher: LauncherSettings | None = None,
    environ: Mapping[str, str] | None = None,
) -> NeoxBatch:
    """NeoX's train_batch_size (and micro batch, grad accumulation, GPU count) for this config and world.

    The world is NeoX's own count (:func:`neox_count`): ``--world-size``, global_num_gpus, the hostfile
    of the config or of ``launcher`` (flags win), or ``$DLTS_HOSTFILE``; then dp, the derivation and the
    checks of NeoX's ``calculate_batch_parameters`` / ``check_batch_parameters``, with NeoX's defaults
    (gradient_accumulation_steps 1). When train_batch_size is written and the world would need this
    machine's GPU count, the world is not taken (the plan does not depend on it) and nothing is checked.
    """
    settings = _launcher(cfg, launcher)
    tbs = get_int(cfg, "train_batch_size")
    mbs = get_int(cfg, "train_micro_batch_size_per_gpu")
    gas = neox_gas(cfg)
    if tbs is not None and world_needs_device_count(cfg, settings, world_size, environ):
        return NeoxBatch(
            train_batch_size=tbs,
            micro_batch_size=mbs,
            gradient_accumulation_steps=gas,
            global_num_gpus=None,
            data_parallel_size=None,
            basis="no world given: the GPU count is not needed for it",
        )
    count = neox_count(cfg, settings, world_size, environ)
    dp = _dp(cfg, count)
    if tbs is None and mbs is None:
        files = ", ".join(cfg.files) or "the config"
        raise ConfigError(
            f"{files}: neither train_batch_size nor train_micro_batch_size_per_gpu is set; NeoX stops: "
            "'Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided': set "
            "train_micro_batch_size_per_gpu (and gradient_accumulation_steps) or train_batch_size"
        )
    batch = derive_batch(tbs, mbs, gas, dp)
    errors = batch_errors(batch, who="NeoX")
    if errors:
        raise BatchError(
            f"with {count.count} GPUs (NeoX counts them {count.basis}) and dp {dp}: {errors[0]}; set "
            "train_batch_size = micro * grad_accum * dp, or leave one of the three out for NeoX to derive"
        )
    return NeoxBatch(
        train_batch_size=batch.train_batch_size,
        micro_batch_size=batch.train_micro_batch_size_per_gpu,
        gradient_accumulation_steps=batch.gradient_accumulation_steps,
        global_num_gpus=count.count,
        data_parallel_size=dp,
        basis=count.basis,
    )


def global_batch_size(cfg: NeoxConfig, world_size: int | None = None) -> int:
    """NeoX's train_batch_size: given, or micro * grad_accum * dp with NeoX's GPU count (:func:`neox_batch`)."""
    return neox_batch(cfg, world_size).train_batch_size
