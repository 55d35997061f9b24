"""``neox-epoch plan``: NeoX YAML configs or Megatron-LM flags in, a per-source epoch plan out."""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from dataclasses import replace
from typing import Any

from neox_epoch.batch.config import LauncherSettings
from neox_epoch.batch.neox import neox_batch
from neox_epoch.errors import ConfigError, PlanError
from neox_epoch.formats import detect
from neox_epoch.formats.neox_config import (
    BLOCK,
    EpochBlock,
    NeoxConfig,
    deepy_config_paths,
    load_neox_configs,
)
from neox_epoch.plan.from_neox import plan_input_from_neox, schedule_keys
from neox_epoch.plan.planner import (
    FRAMEWORKS,
    McoreOptions,
    Plan,
    PlanInput,
    SourceSpec,
    exact_plan,
    make_plan,
    passes_per_source,
)
from neox_epoch.plan.render import render
from neox_epoch.plan.repeated import merge_repeated
from neox_epoch.plan.schedule import McoreScheduleKeys, Schedule, attach_mcore, attach_neox
from neox_epoch.plan.stage_schedule import neox_lr_schedule, with_stage_decay
from neox_epoch.plan.staged import plan_staged, render_stages, stages_json
from neox_epoch.plan.stages import refuse_over_cap
from neox_epoch.plan.stock import stock_neox_exact
from neox_epoch.util.config_out import (
    check_output_path,
    config_inputs,
    config_output,
    write_config_text,
    yaml_config_text,
)
from neox_epoch.util.helptext import examples

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
#: flags that override NeoX config values (a written config could not carry them)
OVERRIDE_FLAGS = ("seq_length", "global_batch_size", "train_iters", "eval_interval", "eval_iters", "seed", "split")

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
#: the plan parser's actions (for the did-you-mean of an unknown option)
_PARSER_ACTIONS: list[argparse.Action] = []


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
    _PARSER_ACTIONS[:] = p._actions


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
        mcore=McoreOptions(
            mid_level_dataset_surplus=(
                args.mid_level_dataset_surplus if args.mid_level_dataset_surplus is not None else 0.005
            )
        ),
    )


def _apply_flag_overrides(inp: PlanInput, args: argparse.Namespace) -> PlanInput:
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
    return LauncherSettings(**{name: getattr(args, name, None) for name in _LAUNCHER_FLAGS})


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
        inp = _apply_flag_overrides(inp, args)
        inp = replace(inp, framework=framework, framework_version=args.framework_version or detect.neox_version())
        return inp, cfg
    if not (args.data_path or args.train_data_path):
        raise ConfigError("no input: give NeoX config files (neox-epoch plan config.yml) or --data-path PREFIX ...")
    framework = args.framework or "megatron-core"
    if framework == "megatron-core":
        raise AssertionError("megatron-core command lines are planned by megatron_plan")  # routed in run()
    _no_extra(args)
    return _megatron_input(args, framework, args.framework_version or ""), None


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


def _no_extra(args: argparse.Namespace) -> None:
    """Outside a Megatron-LM command line, an option plan does not know is an error (with a did-you-mean)."""
    extra = [t for t in getattr(args, "extra", []) if t.startswith("-")]
    if extra:
        from neox_epoch.errors import did_you_mean

        flag = extra[0].partition("=")[0]
        known = [o for a in _PARSER_ACTIONS for o in a.option_strings]
        raise ConfigError(
            f"{flag}: not an option of neox-epoch plan{did_you_mean(flag, known)}; Megatron-LM flags are "
            "read when the command line has --data-path (or --train-data-path)"
        )


def _plan_argv(args: argparse.Namespace) -> list[str]:
    """The tokens after ``plan`` on the command line."""
    raw = list(getattr(args, "raw_argv", []) or [])
    return raw[raw.index("plan") + 1 :] if "plan" in raw else raw


def run_megatron(args: argparse.Namespace) -> int:
    """A pasted Megatron-LM command line: planned with Megatron-LM's own arithmetic, megatron-core's builder."""
    from dataclasses import replace

    from neox_epoch.plan import from_megatron as mp

    if args.configs and any(c.endswith((".yml", ".yaml")) for c in args.configs):
        raise ConfigError("give NeoX config files or Megatron-LM flags (--data-path ...), not both")
    version = mcore_version(args)
    if _phased(_plan_argv(args)):
        return run_phases(args, version)
    argv = mp.megatron_argv(_plan_argv(args))
    wants_exact = args.epochs is not None or bool(args.source_epochs)
    if wants_exact and not any(t.partition("=")[0] in ("--train-iters", "--train-samples") for t in argv):
        argv += ["--train-iters", "1"]  # exact mode computes the length; Megatron-LM needs one to parse
    mi = mp.megatron_input(argv, version)
    mi = replace(mi, notes=mi.notes + tuple(version_notes(args, version, mi.args.megatron_lm_version)))
    targets = targets_from(args, mi.inp, None)
    if targets:
        batches = _changing_batch(mi)
        base = replace(
            mi.inp,
            train_iters=None,
            train_samples=None,
            mcore=replace(mi.inp.mcore, num_samples=None, train_consumed=None, arithmetic=None),
        )
        plan = exact_plan(base, targets, batches=batches)
        a = mi.args
        keys = McoreScheduleKeys(
            lr_decay_style=a.lr_decay_style,
            lr_decay_iters=a.lr_decay_iters,
            lr_decay_samples=a.lr_decay_samples,
            lr_warmup_fraction=a.lr_warmup_fraction,
            lr_warmup_iters=a.lr_warmup_iters,
            lr_warmup_samples=a.lr_warmup_samples,
            lr_wsd_decay_iters=a.lr_wsd_decay_iters,
            lr_wsd_decay_samples=a.lr_wsd_decay_samples,
            save_interval=a.save_interval,
            eval_interval=a.eval_interval,
            eval_iters=a.eval_iters,
            exit_interval=a.exit_interval,
        )
        old_iters = a.train_iters if any(t.partition("=")[0] == "--train-iters" for t in _plan_argv(args)) else None
        plan, schedule = attach_mcore(
            plan,
            keys,
            old_iters,
            a.train_samples,
            targets,
            mi.inp.warmup_share_limit,
            plan.train_samples if batches is not None else None,
        )
        flags = mp.exact_flags(mi.args, plan, schedule.overwrite())
        mi = replace(mi, warnings=mp.verify_exact(argv, flags, plan, version).warnings)  # the exact run's
        plan = replace(plan, settings={**plan.settings, "megatron_flags": flags})
    else:
        plan = merge_repeated(make_plan(mi.inp))  # a prefix listed twice: one row, as NeoX's plan
    plan = replace(plan, warnings=plan.warnings + mi.warnings + tuple(mp.cache_warnings(mi.args, plan)))
    if args.write_config:
        raise ConfigError("--write-config: writes a NeoX config; for Megatron-LM paste the flags exact mode prints")
    if args.json:
        out = plan.to_json()
        out["notes"] = list(mi.notes)
        out["world_size"] = {"value": mi.args.world_size, "from": mi.args.world_size_source}
        print(json.dumps(out, indent=1, sort_keys=False))
        return 0
    print(render(plan))
    print(
        f"\nworld: {mi.args.world_size} ({mi.args.world_size_source}); data-parallel size "
        f"{mi.args.data_parallel_size}; Megatron-LM {mi.args.megatron_lm_version} flags"
    )
    for note in mi.notes:
        print(f"note: {note}")
    if targets:
        print(
            f"\nflags for exact passes (paste after your command line; the last one wins):\n  {plan.settings['megatron_flags']}"
        )
    return 0


def _phased(tokens: list[str]) -> bool:
    """A command line with ``--phase K`` groups or ``--phase-transition-iterations``: planned phase by phase."""
    from neox_epoch.plan.phases import PHASE_OPTION

    return any(t.partition("=")[0] in (PHASE_OPTION, "--phase-transition-iterations") for t in tokens)


def run_phases(args: argparse.Namespace, version: str) -> int:
    """A phased Megatron-LM command line: every phase as Megatron-LM builds it; with passes, each phase's flags."""
    from neox_epoch.plan import from_megatron as mp
    from neox_epoch.plan import phases as ph

    base, raw_groups = ph.split_phase_groups(_plan_argv(args))
    targets: dict[int, dict[str, float]] = {}
    decay, base = ph.phase_decay(base)
    base_targets, base_rest = ph.phase_targets(base)
    if base_targets is not None:
        targets[1] = base_targets
    groups: dict[int, list[str]] = {}
    for k, tokens in raw_groups.items():
        own, rest = ph.phase_targets(tokens)
        if own is not None:
            targets[k] = own
        groups[k] = mp.megatron_argv(rest)
    argv = mp.megatron_argv(base_rest)
    if args.write_config:
        raise ConfigError("--write-config: writes a NeoX config; for Megatron-LM paste the flags exact mode prints")
    exact: list[ph.ExactPhase] = []
    if decay and not targets:
        raise ConfigError(
            f"{' / '.join(ph.DECAY_OPTIONS)}: place the decay in exact mode's flags; give each phase's "
            "passes (--epochs E or --source-epochs NAME=E in its --phase K group)"
        )
    if targets:
        exact, pp = ph.exact_phases(argv, groups, version, targets, decay)
    else:
        pp = ph.plan_phases(argv, groups, version)
    if args.json:
        print(json.dumps(ph.phases_json(pp, exact), indent=1, sort_keys=False))
        return 0
    print("\n".join(ph.phase_report(pp)))
    for p in exact:
        print(
            f"\nphase {p.number} ({', '.join(f'{k}={v:g}' for k, v in p.targets.items())}: {p.iterations} iterations, "
            f"{p.samples} samples; remainder {p.plan.remainder_samples} samples not drawn): flags for its launch "
            f"(paste after that phase's command line; the last one wins):\n  {p.flags}"
        )
    if exact and exact[0].lr_schedule is not None:
        print("\n" + "\n".join(exact[0].lr_schedule.lines()))
    if exact:
        print(
            "\nexact: every phase draws whole passes of each source it continues (Megatron-LM starts each phase at "
            "its sources' sample 0, so only a source's last phase may draw part of a pass)"
        )
    return 0


def _changing_batch(mi: Any) -> Any:
    """Exact mode's batches for a step schedule (0.19.2): total -> (iterations, samples, arithmetic), the run
    sample-based so that Megatron-LM asks the builder for exactly what the schedule draws; None for a constant
    batch; a ramp-up (0.16.1), or a step schedule under --train-iters, is refused in one line."""
    from neox_epoch.semantics import megatron_lm as mlm

    sched, args = mi.run.schedule, mi.args
    if sched.constant:
        return None
    if sched.steps is None:
        raise ConfigError(
            "--rampup-batch-size: exact passes need a constant global batch or a step schedule; plan "
            "the ramp-up without --epochs, or use --step-batch-size-schedule (Megatron-LM 0.19)"
        )
    if not args.train_samples:
        raise ConfigError(
            "--step-batch-size-schedule: exact passes with a step schedule need --train-samples N (under "
            f"--train-iters Megatron-LM asks the builder for train_iters x {args.global_batch_size}, not "
            "what the schedule draws); give --train-samples instead of --train-iters"
        )

    def batches(total: int) -> tuple[int, int, str]:
        iters, samples = mlm.schedule_fit(sched, total)
        return (
            iters,
            samples,
            (
                f"train_samples = the step schedule's first {iters} batches, the most that fit in "
                f"sum(targets) {total} = {samples} (Megatron-LM {args.megatron_lm_version}'s "
                "update_train_iters then stops after exactly those)"
            ),
        )

    return batches


def version_notes(args: argparse.Namespace, version: str, megatron_lm: str) -> list[str]:
    """One note when --framework-version names another megatron-core than the one installed (the plan follows
    the given version's Megatron-LM rules), and which Megatron-LM rules a version without its own table uses."""
    from neox_epoch.semantics.megatron_lm import rules_for

    notes = []
    if args.framework_version:
        found = detect.megatron_core_source()
        installed = rules_for(found[0]).version if found is not None else megatron_lm
        if found is not None and installed != megatron_lm:
            notes.append(
                f"--framework-version {version}: planned with Megatron-LM {megatron_lm}'s flags and rules, "
                f"not Megatron-LM {installed}'s (those of the megatron-core {found[0]} installed, {found[1]})"
            )
    if version != megatron_lm:
        notes.append(
            f"megatron-core {version}: Megatron-LM {megatron_lm}'s flags and training-side rules apply (the "
            "option tables here: " + ", ".join(sorted(mlm_versions())) + ")"
        )
    return notes


def mlm_versions() -> tuple[str, ...]:
    """The Megatron-LM versions with an option table."""
    from neox_epoch.formats.megatron_flags import table_versions

    return table_versions()


def _table_version(args: argparse.Namespace) -> str | None:
    """The megatron-core version whose Megatron-LM option table decides which ``*.py`` token is the script (a
    ``.py`` value of that version's flag is not): the one the plan mirrors (None: not known yet, the default's)."""
    if args.framework_version:
        return str(args.framework_version)
    found = detect.megatron_core_source()
    return found[0] if found is not None else None


def mcore_version(args: argparse.Namespace) -> str:
    """The megatron-core version to mirror for ``--framework-version`` / ``--force-version``."""
    return detect.version_to_mirror(args.framework_version, args.force_version)


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


def _write_label(args: argparse.Namespace) -> str:
    return f'--write-config "{args.write_config}"'


def check_write_request(args: argparse.Namespace, cfg: NeoxConfig | None) -> None:
    """Refuse --write-config/--full requests that cannot give a correct file, before any planning."""
    if args.full and not args.write_config:
        raise ConfigError("--full: goes with --write-config OUT.yml (one complete merged config); add --write-config")
    if not args.write_config:
        return
    if cfg is None or (args.framework or "neox") != "neox":
        raise ConfigError(
            f"{_write_label(args)}: writes GPT-NeoX configs; give NeoX config files (not --data-path) "
            "with neox semantics (no --framework megatron-legacy)"
        )
    for flag in OVERRIDE_FLAGS:
        if getattr(args, flag) is not None:
            name = "--" + flag.replace("_", "-")
            raise ConfigError(
                f"{_write_label(args)}: {name} {getattr(args, flag)} overrides the config files, and the "
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


def _write(
    args: argparse.Namespace, cfg: NeoxConfig, plan: Plan, targets: dict[str, float], schedule: Schedule
) -> None:
    if args.full:
        data = full_config(cfg, plan, cfg.block, targets, schedule)
    else:
        data = overlay_spelling(cfg, overlay(plan, cfg.block, targets, schedule), _write_label(args))
    write_config_text(
        config_output(args.write_config, "--write-config"),
        yaml_config_text(_header(args, cfg, schedule), data),
        config_inputs(cfg.files),
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
    check_foreign(megatron_argv(_plan_argv(args)), _table_version(args))
    if (args.framework in (None, "megatron-core")) and is_megatron_argv(_plan_argv(args)):
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
            f"{_write_label(args)}: writes the config of an exact plan; add --epochs N (or a neox_epoch "
            "block with epochs)"
        )
    plan, schedule = plan_with_schedule(args, inp, cfg, targets)
    if args.write_config and cfg is not None and targets and schedule is not None:
        _write(args, cfg, plan, targets, schedule)
    if args.json:
        out = plan.to_json()
        out["enforce_findings"] = enforce_findings(plan, block)
        if args.configs:
            out["config_notes"] = list(getattr(args, "config_notes", []))
        if targets and inp.framework == "neox":
            out["settings"]["neox_overlay"] = overlay(plan, block, targets, schedule)  # type: ignore[index]
        print(json.dumps(out, indent=1, sort_keys=False))
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
        _write(args, cfg, plan, targets, schedule)
    if args.json:
        out = plan.to_json()
        out["enforce_findings"] = enforce_findings(plan, block)
        out["config_notes"] = list(getattr(args, "config_notes", []))
        out["settings"]["neox_overlay"] = overlay(plan, block, targets, schedule)  # type: ignore[index]
        out["stages"] = stages_json(staged)
        out["stages"]["lr_schedule"] = lr_schedule.to_json()
        print(json.dumps(out, indent=1, sort_keys=False))
    else:
        print(block_line(block))
        print(render(plan))
        print("\n" + render_stages(staged))
        print("\n" + "\n".join(lr_schedule.lines()))
        if args.write_config:
            print(f"\nwrote {args.write_config}" + (" (complete merged config)" if args.full else " (overlay)"))
    return _exit_code(plan, block)
