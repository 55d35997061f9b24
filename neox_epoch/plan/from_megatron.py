"""A pasted Megatron-LM command line turned into a :class:`~neox_epoch.plan.inputs.PlanInput`.

``neox-epoch plan [--epochs N] <pretrain_gpt.py flags>``: the flags are parsed as Megatron-LM parses them
(:mod:`neox_epoch.formats.megatron_args`), the run's iterations and per-split sample requests come from Megatron-LM's
own training-side arithmetic (:mod:`neox_epoch.semantics.megatron_lm`), and the datasets from megatron-core's
builder semantics. Exact mode gives the flags to paste back.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from neox_epoch.formats.megatron_args import Blend, MegatronArgs, parse_megatron_argv
from neox_epoch.formats.megatron_run import MegatronRun, megatron_run
from neox_epoch.plan.inputs import McoreOptions, PlanInput, PlanWarning, SourceSpec
from neox_epoch.plan.model import Plan
from neox_epoch.plan.seeds import check_seed
from neox_epoch.semantics import megatron_batches
from neox_epoch.semantics import megatron_lm as megatron_lm_sem

#: neox-epoch's own ``plan`` options (name -> number of values), removed before Megatron-LM parses the rest
OWN_OPTIONS: dict[str, int] = {
    "--framework": 1,
    "--framework-version": 1,
    "--force-version": 0,
    "--epochs": 1,
    "--json": 0,
    "--write-config": 1,
    "--full": 0,
    "--source-epochs": -1,
    "--exposure": 0,
    "--cache": 1,
    "--iteration": 1,
}
#: flags that make a ``plan`` command line a Megatron-LM one
DATA_FLAGS = (
    "--data-path",
    "--train-data-path",
    "--valid-data-path",
    "--test-data-path",
    "--data-args-path",
    "--per-split-data-args-path",
    "--mock-data",
)


def is_megatron_argv(argv: Sequence[str]) -> bool:
    """True when the plan's arguments carry a Megatron-LM data flag (or a ``*.py`` script after a launcher)."""
    return any(t.partition("=")[0] in DATA_FLAGS for t in argv)


def is_name_value(token: str) -> bool:
    """A ``--source-epochs`` value: NAME=E (not an option, not the launcher, script or a config file)."""
    name, eq, _ = token.partition("=")
    return bool(eq and name) and not token.startswith("-")


def megatron_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` without neox-epoch's own options (``--epochs 2``, ``--json`` ...): what Megatron-LM would see."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        name, eq, _ = argv[i].partition("=")
        n = OWN_OPTIONS.get(name)
        if n is None:
            out.append(argv[i])
            i += 1
            continue
        i += 1
        if eq:
            continue
        if n < 0:  # --source-epochs NAME=E ...: its values end at the first token that is not NAME=E
            while i < len(argv) and is_name_value(argv[i]):
                i += 1
        else:
            i += n
    return out


@dataclass(frozen=True)
class MegatronInput:
    """The parsed command line, what Megatron-LM does with it, and the plan input for megatron-core."""

    args: MegatronArgs
    run: MegatronRun
    inp: PlanInput
    notes: tuple[str, ...]
    """What the plan does not model of this command line, and flags listed as not affecting it."""
    warnings: tuple[PlanWarning, ...] = ()
    """What Megatron-LM's own arithmetic does that a user would not expect (added to the plan's warnings)."""


def _specs(blend: Blend | None) -> tuple[SourceSpec, ...]:
    if blend is None:
        return ()
    prefixes, weights = blend
    if weights is None:
        return tuple(SourceSpec(p, None) for p in prefixes)
    return tuple(SourceSpec(p, float(w)) for p, w in zip(prefixes, weights))


def train_consumed(run: MegatronRun) -> int:
    """Samples training draws in ``train_iters`` iterations: the batch schedule summed (a ramp-up or a step
    schedule changes it; :func:`neox_epoch.semantics.megatron_batches.schedule_consumed`)."""
    return megatron_batches.schedule_consumed(run.schedule, run.train_iters)


def _schedule_words(sched: megatron_batches.BatchSchedule) -> str:
    """The batch schedule in words, for the arithmetic."""
    if sched.steps is not None:
        return "the step schedule (" + ", ".join(f"{b} from {t} samples" for t, b in sched.steps) + ")"
    if sched.rampup is not None:
        start, inc, samples = sched.rampup
        return (
            f"the ramp-up (from {start}, +{inc} every {sched.rampup_samples_per_increment:g} samples "
            f"up to {samples}, then "
            f"{sched.global_batch_size})"
        )
    return f"the running batch {sched.running_global_batch_size(0)} (--decrease-batch-size-if-needed)"


def run_arithmetic(args: MegatronArgs, run: MegatronRun) -> tuple[str, ...]:
    """Megatron-LM's arithmetic for each split's request and the train samples consumed, naming the version."""
    t, g, (train, valid, test) = run.train_iters, run.global_batch_size, run.num_samples
    eg = args.eval_global_batch_size if args.eval_global_batch_size is not None else g
    eg_name = "eval_global_batch_size" if args.eval_global_batch_size is not None else "global_batch_size"
    out = [
        f"Megatron-LM {args.megatron_lm_version} (update_train_iters, get_train_valid_test_num_samples, "
        "the num-microbatches calculator):"
    ]
    if args.phase_transition_iterations:
        out.append(f"train samples requested = the first phase's samples (--phase-transition-iterations) = {train}")
    elif args.train_samples:
        out.append(f"train samples requested = train_samples = {train}")
    else:
        out.append(f"train samples requested = train_iters * global_batch_size = {t} * {g} = {train}")
    consumed = train_consumed(run)
    if run.schedule.constant and not args.decrease_batch_size_if_needed:
        out.append(f"train samples consumed = train_iters * global_batch_size = {t} * {g} = {consumed}")
    else:
        out.append(f"train samples consumed = {_schedule_words(run.schedule)} summed over {t} iterations = {consumed}")
    if valid is None:
        out.append("valid samples: none requested (--full-validation: each evaluation is one pass of the valid split)")
    elif args.skip_train:
        out.append(f"valid samples = eval_iters * {eg_name} = {args.eval_iters} * {eg} = {valid} (--skip-train)")
    elif args.start_eval_at_iter is not None:
        out.append(
            f"valid samples = max(0, train_iters // eval_interval + 1 - start_eval_at_iter // eval_interval) * "
            f"eval_iters * {eg_name} = max(0, {t} // {args.eval_interval} + 1 - {args.start_eval_at_iter} // "
            f"{args.eval_interval}) * {args.eval_iters} * {eg} = {valid}"
        )
    else:
        out.append(
            f"valid samples = (train_iters // eval_interval + 1) * eval_iters * {eg_name} = "
            f"({t} // {args.eval_interval} + 1) * {args.eval_iters} * {eg} = {valid}"
        )
    out.append(f"test samples = eval_iters * {eg_name} = {args.eval_iters} * {eg} = {test}")
    return tuple(out)


def megatron_input(argv: Sequence[str], version: str) -> MegatronInput:
    """Parse ``argv`` (neox-epoch's own options removed) and build the megatron-core plan input."""
    args = parse_megatron_argv(argv, version)
    run = megatron_run(args)
    splits = args.blend_per_split
    per_split = splits is not None and any(splits)
    if splits is not None and per_split:
        train, valid, test = (_specs(b) for b in splits)
    else:
        train, valid, test = _specs(args.blend), (), ()
    notes = []
    if args.not_affecting_plan:
        notes.append("not affecting the plan: " + " ".join(args.not_affecting_plan))
    if args.multiple_validation_sets:
        notes.append(
            "--multiple-validation-sets: each validation source is evaluated on its own; the plan shows "
            "the valid split as one blend"
        )
    if args.exit_interval:
        notes.append(
            f"--exit-interval {args.exit_interval}: this launch stops at iteration {args.exit_interval}; "
            "the plan is for the whole run"
        )
    if args.step_batch_size_schedule is not None:
        notes.append(
            f"--step-batch-size-schedule {args.step_batch_size_schedule!r}: global batch {args.global_batch_size} "
            "is validate_args' default (micro x dp) that the requests and the LR schedule are counted in; "
            "the training steps take the schedule's batches (see the arithmetic)"
        )
    if args.iterations_to_skip:
        notes.append(
            f"--iterations-to-skip {' '.join(map(str, args.iterations_to_skip))}: those iterations draw "
            "their batches but do not train on them"
        )
    inp = PlanInput(
        framework="megatron-core",
        framework_version=version,
        seq_length=int(args.seq_length or 0),
        global_batch_size=run.global_batch_size,
        train_sources=train,
        valid_sources=valid,
        test_sources=test,
        per_split_paths=per_split,
        split=None if per_split else args.split,
        train_iters=run.train_iters,
        eval_interval=args.eval_interval or max(1, run.train_iters + 1),
        eval_iters=args.eval_iters,
        seed=check_seed(args.seed, "--seed", "Megatron-LM"),
        mcore=McoreOptions(
            mid_level_dataset_surplus=args.mid_level_dataset_surplus,
            num_samples=run.num_samples,
            train_consumed=train_consumed(run),
            arithmetic=run_arithmetic(args, run),
            eval_global_batch_size=args.eval_global_batch_size,
            start_eval_at_iter=args.start_eval_at_iter,
        ),
    )
    if args.data_cache_path and os.path.isdir(args.data_cache_path) and not os.listdir(args.data_cache_path):
        notes.append(
            f"--data-cache-path {args.data_cache_path}: empty; Megatron-LM builds this run's index caches "
            "there on its first launch (nothing to check yet)"
        )
    return MegatronInput(args=args, run=run, inp=inp, notes=tuple(notes), warnings=run_warnings(args, run))


def run_warnings(args: MegatronArgs, run: MegatronRun) -> tuple[PlanWarning, ...]:
    """What Megatron-LM's arithmetic does that a command line does not say: an ignored ramp-up (0.19.2), a step
    schedule consuming past the train request, a validation request one evaluation short."""
    out: list[PlanWarning] = []
    v = args.megatron_lm_version
    if args.rampup_ignored:
        out.append(
            PlanWarning(
                "rampup-ignored",
                f"--rampup-batch-size: Megatron-LM {v} parses it and ignores it "
                "(init_num_microbatches_calculator only logs that it is deprecated): "
                + (
                    "the step schedule sets the batch"
                    if args.step_batch_size_schedule is not None
                    else f"every step takes the global batch {run.global_batch_size}; use "
                    "--step-batch-size-schedule for a growing batch"
                ),
                "train",
            )
        )
    consumed, requested = train_consumed(run), run.num_samples[0]
    if consumed > requested and not args.phase_transition_iterations:
        if args.train_samples:
            why = (
                f"update_train_iters counts iterations while consumed < train_samples, so the {run.train_iters} "
                f"iterations consume {consumed} samples, {consumed - requested} more than the {requested} asked of "
                "the builder (--train-samples)"
            )
        else:
            why = (
                f"the builder is asked for train_iters * global_batch_size = {run.train_iters} * "
                f"{run.global_batch_size} = {requested} samples (the default global batch micro x dp) and the LR "
                f"schedule is counted in those, but the {run.train_iters} iterations consume {consumed}"
            )
        out.append(
            PlanWarning(
                "draws-past-request",
                f"train: Megatron-LM {v}: {why}; a blend sized to the request can run out in the last iteration(s)",
                "train",
            )
        )
    out += _eval_warnings(args, run)
    return tuple(out)


def _eval_warnings(args: MegatronArgs, run: MegatronRun) -> list[PlanWarning]:
    """The validation request against the evaluations the run makes (0.19.2's --start-eval-at-iter)."""
    valid = run.num_samples[1]
    if valid is None or args.skip_train or not args.eval_iters:
        return []
    eg = args.eval_global_batch_size if args.eval_global_batch_size is not None else run.global_batch_size
    runs = megatron_lm_sem.evaluations_run(run.train_iters, args.eval_interval, args.start_eval_at_iter)
    asked = valid // (args.eval_iters * eg) if eg else 0
    if runs <= asked:
        return []
    return [
        PlanWarning(
            "eval-past-request",
            f"valid: Megatron-LM {args.megatron_lm_version} asks the builder for "
            f"{asked} evaluations ({valid} samples) but the run makes {runs}: the training loop evaluates "
            f"at every multiple of --eval-interval {args.eval_interval} from --start-eval-at-iter "
            f"{args.start_eval_at_iter} on (the request leaves out one evaluation when that start is a "
            "multiple of the interval), then once after training; "
            f"the last {(runs - asked) * args.eval_iters * eg} samples are read past the "
            "request; a validation blend sized to it runs out",
            "valid",
        )
    ]


def cache_warnings(args: MegatronArgs, plan: Plan) -> list[PlanWarning]:
    """``--data-cache-path``: index caches there that are stale (damaged, or their data changed) or foreign
    (built from other data), checked with the audit's validation."""
    path = args.data_cache_path
    if not path or not os.path.isdir(path) or not os.listdir(path):
        return []  # none yet (an empty one is a note of megatron_input: the first launch builds them there)
    from neox_epoch.audit.audit import AuditOptions, run_audit
    from neox_epoch.errors import NeoxEpochError
    from neox_epoch.formats.cache_names import discover

    try:
        res = run_audit(discover([path]), AuditOptions())
    except NeoxEpochError as err:
        return [PlanWarning("cache-unreadable", f"cache: {path}: {err}")]
    out = [PlanWarning("cache-stale", f"cache: {path}: {f}") for f in res.findings]
    ours = {os.path.abspath(s.prefix) for s in plan.sources}
    foreign = sorted(
        {r.data_prefix for r in res.indexes if r.data_prefix and os.path.abspath(r.data_prefix) not in ours}
    )
    if foreign:
        out.append(
            PlanWarning(
                "cache-foreign",
                f"cache: {path} also holds indexes of other data ({', '.join(foreign)}); "
                "harmless, but a shared cache is where a stale index hides",
            )
        )
    return out


def exact_flags(args: MegatronArgs, plan: Plan, schedule: dict[str, object] | None = None) -> str:
    """The flags to paste back for an exact plan: train iterations, no mid-level surplus, verified weights,
    and the LR-schedule flags that follow the new length (``schedule``: dest -> new value)."""
    settings = plan.settings
    schedule = dict(schedule or {})
    if schedule.get("--train-samples") is not None:  # a sample-based run stays sample-based (its LR flags are)
        flags = [f"--train-samples {schedule['--train-samples']}"]
    else:
        flags = [f"--train-iters {settings['train_iters']}"]
    flags.append("--mid-level-dataset-surplus 0")
    for flag, value in schedule.items():
        if flag not in ("--train-iters", "--train-samples") and value is not None:
            flags.append(f"{flag} {value}")
    weights = settings.get("weights")
    prefixes = [s.prefix for s in plan.sources if s.split == "train"]
    if isinstance(weights, list) and len(weights) == len(prefixes):
        pairs = " ".join(f"{float(w)!r} {shlex.quote(p)}" for w, p in zip(weights, prefixes))
        flags.append(("--train-data-path " if args.blend_per_split else "--data-path ") + pairs)
    return " ".join(flags)


def without(argv: Sequence[str], flags: Sequence[str]) -> list[str]:
    """``argv`` with ``flags`` and their values (up to the next option) removed."""
    out: list[str] = []
    skipping = False
    for tok in argv:
        if tok.startswith("--"):
            skipping = tok.partition("=")[0] in flags
            if skipping:
                continue
        if not skipping:
            out.append(tok)
    return out


def verify_exact(argv: Sequence[str], flags: str, plan: Plan, version: str) -> MegatronInput:
    """Re-parse the command line with the exact flags pasted in and require the same draws and requests; the
    re-parsed input (its warnings are the exact run's)."""
    from neox_epoch.errors import PlanError
    from neox_epoch.plan.planner import make_plan

    replaced = ["--train-iters", "--train-samples", "--mid-level-dataset-surplus"]
    replaced += [t for t in shlex.split(flags) if t.startswith("--")]
    if "--data-path" in flags or "--train-data-path" in flags:
        replaced += ["--data-path", "--train-data-path"] if "--data-path" in flags else ["--train-data-path"]
    again = megatron_input(without(argv, replaced) + shlex.split(flags), version)
    check = make_plan(again.inp)
    want = [(s.split, s.prefix, s.samples_drawn) for s in plan.sources]
    got = [(s.split, s.prefix, s.samples_drawn) for s in check.sources]
    if want != got or check.consumed != plan.consumed:
        raise PlanError(
            f"exact plan: with the flags {flags!r} Megatron-LM would draw {got} ({check.consumed}), "
            f"not {want} ({plan.consumed}); this command line cannot be made exact by flags alone"
        )
    return again
