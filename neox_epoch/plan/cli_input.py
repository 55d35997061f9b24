"""What ``neox-epoch plan``'s arguments ask: the Megatron-LM flags' blends and plan input, the flags that override
NeoX config values, the launcher flags, the passes per source (exact mode's targets) and the tokens after
``plan``."""

from __future__ import annotations

import argparse
import math
from dataclasses import replace
from typing import Any

from neox_epoch.batch.config import LauncherSettings
from neox_epoch.errors import ConfigError
from neox_epoch.formats.neox_config import EpochBlock
from neox_epoch.plan.exact import passes_per_source
from neox_epoch.plan.planner import McoreOptions, PlanInput, SourceSpec
from neox_epoch.plan.stages import refuse_over_cap


def parse_data_path(tokens: list[str], flag: str) -> list[SourceSpec]:
    """Megatron's ``[weight] prefix [weight prefix ...]``: all prefixes, or weight/prefix pairs."""

    def is_num(t: str) -> bool:
        try:
            float(t)
            return True
        except ValueError:
            return False

    if not any(is_num(t) for t in tokens):
        return [SourceSpec(t) for t in tokens]
    if len(tokens) % 2 or not all(is_num(t) for t in tokens[0::2]) or any(is_num(t) for t in tokens[1::2]):
        raise ConfigError(f"{flag}: {' '.join(tokens)!r}: expected 'PREFIX ...' or 'WEIGHT PREFIX WEIGHT PREFIX ...'")
    return [SourceSpec(pr, float(w)) for w, pr in zip(tokens[0::2], tokens[1::2])]


def flags_input(args: argparse.Namespace, framework: str, version: str) -> PlanInput:
    for flag in ("seq_length", "global_batch_size"):
        if getattr(args, flag) is None:
            raise ConfigError(f"--{flag.replace('_', '-')}: required with --data-path")
    per_split = args.data_path is None
    if per_split and not args.train_data_path:
        raise ConfigError("--data-path (or --train-data-path): no data given")
    train = parse_data_path(args.data_path or args.train_data_path, "--data-path")
    valid = parse_data_path(args.valid_data_path, "--valid-data-path") if args.valid_data_path else []
    test = parse_data_path(args.test_data_path, "--test-data-path") if args.test_data_path else []
    return PlanInput(
        framework=framework,
        framework_version=version,
        seq_length=args.seq_length,
        global_batch_size=args.global_batch_size,
        train_sources=tuple(train),
        valid_sources=tuple(valid),
        test_sources=tuple(test),
        per_split_paths=per_split,
        split=args.split or ("969,30,1" if not per_split else None),
        train_iters=args.train_iters,
        train_samples=args.train_samples,
        eval_interval=args.eval_interval or 1000,
        eval_iters=args.eval_iters if args.eval_iters is not None else 10,
        seed=args.seed if args.seed is not None else 1234,
        mcore=McoreOptions(
            mid_level_dataset_surplus=(
                args.mid_level_dataset_surplus if args.mid_level_dataset_surplus is not None else 0.005
            )
        ),
    )


def apply_flag_overrides(inp: PlanInput, args: argparse.Namespace) -> PlanInput:
    changes: dict[str, Any] = {}
    for flag, key in (
        ("seq_length", "seq_length"),
        ("global_batch_size", "global_batch_size"),
        ("train_iters", "train_iters"),
        ("eval_interval", "eval_interval"),
        ("eval_iters", "eval_iters"),
        ("seed", "seed"),
        ("split", "split"),
    ):
        if getattr(args, flag) is not None:
            changes[key] = getattr(args, flag)
    return replace(inp, **changes)


def parse_source_epochs(items: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in items:
        name, sep, value = item.rpartition("=")
        if not sep or not name:
            raise ConfigError(f"--source-epochs: {item!r}: expected NAME=E, e.g. code=2")
        try:
            out[name] = float(value)
        except ValueError as err:
            raise ConfigError(f"--source-epochs: {item!r}: {value!r} is not a number") from err
    return out


#: launcher flags of ``plan`` (same names as ``check-batch``), read into LauncherSettings
_LAUNCHER_FLAGS = ("hostfile", "include", "exclude", "num_nodes", "num_gpus")


def launcher_flags(args: argparse.Namespace) -> LauncherSettings:
    """The launcher flags given to ``plan`` (they replace the configs' hostfile/include/... keys)."""
    flag = {name: getattr(args, name, None) for name in _LAUNCHER_FLAGS}
    return LauncherSettings(
        hostfile=flag["hostfile"],
        include=flag["include"],
        exclude=flag["exclude"],
        num_nodes=flag["num_nodes"],
        num_gpus=flag["num_gpus"],
    )


def no_directories(configs: list[str], conf_dir: str | None) -> None:
    """A directory given as a config file: one line saying so, with the files to give instead."""
    import glob
    import os

    for name in configs:
        path = os.path.join(conf_dir, name) if conf_dir else name
        if not os.path.isdir(path):
            continue
        found = sorted(glob.glob(os.path.join(path, "*.yml")) + glob.glob(os.path.join(path, "*.yaml")))
        files = " ".join(found[:3]) + (" ..." if len(found) > 3 else "")
        holds = (
            (
                f"it holds {len(found)} YAML file(s) ({files}): give the ones the run uses, e.g. neox-epoch plan "
                f"{found[0]}"
            )
            if found
            else "it holds no .yml/.yaml files: give the NeoX config files themselves"
        )
        raise ConfigError(
            f"{path}: a directory, not a NeoX config file; {holds} (or -d {path} NAME ..., as deepy.py's -d)"
        )


def plan_argv(args: argparse.Namespace) -> list[str]:
    """The tokens after ``plan`` on the command line."""
    raw = list(getattr(args, "raw_argv", []) or [])
    return raw[raw.index("plan") + 1 :] if "plan" in raw else raw


def targets_from(args: argparse.Namespace, inp: PlanInput, block: EpochBlock | None) -> dict[str, float] | None:
    """Passes per source: --epochs, --source-epochs or the neox_epoch block (None: not exact mode)."""
    if args.epochs is not None and args.source_epochs:
        raise ConfigError("give --epochs or --source-epochs, not both")
    if args.epochs is not None:
        if not math.isfinite(args.epochs) or args.epochs <= 0:
            raise ConfigError(
                f"--epochs {args.epochs:g}: expected the passes over every train source, a number > 0 "
                "(fractional allowed); give e.g. --epochs 1, or --source-epochs NAME=E ... per source"
            )
        return passes_per_source(args.epochs, inp.train_sources)
    if args.source_epochs:
        return parse_source_epochs(args.source_epochs)
    if block is not None and block.epochs is not None:
        targets = passes_per_source(block.epochs, inp.train_sources)
        _check_block_targets(targets, block, inp)
        refuse_over_cap(block.max_passes, targets)
        return targets
    return None


def _check_block_targets(targets: dict[str, float], block: EpochBlock, inp: PlanInput) -> None:
    """The neox_epoch block's epochs, refused in the words the user wrote (``neox_epoch.epochs``, not an option)."""
    one = not isinstance(block.epochs, dict)
    names = {s.label for s in inp.train_sources} | {s.prefix for s in inp.train_sources}
    for name, value in targets.items():
        key = "neox_epoch.epochs" + ("" if one else f".{name}")
        if not one and name not in names:
            raise ConfigError(
                f"{key}: unknown train source {name!r}; expected one of "
                f"{sorted(s.label for s in inp.train_sources)} (a source's name or its data path)"
            )
        if not math.isfinite(value) or value <= 0:
            raise ConfigError(
                f"{key}: {value:g}; expected the passes over "
                + ("every train source" if one else name)
                + ", a finite number > 0 (fractional allowed), e.g. 1 or 0.5: fix it in the config's "
                "neox_epoch block"
            )
