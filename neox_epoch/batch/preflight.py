"""check-batch as a function: config + launcher flags -> world, NeoX count, batch report and fix.

This is what ``neox-epoch check-batch`` runs and what a launcher wrapper can call before it starts
``deepspeed``. It imports DeepSpeed (and torch) when called, never at import.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from neox_epoch.batch.check import (
    REMOVED_TOP_LEVEL_KEYS,
    REMOVED_ZERO_KEYS,
    BatchReport,
    check_batch,
    check_removed_keys,
)
from neox_epoch.batch.config import BatchConfig, LauncherSettings, read_config
from neox_epoch.batch.deepspeed_import import deepspeed_version, import_deepspeed
from neox_epoch.batch.fix import BatchFix, plan_fix
from neox_epoch.batch.neox_count import NeoxCount, neox_gpu_count
from neox_epoch.batch.world import LauncherWorld, deepy_argv, explain_disagreement, launcher_world, settings_argv
from neox_epoch.errors import BatchError


@dataclass(frozen=True, kw_only=True)
class Preflight:
    """The result of checking one config against the world one set of launcher flags starts."""

    config: BatchConfig
    """The config as read."""
    settings: LauncherSettings
    """Effective launcher settings: the config's (NeoX) overridden by the command line."""
    launch: LauncherWorld
    """What the deepspeed launcher starts."""
    neox: NeoxCount | None
    """NeoX's own GPU count (NeoX configs only)."""
    report: BatchReport
    """The batch arithmetic and findings."""
    fix: BatchFix | None
    """Consistent values keeping train_batch_size (None when consistent or when impossible)."""
    fix_error: str | None
    """Why no fix keeps train_batch_size, when that is the case."""
    notes: tuple[str, ...]
    """Remarks that do not change the world (deepy's flag rewriting, ignored env vars, ssh check, ...)."""

    @property
    def consistent(self) -> bool:
        """True when nothing disagrees."""
        return self.report.consistent

    def to_json(self) -> dict[str, Any]:
        """The stable ``--json`` object."""
        r = self.report
        return {
            "world_size": r.world_size,
            "pipe_parallel_size": r.pipe_parallel_size,
            "model_parallel_size": r.model_parallel_size,
            "data_parallel_size": r.data_parallel_size,
            "train_batch_size": r.batch.train_batch_size,
            "train_micro_batch_size_per_gpu": r.batch.train_micro_batch_size_per_gpu,
            "gradient_accumulation_steps": r.batch.gradient_accumulation_steps,
            "consistent": r.consistent,
            "findings": list(r.findings),
            "deepspeed_version": self.launch.deepspeed_version,
            "hosts": {h: list(s) for h, s in self.launch.hosts.items()},
            "sequence_parallel_size": r.sequence_parallel_size,
            "neox_world_size": r.neox_world_size,
            "flavor": r.flavor,
            "launcher_backend": self.launch.backend,
            "notes": list(self.notes),
            "fix": None if self.fix is None else {**self.fix.settings(), "changes": list(self.fix.changes)},
            "fix_error": self.fix_error,
        }


def _removed_keys() -> tuple[Mapping[str, str], Mapping[str, str]]:
    """DeepSpeed's own removed-key tables with their messages (the 0.19 lists when it has none)."""
    try:
        ds_config: ModuleType | None = import_deepspeed("deepspeed.runtime.config")
    except ImportError:
        ds_config = None
    top = getattr(ds_config, "_REMOVED_TOP_LEVEL_CONFIG_KEYS", None)
    zero = getattr(ds_config, "_REMOVED_ZERO_CONFIG_KEYS", None)
    if isinstance(top, Mapping) and isinstance(zero, Mapping):
        return dict(top), dict(zero)
    if ds_config is not None and not hasattr(ds_config, "_reject_removed_config_keys"):
        return {}, {}  # an older DeepSpeed that still accepts these keys
    return dict.fromkeys(REMOVED_TOP_LEVEL_KEYS, ""), dict.fromkeys(REMOVED_ZERO_KEYS, "")


def preflight(
    config_paths: Sequence[str],
    overrides: LauncherSettings | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    cuda_device_count: int | None = None,
) -> Preflight:
    """Check ``config_paths`` against the world ``deepspeed <flags>`` starts.

    ``overrides`` are the command-line launcher flags (they replace a NeoX config's launcher keys).
    ``environ`` defaults to ``os.environ`` (VISIBLE_DEVICES, DLTS_HOSTFILE, MASTER_ADDR, LOCAL_SIZE on a
    CPU); ``cuda_device_count`` replaces ``torch.cuda.device_count()`` in NeoX's count (for tests).
    Raises ``ConfigError`` for bad input and ``BatchError`` when dp is not whole.
    """
    config = read_config(config_paths)
    settings = config.launcher.overridden_by(overrides or LauncherSettings())
    notes: list[str] = []
    deepy_notes: list[str] = []
    if config.flavor == "neox":
        argv, deepy_notes = deepy_argv(settings, environ)
        notes += deepy_notes
    else:
        argv = settings_argv(settings)
    top, zero = _removed_keys()
    check_removed_keys(config, removed=top, removed_zero=zero, deepspeed_version=deepspeed_version())
    launch = launcher_world(argv, environ=environ)
    notes += launch.notes
    neox: NeoxCount | None = None
    disagreement = ""
    if config.flavor == "neox":
        neox = neox_gpu_count(
            settings, global_num_gpus=config.global_num_gpus, cuda_device_count=cuda_device_count, environ=environ
        )
        notes += neox.notes
        if neox.count != launch.world_size:
            disagreement = explain_disagreement(launch, neox, deepy_notes)
    report = check_batch(
        config, launch.world_size, neox_world_size=neox.count if neox else None, world_disagreement=disagreement
    )
    fix: BatchFix | None = None
    fix_error: str | None = None
    if not report.consistent:
        try:
            fix = plan_fix(config, report)
        except BatchError as err:
            fix_error = str(err)
    return Preflight(
        config=config,
        settings=settings,
        launch=launch,
        neox=neox,
        report=report,
        fix=fix,
        fix_error=fix_error,
        notes=tuple(notes),
    )
