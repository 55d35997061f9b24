"""``neox-epoch plan``: NeoX YAML configs or Megatron-LM flags in, a per-source epoch plan out."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import replace
from typing import Any

from neox_epoch.batch.neox import neox_batch
from neox_epoch.errors import ConfigError, PlanError
from neox_epoch.formats import detect
from neox_epoch.formats.neox_config import (
    EpochBlock,
    NeoxConfig,
    deepy_config_paths,
    load_neox_configs,
)
from neox_epoch.plan.cli_input import (
    apply_flag_overrides,
    flags_input,
    launcher_flags,
    no_directories,
    plan_argv,
    targets_from,
)
from neox_epoch.plan.cli_megatron import run_megatron, table_version
from neox_epoch.plan.exact import exact_plan
from neox_epoch.plan.from_neox import plan_input_from_neox, schedule_keys
from neox_epoch.plan.overlay import check_write_request, overlay, write_label, write_plan_config
from neox_epoch.plan.planner import (
    FRAMEWORKS,
    Plan,
    PlanInput,
    make_plan,
)
from neox_epoch.plan.render import render
from neox_epoch.plan.repeated import merge_repeated
from neox_epoch.plan.schedule import Schedule, attach_neox
from neox_epoch.plan.schedule_mcore import McoreScheduleKeys, attach_mcore
from neox_epoch.plan.stage_schedule import neox_lr_schedule, with_stage_decay
from neox_epoch.plan.staged import plan_staged, render_stages, stages_json
from neox_epoch.plan.stock import stock_neox_exact
from neox_epoch.util.helptext import examples, option_names
from neox_epoch.util.schema import stamped

#: Megatron-LM schedule flags (exact mode adjusts them like Megatron-LM's get_optimizer_param_scheduler reads them)
SCHEDULE_FLAGS = (
    "lr_decay_style",
    "lr_decay_iters",
    "lr_decay_samples",
    "lr_warmup_fraction",
    "lr_warmup_iters",
    "lr_warmup_samples",
    "lr_wsd_decay_iters",
    "lr_wsd_decay_samples",
    "save_interval",
    "exit_interval",
)

#: ``plan --help``: both inputs, and examples of each
DESCRIPTION = (
    "Plan epochs from either input: GPT-NeoX YAML config files (merged in order, as deepy.py merges "
    "them), or a Megatron-LM pretrain_gpt.py command line pasted whole, launcher included (torchrun ... "
    "pretrain_gpt.py --data-path ...). Options of neox-epoch (--epochs, --source-epochs, --world-size, "
    "--json) may stand before, inside or after the pasted line."
)
EXAMPLES = examples(
    "neox-epoch plan configs/125M.yml configs/local_setup.yml                   # NeoX configs",
    "neox-epoch plan a.yml b.yml --epochs 1 --write-config exact.yml             # exact passes",
    "neox-epoch plan --source-epochs web=1 code=2 torchrun --nproc-per-node 8 pretrain_gpt.py \\",
    "    --data-path 0.7 data/web 0.3 data/code --micro-batch-size 2 --global-batch-size 256 \\",
    "    --seq-length 4096 --lr 3e-4 --eval-interval 1000 --split 98,1,1   # Megatron-LM, pasted",
)

log = logging.getLogger(__name__)
#: the plan parser's options (for the did-you-mean of an unknown option)
_PARSER_OPTIONS: list[str] = []


def register(sub: Any) -> None:
    p = sub.add_parser(
        "plan",
        allow_abbrev=False,  # a pasted Megatron-LM flag such as --lr must never match one of ours by prefix
        help="what a run builds and draws per source, and the train_iters for exactly N passes",
        description=DESCRIPTION,
        **EXAMPLES,
    )
    p.add_argument("configs", nargs="*", metavar="CONFIG.yml", help="NeoX config files, merged in order")
    p.add_argument(
        "--framework",
        choices=FRAMEWORKS,
        help="semantics to mirror (default: neox with configs, megatron-core with --data-path)",
    )
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
    p.add_argument(
        "--force-version",
        action="store_true",
        help="plan a megatron-core version this project has not verified against a real build (with a warning)",
    )
    g.add_argument("--lr-decay-style", choices=("constant", "linear", "cosine", "inverse-square-root", "WSD"))
    for flag in (
        "--lr-decay-iters",
        "--lr-decay-samples",
        "--lr-warmup-iters",
        "--lr-warmup-samples",
        "--lr-wsd-decay-iters",
        "--lr-wsd-decay-samples",
        "--save-interval",
        "--exit-interval",
    ):
        g.add_argument(flag, type=int)
    g.add_argument("--lr-warmup-fraction", type=float)
    p.add_argument(
        "-d",
        "--conf_dir",
        help="deepy.py's -d: a directory prefixed to every config file (a name "
        "without .yml/.json gets .yml, as deepy.py does)",
    )
    w = p.add_argument_group("NeoX world (how NeoX counts GPUs for train_batch_size = micro * accum * dp)")
    w.add_argument(
        "--world-size",
        type=int,
        help="GPUs, overriding NeoX's own count (global_num_gpus, hostfile); "
        "with a Megatron-LM command line: the world it runs on",
    )
    w.add_argument(
        "-H",
        "--hostfile",
        help="hostfile as given to deepy.py (default: the config's hostfile, else "
        "$DLTS_HOSTFILE or /job/hostfile when it exists)",
    )
    w.add_argument("-i", "--include", help='launcher --include filter, e.g. "node1:0,1@node2"')
    w.add_argument("-e", "--exclude", help="launcher --exclude filter")
    w.add_argument("--num_nodes", type=int, help="use the first N hosts of the hostfile")
    w.add_argument("--num_gpus", "--num_accelerators", type=int, help="GPUs per host (NeoX: num_gpus * hosts)")
    e = p.add_argument_group("exact mode")
    e.add_argument("--epochs", type=float, help="exactly N passes over every train source (fractional allowed)")
    e.add_argument(
        "--source-epochs",
        nargs="+",
        metavar="NAME=E",
        action=_NameValues,
        help="per-source passes, e.g. code=2 web=0.5 (its values end at the first token without '=')",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object (keys documented in docs/plan.md)")
    p.add_argument(
        "--write-config",
        metavar="OUT.yml",
        help="write a NeoX config overlay with train_iters, the "
        "schedule keys that follow it and the neox_epoch block (for neox-epoch launch or the patched deepy.py)",
    )
    p.add_argument(
        "--full",
        action="store_true",
        help="with --write-config: one complete config, the input files "
        "merged as NeoX merges them with train_iters and the schedule changes replaced, and the block",
    )
    p.set_defaults(func=run, accepts_extra=True)
    _PARSER_OPTIONS[:] = option_names(p)


class _NameValues(argparse.Action):
    """``--source-epochs NAME=E ...``: argparse's nargs="+" also takes what follows (``torchrun``, a config
    file); the values end at the first token that is not NAME=E, and the rest is kept for the configs."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        from neox_epoch.plan.from_megatron import is_name_value

        items = list(values)
        n = next((i for i, v in enumerate(items) if not is_name_value(v)), len(items))
        if n == 0:
            raise argparse.ArgumentError(self, f"{items[0]!r}: expected NAME=E, e.g. code=2")
        setattr(namespace, self.dest, items[:n])
        namespace.source_epochs_rest = [*getattr(namespace, "source_epochs_rest", []), *items[n:]]


def build_input(args: argparse.Namespace) -> tuple[PlanInput, NeoxConfig | None]:
    """The plan input, and the merged NeoX config when the input is NeoX config files."""
    if args.configs and (args.data_path or args.train_data_path):
        raise ConfigError("give NeoX config files or --data-path, not both")
    if args.configs:
        for flag in SCHEDULE_FLAGS:
            if getattr(args, flag) is not None:
                name = "--" + flag.replace("_", "-")
                raise ConfigError(
                    f"{name}: a Megatron-LM flag; with NeoX configs set the NeoX key ({flag}, or "
                    "lr_decay_iters / warmup / checkpoint_factor) in a config file"
                )
        framework = args.framework or "neox"
        if framework == "megatron-core":
            raise ConfigError(
                "--framework megatron-core: NeoX configs are planned with neox semantics; use --data-path"
            )
        no_directories(args.configs, args.conf_dir)
        cfg = load_neox_configs(deepy_config_paths(args.configs, args.conf_dir))
        batch = None if args.global_batch_size else neox_batch(cfg, args.world_size, launcher_flags(args))
        args.config_notes = [*([batch.describe()] if batch else []), *cfg.notes]
        inp = plan_input_from_neox(cfg, gbs_override=args.global_batch_size, batch=batch)
        inp = apply_flag_overrides(inp, args)
        inp = replace(inp, framework=framework, framework_version=args.framework_version or detect.neox_version())
        return inp, cfg
    if not (args.data_path or args.train_data_path):
        raise ConfigError("no input: give NeoX config files (neox-epoch plan config.yml) or --data-path PREFIX ...")
    framework = args.framework or "megatron-core"
    if framework == "megatron-core":
        raise AssertionError("megatron-core command lines are planned by megatron_plan")  # routed in run()
    _no_extra(args)
    return flags_input(args, framework, args.framework_version or ""), None


def _no_extra(args: argparse.Namespace) -> None:
    """Outside a Megatron-LM command line, an option plan does not know is an error (with a did-you-mean)."""
    extra = [t for t in getattr(args, "extra", []) if t.startswith("-")]
    if extra:
        from neox_epoch.errors import did_you_mean

        flag = extra[0].partition("=")[0]
        known = _PARSER_OPTIONS
        raise ConfigError(
            f"{flag}: not an option of neox-epoch plan{did_you_mean(flag, known)}; Megatron-LM flags are "
            "read when the command line has --data-path (or --train-data-path)"
        )


def _old_neox_iters(inp: PlanInput) -> int | None:
    """The run's train_iters before exact mode: given, or what NeoX derives from train_epochs."""
    if inp.train_iters is not None:
        return inp.train_iters
    if inp.neox.train_epochs is None:
        return None
    try:
        return make_plan(inp).train_iters
    except PlanError:
        return None


def _mcore_keys(args: argparse.Namespace) -> McoreScheduleKeys:
    given = {f: getattr(args, f) for f in SCHEDULE_FLAGS if getattr(args, f) is not None}
    return McoreScheduleKeys(
        **given, eval_interval=args.eval_interval, eval_iters=args.eval_iters if args.eval_iters is not None else 10
    )


def plan_with_schedule(
    args: argparse.Namespace, inp: PlanInput, cfg: NeoxConfig | None, targets: dict[str, float] | None
) -> tuple[Plan, Schedule | None]:
    """The plan, with the schedule (and, for NeoX exact plans, whether stock NeoX is exact) attached."""
    plan = exact_plan(inp, targets) if targets else merge_repeated(make_plan(inp))
    if cfg is not None:
        plan, schedule = attach_neox(plan, schedule_keys(cfg), _old_neox_iters(inp), targets, inp.warmup_share_limit)
        if targets and inp.framework == "neox":
            stock = stock_neox_exact(inp, plan, targets)
            if stock["exact"]:  # the schedule keys that follow train_iters belong to the stock config too
                stock["config"].update({k: v for k, v in schedule.overwrite().items() if k != "train_iters"})
            plan = replace(plan, settings={**plan.settings, "stock_neox_exact": stock})
        return plan, schedule
    if targets:
        return attach_mcore(
            plan, _mcore_keys(args), args.train_iters, args.train_samples, targets, inp.warmup_share_limit
        )
    return plan, None


#: warnings that the hooks turn into a stopped run when the block says ``enforce: true``
ENFORCED_CODES = ("oversampled", "spillover")


def enforce_findings(plan: Plan, block: EpochBlock | None) -> list[str]:
    """What would stop a run whose ``neox_epoch`` block has ``enforce: true`` (empty: it runs)."""
    if block is None or not block.enforce:
        return []
    return [
        f"enforce: the run would stop: {w.text}"
        for w in plan.warnings
        if w.split == "train" and w.code in ENFORCED_CODES
    ]


def block_line(block: EpochBlock | None) -> str:
    """One line saying what the neox_epoch block changes about how the run is built and checked."""
    if block is None:
        return ""
    parts = [
        f"epochs {block.epochs}"
        if block.epochs is not None
        else f"{len(block.stages)} stages"
        if block.stages is not None
        else "no epochs (observe only)"
    ]
    parts.append(
        "each pass of a source built and shuffled on its own"
        if block.stages is not None
        else "separate_epochs: each epoch shuffled on its own"
        if block.separate_epochs
        else "epochs shuffled jointly (NeoX's way)"
    )
    parts.append("enforce: a run that cannot be exact stops" if block.enforce else "enforce off: problems are warnings")
    return "neox_epoch block: " + "; ".join(parts)


def run(args: argparse.Namespace) -> int:
    from neox_epoch.formats.megatron_args import check_foreign
    from neox_epoch.plan.from_megatron import is_megatron_argv, megatron_argv

    args.configs = [*args.configs, *getattr(args, "source_epochs_rest", [])]
    check_foreign(megatron_argv(plan_argv(args)), table_version(args))
    if (args.framework in (None, "megatron-core")) and is_megatron_argv(plan_argv(args)):
        return run_megatron(args)
    if args.configs:
        _no_extra(args)
    inp, cfg = build_input(args)
    check_write_request(args, cfg)
    block = cfg.block if cfg is not None else None
    if block is not None and block.stages is not None and cfg is not None:
        return run_staged(args, inp, cfg, block)
    targets = targets_from(args, inp, block)
    if args.write_config and not targets:
        raise ConfigError(
            f"{write_label(args)}: writes the config of an exact plan; add --epochs N (or a neox_epoch "
            "block with epochs)"
        )
    plan, schedule = plan_with_schedule(args, inp, cfg, targets)
    if args.write_config and cfg is not None and targets and schedule is not None:
        write_plan_config(args, cfg, plan, targets, schedule)
    if args.json:
        out = plan.to_json()
        out["enforce_findings"] = enforce_findings(plan, block)
        if args.configs:
            out["config_notes"] = list(getattr(args, "config_notes", []))
        if targets and inp.framework == "neox":
            out["settings"]["neox_overlay"] = overlay(plan, block, targets, schedule)  # type: ignore[index]
        print(json.dumps(stamped(out), indent=1, sort_keys=False))
    else:
        if block is not None:
            print(block_line(block))
        print(render(plan))
        notes = getattr(args, "config_notes", [])
        if notes:
            print("\nconfig:")
            print("\n".join(f"  - {n}" for n in notes))
        if args.write_config:
            print(f"\nwrote {args.write_config}" + (" (complete merged config)" if args.full else " (overlay)"))
    return _exit_code(plan, block)


def _exit_code(plan: Plan, block: EpochBlock | None) -> int:
    """What would stop the run with ``enforce`` on: one stderr line each, and exit 1 (else 0)."""
    stops = enforce_findings(plan, block)
    for line in stops:
        print(f"neox-epoch plan: {line}", file=sys.stderr)
    return 1 if stops else 0


def run_staged(args: argparse.Namespace, inp: PlanInput, cfg: NeoxConfig, block: EpochBlock) -> int:
    """``plan`` on a NeoX config whose neox_epoch block has stages: a table per stage, cumulative passes, one
    train_iters and the schedule over the whole run (warmup once)."""
    if args.epochs is not None or args.source_epochs:
        raise ConfigError(
            "--epochs/--source-epochs: the neox_epoch block has stages, whose passes are the targets; "
            "drop the flag (or the stages)"
        )
    staged = plan_staged(inp, block.stages_config())
    targets = staged.passes()
    keys = schedule_keys(cfg)
    plan, schedule = attach_neox(staged.plan, keys, _old_neox_iters(inp), targets, inp.warmup_share_limit)
    lr_schedule = neox_lr_schedule(cfg, keys, staged)
    if staged.config.decay is not None:
        plan, schedule = with_stage_decay(plan, schedule, keys, lr_schedule, inp.warmup_share_limit)
    if args.write_config:
        write_plan_config(args, cfg, plan, targets, schedule)
    if args.json:
        out = plan.to_json()
        out["enforce_findings"] = enforce_findings(plan, block)
        out["config_notes"] = list(getattr(args, "config_notes", []))
        out["settings"]["neox_overlay"] = overlay(plan, block, targets, schedule)  # type: ignore[index]
        out["stages"] = {**stages_json(staged), "lr_schedule": lr_schedule.to_json()}
        print(json.dumps(stamped(out), indent=1, sort_keys=False))
    else:
        print(block_line(block))
        print(render(plan))
        print("\n" + render_stages(staged))
        print("\n" + "\n".join(lr_schedule.lines()))
        if args.write_config:
            print(f"\nwrote {args.write_config}" + (" (complete merged config)" if args.full else " (overlay)"))
    return _exit_code(plan, block)
