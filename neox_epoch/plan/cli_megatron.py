"""``neox-epoch plan`` on a pasted Megatron-LM command line: planned with Megatron-LM's own arithmetic and
megatron-core's builder, phase by phase for a phased line; the megatron-core version mirrored and its notes."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from neox_epoch.errors import ConfigError
from neox_epoch.formats import detect
from neox_epoch.plan.cli_input import plan_argv, targets_from
from neox_epoch.plan.exact import exact_plan
from neox_epoch.plan.planner import make_plan
from neox_epoch.plan.render import render
from neox_epoch.plan.repeated import merge_repeated
from neox_epoch.plan.schedule_mcore import McoreScheduleKeys, attach_mcore
from neox_epoch.util.schema import stamped

if TYPE_CHECKING:
    from neox_epoch.formats.megatron_args import MegatronArgs
    from neox_epoch.plan.from_megatron import MegatronInput
    from neox_epoch.plan.model import Plan


def run_megatron(args: argparse.Namespace) -> int:
    """A pasted Megatron-LM command line: planned with Megatron-LM's own arithmetic, megatron-core's builder."""
    from dataclasses import replace

    from neox_epoch.plan import from_megatron

    if args.configs and any(c.endswith((".yml", ".yaml")) for c in args.configs):
        raise ConfigError("give NeoX config files or Megatron-LM flags (--data-path ...), not both")
    version = mcore_version(args)
    if _phased(plan_argv(args)):
        return run_phases(args, version)
    argv = from_megatron.megatron_argv(plan_argv(args))
    wants_exact = args.epochs is not None or bool(args.source_epochs)
    if wants_exact and not any(t.partition("=")[0] in ("--train-iters", "--train-samples") for t in argv):
        argv += ["--train-iters", "1"]  # exact mode computes the length; Megatron-LM needs one to parse
    mi = from_megatron.megatron_input(argv, version)
    mi = replace(mi, notes=mi.notes + tuple(version_notes(args, version, mi.args.megatron_lm_version)))
    targets = targets_from(args, mi.inp, None)
    if targets:
        plan, mi = _exact_megatron(args, mi, argv, version, targets)
    else:
        plan = merge_repeated(make_plan(mi.inp))  # a prefix listed twice: one row, as NeoX's plan
    plan = replace(plan, warnings=plan.warnings + mi.warnings + tuple(from_megatron.cache_warnings(mi.args, plan)))
    if args.write_config:
        raise ConfigError("--write-config: writes a NeoX config; for Megatron-LM paste the flags exact mode prints")
    if args.json:
        out = plan.to_json()
        out["notes"] = list(mi.notes)
        out["world_size"] = {"value": mi.args.world_size, "from": mi.args.world_size_source}
        print(json.dumps(stamped(out), indent=1, sort_keys=False))
        return 0
    print(render(plan))
    print(
        f"\nworld: {mi.args.world_size} ({mi.args.world_size_source}); data-parallel size "
        f"{mi.args.data_parallel_size}; Megatron-LM {mi.args.megatron_lm_version} flags"
    )
    for note in mi.notes:
        print(f"note: {note}")
    if targets:
        exact_flags = plan.settings["megatron_flags"]
        print(f"\nflags for exact passes (paste after your command line; the last one wins):\n  {exact_flags}")
    return 0


def _exact_megatron(
    args: argparse.Namespace, mi: MegatronInput, argv: list[str], version: str, targets: dict[str, float]
) -> tuple[Plan, MegatronInput]:
    """Exact mode on a pasted Megatron-LM command line: the plan with its schedule and the flags to paste after the
    line (``settings["megatron_flags"]``), and the input with the exact run's warnings."""
    from dataclasses import replace

    from neox_epoch.plan import from_megatron

    batches = _changing_batch(mi)
    base = replace(
        mi.inp,
        train_iters=None,
        train_samples=None,
        mcore=replace(mi.inp.mcore, num_samples=None, train_consumed=None, arithmetic=None),
    )
    plan = exact_plan(base, targets, batches=batches)
    a = mi.args
    old_iters = a.train_iters if any(t.partition("=")[0] == "--train-iters" for t in plan_argv(args)) else None
    plan, schedule = attach_mcore(
        plan,
        _schedule_keys(a),
        old_iters,
        a.train_samples,
        targets,
        mi.inp.warmup_share_limit,
        plan.train_samples if batches is not None else None,
    )
    flags = from_megatron.exact_flags(mi.args, plan, schedule.overwrite())
    mi = replace(mi, warnings=from_megatron.verify_exact(argv, flags, plan, version).warnings)  # the exact run's
    return replace(plan, settings={**plan.settings, "megatron_flags": flags}), mi


def _schedule_keys(a: MegatronArgs) -> McoreScheduleKeys:
    """The schedule flags of a parsed Megatron-LM command line."""
    return McoreScheduleKeys(
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


def _phased(tokens: list[str]) -> bool:
    """A command line with ``--phase K`` groups or ``--phase-transition-iterations``: planned phase by phase."""
    from neox_epoch.plan.phases import PHASE_OPTION

    return any(t.partition("=")[0] in (PHASE_OPTION, "--phase-transition-iterations") for t in tokens)


def run_phases(args: argparse.Namespace, version: str) -> int:
    """A phased Megatron-LM command line: every phase as Megatron-LM builds it; with passes, each phase's flags."""
    from neox_epoch.plan import from_megatron, phases

    base, raw_groups = phases.split_phase_groups(plan_argv(args))
    targets: dict[int, dict[str, float]] = {}
    decay, base = phases.phase_decay(base)
    base_targets, base_rest = phases.phase_targets(base)
    if base_targets is not None:
        targets[1] = base_targets
    groups: dict[int, list[str]] = {}
    for k, tokens in raw_groups.items():
        own, rest = phases.phase_targets(tokens)
        if own is not None:
            targets[k] = own
        groups[k] = from_megatron.megatron_argv(rest)
    argv = from_megatron.megatron_argv(base_rest)
    if args.write_config:
        raise ConfigError("--write-config: writes a NeoX config; for Megatron-LM paste the flags exact mode prints")
    exact: list[phases.ExactPhase] = []
    if decay and not targets:
        raise ConfigError(
            f"{' / '.join(phases.DECAY_OPTIONS)}: place the decay in exact mode's flags; give each phase's "
            "passes (--epochs E or --source-epochs NAME=E in its --phase K group)"
        )
    if targets:
        exact, pp = phases.exact_phases(argv, groups, version, targets, decay)
    else:
        pp = phases.plan_phases(argv, groups, version)
    if args.json:
        print(json.dumps(stamped(phases.phases_json(pp, exact)), indent=1, sort_keys=False))
        return 0
    print("\n".join(phases.phase_report(pp)))
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
    from neox_epoch.semantics import megatron_batches

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
        iters, samples = megatron_batches.schedule_fit(sched, total)
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


def table_version(args: argparse.Namespace) -> str | None:
    """The megatron-core version whose Megatron-LM option table decides which ``*.py`` token is the script (a
    ``.py`` value of that version's flag is not): the one the plan mirrors (None: not known yet, the default's)."""
    if args.framework_version:
        return str(args.framework_version)
    found = detect.megatron_core_source()
    return found[0] if found is not None else None


def mcore_version(args: argparse.Namespace) -> str:
    """The megatron-core version to mirror for ``--framework-version`` / ``--force-version``."""
    return detect.version_to_mirror(args.framework_version, args.force_version)
