"""A pasted Megatron-LM command line turned into a :class:`~neox_epoch.plan_input.PlanInput`.

``neox-epoch plan [--epochs N] <pretrain_gpt.py flags>``: the flags are parsed as Megatron-LM parses them
(:mod:`neox_epoch.megatron_args`), the run's iterations and per-split sample requests come from Megatron-LM's
own training-side arithmetic (:mod:`neox_epoch.semantics.megatron_lm`), and the datasets from megatron-core's
builder semantics. Exact mode gives the flags to paste back.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from neox_epoch.megatron_args import Blend, MegatronArgs, MegatronRun, megatron_run, parse_megatron_argv
from neox_epoch.plan import Plan
from neox_epoch.plan_input import McoreOptions, PlanInput, PlanWarning, SourceSpec

#: neox-epoch's own ``plan`` options (name -> number of values), removed before Megatron-LM parses the rest
OWN_OPTIONS: dict[str, int] = {
    "--framework": 1, "--framework-version": 1, "--force-version": 0, "--epochs": 1, "--json": 0,
    "--write-config": 1, "--full": 0, "--source-epochs": -1, "--exposure": 0, "--cache": 1, "--iteration": 1,
}
#: flags that make a ``plan`` command line a Megatron-LM one
DATA_FLAGS = ("--data-path", "--train-data-path", "--valid-data-path", "--test-data-path", "--data-args-path",
              "--per-split-data-args-path", "--mock-data")


def is_megatron_argv(argv: Sequence[str]) -> bool:
    """True when the plan's arguments carry a Megatron-LM data flag (or a ``*.py`` script after a launcher)."""
    return any(t.partition("=")[0] in DATA_FLAGS for t in argv)


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
        if n < 0:  # nargs="+": values up to the next option
            while i < len(argv) and not argv[i].startswith("-"):
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


def _specs(blend: Blend | None) -> tuple[SourceSpec, ...]:
    if blend is None:
        return ()
    prefixes, weights = blend
    return tuple(SourceSpec(p, None if weights is None else float(w)) for p, w in
                 zip(prefixes, weights if weights is not None else [None] * len(prefixes)))


def train_consumed(run: MegatronRun) -> int:
    """Samples training draws in ``train_iters`` iterations: the batch schedule summed (a ramp-up grows it)."""
    if run.schedule.rampup is None:
        return run.train_iters * run.global_batch_size
    consumed = 0
    for _ in range(run.train_iters):
        consumed += run.schedule.current_global_batch_size(consumed)
    return consumed


def megatron_input(argv: Sequence[str], version: str) -> MegatronInput:
    """Parse ``argv`` (neox-epoch's own options removed) and build the megatron-core plan input."""
    args = parse_megatron_argv(argv)
    run = megatron_run(args)
    per_split = args.blend_per_split is not None and any(args.blend_per_split)
    if per_split:
        train, valid, test = (_specs(b) for b in args.blend_per_split)  # type: ignore[union-attr]
    else:
        train, valid, test = _specs(args.blend), (), ()
    notes = []
    if args.not_affecting_plan:
        notes.append("not affecting the plan: " + " ".join(args.not_affecting_plan))
    if args.multiple_validation_sets:
        notes.append("--multiple-validation-sets: each validation source is evaluated on its own; the plan shows "
                     "the valid split as one blend")
    if args.exit_interval:
        notes.append(f"--exit-interval {args.exit_interval}: this launch stops at iteration {args.exit_interval}; "
                     "the plan is for the whole run")
    if args.iterations_to_skip:
        notes.append(f"--iterations-to-skip {' '.join(map(str, args.iterations_to_skip))}: those iterations draw "
                     "their batches but do not train on them")
    inp = PlanInput(
        framework="megatron-core", framework_version=version, seq_length=int(args.seq_length or 0),
        global_batch_size=run.global_batch_size, train_sources=train, valid_sources=valid, test_sources=test,
        per_split_paths=per_split, split=None if per_split else args.split, train_iters=run.train_iters,
        eval_interval=args.eval_interval or max(1, run.train_iters + 1), eval_iters=args.eval_iters,
        seed=args.seed,
        mcore=McoreOptions(mid_level_dataset_surplus=args.mid_level_dataset_surplus, num_samples=run.num_samples,
                           train_consumed=train_consumed(run)),
    )
    if args.data_cache_path and os.path.isdir(args.data_cache_path) and not os.listdir(args.data_cache_path):
        notes.append(f"--data-cache-path {args.data_cache_path}: empty; Megatron-LM builds this run's index caches "
                     "there on its first launch (nothing to check yet)")
    return MegatronInput(args=args, run=run, inp=inp, notes=tuple(notes))


def cache_warnings(args: MegatronArgs, plan: Plan) -> list[PlanWarning]:
    """``--data-cache-path``: index caches there that are stale (damaged, or their data changed) or foreign
    (built from other data), checked with the audit's validation."""
    path = args.data_cache_path
    if not path or not os.path.isdir(path) or not os.listdir(path):
        return []  # none yet (an empty one is a note of megatron_input: the first launch builds them there)
    from neox_epoch.audit.audit import AuditOptions, run_audit
    from neox_epoch.audit.names import discover
    from neox_epoch.errors import NeoxEpochError

    try:
        res = run_audit(discover([path]), AuditOptions())
    except NeoxEpochError as err:
        return [PlanWarning("cache-unreadable", f"cache: {path}: {err}")]
    out = [PlanWarning("cache-stale", f"cache: {path}: {f}") for f in res.findings]
    ours = {os.path.abspath(s.prefix) for s in plan.sources}
    foreign = sorted({r.data_prefix for r in res.indexes if r.data_prefix and os.path.abspath(r.data_prefix) not in ours})
    if foreign:
        out.append(PlanWarning("cache-foreign", f"cache: {path} also holds indexes of other data ({', '.join(foreign)}); "
                                                "harmless, but a shared cache is where a stale index hides"))
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


def _without(argv: Sequence[str], flags: Sequence[str]) -> list[str]:
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


def verify_exact(argv: Sequence[str], flags: str, plan: Plan, version: str) -> None:
    """Re-parse the command line with the exact flags pasted in and require the same draws and requests."""
    from neox_epoch.errors import PlanError
    from neox_epoch.plan import make_plan

    replaced = ["--train-iters", "--train-samples", "--mid-level-dataset-surplus"]
    replaced += [t for t in shlex.split(flags) if t.startswith("--")]
    if "--data-path" in flags or "--train-data-path" in flags:
        replaced += ["--data-path", "--train-data-path"] if "--data-path" in flags else ["--train-data-path"]
    again = megatron_input(_without(argv, replaced) + shlex.split(flags), version)
    check = make_plan(again.inp)
    want = [(s.split, s.prefix, s.samples_drawn) for s in plan.sources]
    got = [(s.split, s.prefix, s.samples_drawn) for s in check.sources]
    if want != got or check.consumed != plan.consumed:
        raise PlanError(f"exact plan: with the flags {flags!r} Megatron-LM would draw {got} ({check.consumed}), "
                        f"not {want} ({plan.consumed}); this command line cannot be made exact by flags alone")
