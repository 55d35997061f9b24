"""``neox-epoch plan``: NeoX YAML configs or Megatron-LM flags in, a per-source epoch plan out."""

from __future__ import annotations

import argparse
import json
from typing import Any

import yaml

from neox_epoch import detect
from neox_epoch.atomic import write_text_atomic
from neox_epoch.batch.config import LauncherSettings
from neox_epoch.config import EpochBlock, load_neox_configs, neox_batch, plan_input_from_neox
from neox_epoch.errors import ConfigError
from neox_epoch.plan import (
    FRAMEWORKS,
    McoreOptions,
    Plan,
    PlanInput,
    SourceSpec,
    exact_plan,
    make_plan,
    passes_per_source,
)
from neox_epoch.report import render

#: launcher flags of ``plan`` (same names as ``check-batch``), read into LauncherSettings
_LAUNCHER_FLAGS = ("hostfile", "include", "exclude", "num_nodes", "num_gpus")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "plan",
        help="what a run builds and draws per source, and the train_iters for exactly N passes",
        description="Plan epochs from NeoX YAML configs (merged in order) or Megatron-LM flags.",
    )
    p.add_argument("configs", nargs="*", metavar="CONFIG.yml", help="NeoX config files, merged in order")
    p.add_argument("--framework", choices=FRAMEWORKS, help="semantics to mirror (default: neox with configs, "
                   "megatron-core with --data-path)")
    p.add_argument("--framework-version", help="version whose semantics apply (default: the installed one)")
    g = p.add_argument_group("Megatron-LM flags (same names and meaning)")
    g.add_argument("--data-path", nargs="+", metavar="[WEIGHT] PREFIX", help="Megatron's '[weight] prefix ...' blend")
    g.add_argument("--train-data-path", nargs="+", metavar="[WEIGHT] PREFIX", help="blend_per_split: train blend")
    g.add_argument("--valid-data-path", nargs="+", metavar="[WEIGHT] PREFIX", help="blend_per_split: valid blend")
    g.add_argument("--test-data-path", nargs="+", metavar="[WEIGHT] PREFIX", help="blend_per_split: test blend")
    g.add_argument("--split", help="train/valid/test split, e.g. 969,30,1")
    g.add_argument("--seq-length", type=int)
    g.add_argument("--global-batch-size", type=int, help="samples per iteration (NeoX: overrides train_batch_size)")
    g.add_argument("--train-iters", type=int)
    g.add_argument("--train-samples", type=int)
    g.add_argument("--eval-interval", type=int)
    g.add_argument("--eval-iters", type=int)
    g.add_argument("--seed", type=int)
    g.add_argument("--mid-level-dataset-surplus", type=float)
    w = p.add_argument_group("NeoX world (how NeoX counts GPUs for train_batch_size = micro * accum * dp)")
    w.add_argument("--world-size", type=int, help="GPUs, overriding NeoX's own count (global_num_gpus, hostfile)")
    w.add_argument("-H", "--hostfile", help="hostfile as given to deepy.py (default: the config's hostfile, else "
                   "$DLTS_HOSTFILE or /job/hostfile when it exists)")
    w.add_argument("-i", "--include", help='launcher --include filter, e.g. "node1:0,1@node2"')
    w.add_argument("-e", "--exclude", help="launcher --exclude filter")
    w.add_argument("--num_nodes", type=int, help="use the first N hosts of the hostfile")
    w.add_argument("--num_gpus", "--num_accelerators", type=int, help="GPUs per host (NeoX: num_gpus * hosts)")
    e = p.add_argument_group("exact mode")
    e.add_argument("--epochs", type=float, help="exactly N passes over every train source (fractional allowed)")
    e.add_argument("--source-epochs", nargs="+", metavar="NAME=E", help="per-source passes, e.g. code=2 web=0.5")
    p.add_argument("--json", action="store_true", help="print one JSON object (keys documented in the README)")
    p.add_argument("--write-config", metavar="OUT.yml", help="write a NeoX config overlay with train_iters and the "
                   "neox_epoch block")
    p.set_defaults(func=run)


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


def _megatron_input(args: argparse.Namespace, framework: str, version: str) -> PlanInput:
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
        mcore=McoreOptions(mid_level_dataset_surplus=(args.mid_level_dataset_surplus
                                                      if args.mid_level_dataset_surplus is not None else 0.005)),
    )


def _apply_flag_overrides(inp: PlanInput, args: argparse.Namespace) -> PlanInput:
    from dataclasses import replace

    changes: dict[str, Any] = {}
    for flag, key in (("seq_length", "seq_length"), ("global_batch_size", "global_batch_size"),
                      ("train_iters", "train_iters"), ("eval_interval", "eval_interval"), ("eval_iters", "eval_iters"),
                      ("seed", "seed"), ("split", "split")):
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


def launcher_flags(args: argparse.Namespace) -> LauncherSettings:
    """The launcher flags given to ``plan`` (they replace the configs' hostfile/include/... keys)."""
    return LauncherSettings(**{name: getattr(args, name, None) for name in _LAUNCHER_FLAGS})


def build_input(args: argparse.Namespace) -> tuple[PlanInput, EpochBlock | None, list[str]]:
    """The plan's input, the neox_epoch block and, for NeoX configs, notes on how NeoX reads them (its GPU
    count and batch arithmetic, keys it silently replaces)."""
    if args.configs and (args.data_path or args.train_data_path):
        raise ConfigError("give NeoX config files or --data-path, not both")
    if args.configs:
        framework = args.framework or "neox"
        if framework == "megatron-core":
            raise ConfigError("--framework megatron-core: NeoX configs are planned with neox semantics; use --data-path")
        cfg = load_neox_configs(args.configs)
        batch = None if args.global_batch_size else neox_batch(cfg, args.world_size, launcher_flags(args))
        notes = [*([batch.describe()] if batch else []), *cfg.notes]
        inp = plan_input_from_neox(cfg, gbs_override=args.global_batch_size, batch=batch)
        inp = _apply_flag_overrides(inp, args)
        from dataclasses import replace

        inp = replace(inp, framework=framework, framework_version=args.framework_version or detect.neox_version())
        if args.write_config and "train_iters" in cfg.values:
            raise ConfigError(
                f"--write-config: train_iters is set in {cfg.origin['train_iters']}, and the overlay sets it too: "
                "NeoX rejects a key given in two config files; remove train_iters from that file (or use "
                "neox-epoch launch, which sets it without an overlay)"
            )
        return inp, cfg.block, notes
    if not (args.data_path or args.train_data_path):
        raise ConfigError("no input: give NeoX config files (neox-epoch plan config.yml) or --data-path PREFIX ...")
    framework = args.framework or "megatron-core"
    version = args.framework_version or (detect.megatron_core_version() if framework == "megatron-core" else "") or ""
    if framework == "megatron-core" and not version:
        raise ConfigError("--framework-version: megatron-core is not installed here; say which version to mirror, "
                          "e.g. --framework-version 0.16.1")
    return _megatron_input(args, framework, version), None, []


def targets_from(args: argparse.Namespace, inp: PlanInput, block: EpochBlock | None) -> dict[str, float] | None:
    if args.epochs is not None and args.source_epochs:
        raise ConfigError("give --epochs or --source-epochs, not both")
    if args.epochs is not None:
        return passes_per_source(args.epochs, inp.train_sources)
    if args.source_epochs:
        return parse_source_epochs(args.source_epochs)
    if block is not None and block.epochs is not None:
        return passes_per_source(block.epochs, inp.train_sources)
    return None


def overlay(plan: Plan, block: EpochBlock | None, targets: dict[str, float]) -> dict[str, Any]:
    """The NeoX config overlay for an exact plan: train_iters and the neox_epoch block."""
    b: dict[str, Any] = dict(block.to_mapping()) if block else {}
    values = set(targets.values())
    b["epochs"] = next(iter(values)) if len(values) == 1 else dict(targets)
    b.setdefault("blend_buffer", plan.settings.get("blend_buffer", 1.0))
    if "targets" in plan.settings:
        b["targets"] = plan.settings["targets"]
        b["weights"] = plan.settings["weights"]
    return {"train_iters": plan.train_iters, "neox_epoch": b}


def run(args: argparse.Namespace) -> int:
    inp, block, notes = build_input(args)
    targets = targets_from(args, inp, block)
    plan = exact_plan(inp, targets) if targets else make_plan(inp)
    if args.write_config:
        if inp.framework != "neox" or not targets:
            raise ConfigError("--write-config: writes a NeoX overlay for an exact plan; use NeoX configs and --epochs")
        text = "# written by neox-epoch plan: give it to deepy.py as one more config file (your files must not set train_iters)\n" + yaml.safe_dump(
            overlay(plan, block, targets), sort_keys=False)
        write_text_atomic(args.write_config, text)
    if args.json:
        out = plan.to_json()
        if targets and inp.framework == "neox":
            out["settings"]["neox_overlay"] = overlay(plan, block, targets)  # type: ignore[index]
        if args.configs:
            out["config_notes"] = notes
        print(json.dumps(out, indent=1, sort_keys=False))
    else:
        print(render(plan))
        if notes:
            print("\nconfig:")
            print("\n".join(f"  - {n}" for n in notes))
        if args.write_config:
            print(f"\nwrote {args.write_config}")
    return 0
