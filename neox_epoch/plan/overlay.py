"""The NeoX config ``plan --write-config`` writes for an exact plan: the overlay (train_iters, the schedule keys
that follow it, the neox_epoch block, each key spelled so that NeoX lets a later file replace it) or, with
``--full``, the input files merged as NeoX merges them; its header; the checks made before any planning."""

from __future__ import annotations

import argparse
from typing import Any

from neox_epoch.errors import ConfigError
from neox_epoch.formats.neox_config import BLOCK, EpochBlock, NeoxConfig
from neox_epoch.plan.model import Plan
from neox_epoch.plan.schedule import Schedule
from neox_epoch.util.config_out import (
    check_output_path,
    config_inputs,
    config_output,
    write_config_text,
    yaml_config_text,
)

#: flags that override NeoX config values (a written config could not carry them)


OVERRIDE_FLAGS = ("seq_length", "global_batch_size", "train_iters", "eval_interval", "eval_iters", "seed", "split")


def overlay(
    plan: Plan, block: EpochBlock | None, targets: dict[str, float], schedule: Schedule | None = None
) -> dict[str, Any]:
    """The NeoX config overlay for an exact plan: train_iters, the schedule keys that change with it, and the
    neox_epoch block (train_epochs is cleared by the hooks, so it is not written)."""
    b: dict[str, Any] = dict(block.to_mapping()) if block else {}
    values = {_plain(v) for v in targets.values()}
    if block is None or block.stages is None:  # with stages, the stages are the targets
        b["epochs"] = next(iter(values)) if len(values) == 1 else {k: _plain(v) for k, v in targets.items()}
    b.setdefault("blend_buffer", plan.settings.get("blend_buffer", 1.0))
    if "targets" in plan.settings:
        b["targets"] = plan.settings["targets"]
        b["weights"] = plan.settings["weights"]
    changed = {
        k: v for k, v in (schedule.overwrite() if schedule else {}).items() if k not in ("train_iters", "train_epochs")
    }
    if plan.settings.get("weight_by_num_documents") is False:  # explicit weights (the block's) replace them
        changed["weight_by_num_documents"] = False
    return {"train_iters": plan.train_iters, **changed, "neox_epoch": b}


def _plain(v: float) -> float | int:
    """1.0 -> 1 (as a user writes it), 0.5 stays."""
    return int(v) if float(v).is_integer() else v


def full_config(
    cfg: NeoxConfig, plan: Plan, block: EpochBlock | None, targets: dict[str, float], schedule: Schedule
) -> dict[str, Any]:
    """The input files merged as NeoX merges them, with train_iters and every changed schedule key replaced in
    place (train_epochs removed), and the neox_epoch block."""
    data = dict(cfg.values)
    for key, value in schedule.overwrite().items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    data["train_iters"] = plan.train_iters
    if plan.settings.get("weight_by_num_documents") is False:
        data["weight_by_num_documents"] = False
    data["neox_epoch"] = overlay(plan, block, targets)["neox_epoch"]
    return data


def write_label(args: argparse.Namespace) -> str:
    return f'--write-config "{args.write_config}"'


def check_write_request(args: argparse.Namespace, cfg: NeoxConfig | None) -> None:
    """Refuse --write-config/--full requests that cannot give a correct file, before any planning."""
    if args.full and not args.write_config:
        raise ConfigError("--full: goes with --write-config OUT.yml (one complete merged config); add --write-config")
    if not args.write_config:
        return
    if cfg is None or (args.framework or "neox") != "neox":
        raise ConfigError(
            f"{write_label(args)}: writes GPT-NeoX configs; give NeoX config files (not --data-path) "
            "with neox semantics (no --framework megatron-legacy)"
        )
    for flag in OVERRIDE_FLAGS:
        if getattr(args, flag) is not None:
            name = "--" + flag.replace("_", "-")
            raise ConfigError(
                f"{write_label(args)}: {name} {getattr(args, flag)} overrides the config files, and the "
                f"written file would not carry it; set it in a config file instead of {name}"
            )
    check_output_path(
        config_output(args.write_config, "--write-config"),
        config_inputs(cfg.files),
        unique_name=True,
        existing_dir=True,
    )


def overlay_spelling(cfg: NeoxConfig, data: dict[str, Any], label: str) -> dict[str, Any]:
    """``data`` with each key the input files set written with ``-`` (``train-iters``), the one spelling NeoX's
    ``from_ymls`` lets a later file use for a key already loaded: it checks the key *as written* against the
    keys loaded so far, which it stores with ``_``, so ``train-iters`` never matches and replaces the value,
    while ``train_iters`` stops NeoX ("duplicate keys"). A key without ``_`` (``warmup``) has no such
    spelling: ConfigError naming the input line to change instead."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key == BLOCK or key not in cfg.values:
            out[key] = value
            continue
        if "_" not in key:
            raise ConfigError(
                f"{label}: {cfg.origin.get(key, '?')}: {cfg.written.get(key, key)}: {cfg.values[key]!r}; the plan "
                f"needs {value!r}, and NeoX lets no later file replace a key without '_' (it stops on duplicate "
                f"keys): change that line to {key}: {value}, or add --full for one merged config"
            )
        out[key.replace("_", "-")] = value
    return out


def _header(args: argparse.Namespace, cfg: NeoxConfig, schedule: Schedule) -> list[str]:
    files = " ".join(cfg.files)
    out = args.write_config
    changed = [c.line() for c in schedule.changes if c.key in schedule.overwrite()]
    if args.full:
        head = [
            f"written by neox-epoch plan --write-config --full: {', '.join(cfg.files)} merged as NeoX merges them, "
            "with train_iters and the keys below replaced and the neox_epoch block added.",
            "Use this file alone, in place of those files. Stock GPT-NeoX rejects the neox_epoch key (NeoXArgs",
            f"raises on unknown config keys): run it with   neox-epoch launch train.py {out}",
            "or with deepy.py/train.py patched by patches/neox_epoch_hook.patch (from the neox-epoch repository).",
        ]
    else:
        block_in = cfg.block_origin
        head = [
            f"written by neox-epoch plan --write-config from {', '.join(cfg.files)}: an overlay with train_iters, "
            "the keys below and the neox_epoch block.",
            "Stock GPT-NeoX rejects the neox_epoch key (NeoXArgs raises on unknown config keys): run it with",
            f"  neox-epoch launch train.py {files} {out}",
            "or with deepy.py/train.py patched by patches/neox_epoch_hook.patch (from the neox-epoch repository).",
            "Give it after those files: a key they set is written here with '-' (train-iters), the spelling",
            "NeoX's from_ymls lets a later file use to replace it (written with '_' NeoX stops on a duplicate key)"
            + (f"; the neox_epoch block must be removed from {block_in}: this file carries it." if block_in else "."),
        ]
    return head + ["changes:"] + [f"  {line}" for line in changed]


def write_plan_config(
    args: argparse.Namespace, cfg: NeoxConfig, plan: Plan, targets: dict[str, float], schedule: Schedule
) -> None:
    if args.full:
        data = full_config(cfg, plan, cfg.block, targets, schedule)
    else:
        data = overlay_spelling(cfg, overlay(plan, cfg.block, targets, schedule), write_label(args))
    write_config_text(
        config_output(args.write_config, "--write-config"),
        yaml_config_text(_header(args, cfg, schedule), data),
        config_inputs(cfg.files),
    )
