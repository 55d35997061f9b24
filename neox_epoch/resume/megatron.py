"""``neox-epoch resume-check`` for Megatron-LM checkpoints resumed with a changed command line.

Megatron-LM resumes its data where the samples consumed say: ``load_checkpoint`` restores
``consumed_train_samples`` from the ``args`` saved in the checkpoint and the pretraining sampler starts there,
so a changed global batch neither skips nor repeats a position. What can change is what the positions name:
the new command line asks the train split for ``train_iters x global_batch_size`` samples (or
``--train-samples``), which can give a source another number of epochs or final-epoch separation (its index is
shuffled anew), another blend (other sources from the resume on), or another seq_length; the loop then runs
``while iteration < train_iters``, and the sampler refuses (no samples left) or the loader ends (StopIteration) when
the dataset is shorter than the samples left to draw; OptimizerParamScheduler refuses a checkpoint whose schedule
differs unless told to override or use it. The saved run is planned from its saved ``args`` exactly as a command line
with those flags (:func:`argv_from_args`), the new one from the command line given, both with Megatron-LM's own
arithmetic (:mod:`neox_epoch.formats.megatron_args`) and megatron-core's builder (:mod:`neox_epoch.plan.planner`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from neox_epoch.errors import ConfigError, NeoxEpochError
from neox_epoch.formats.checkpoint import Checkpoint
from neox_epoch.formats.megatron_args import PLAN_DESTS, MegatronArgs
from neox_epoch.formats.megatron_flags import flag_table
from neox_epoch.plan.from_megatron import MegatronInput, megatron_input
from neox_epoch.plan.planner import Plan, make_plan
from neox_epoch.resume.exposure import megatron_exposures
from neox_epoch.resume.model import (
    NewRun,
    OldRun,
    ResumeCheck,
    SavedBuild,
    SourceExposure,
    blend_findings,
    build_findings,
    deltas,
    split_samples,
    train_builds,
    valid_sources,
)
from neox_epoch.semantics import megatron_lm as megatron_lm_sem
from neox_epoch.semantics.loader import LoaderShape, ResumeStart, ValidStart, end_test, evaluations_after

#: Megatron-LM flags that let OptimizerParamScheduler take a checkpoint saved with another schedule
SCHEDULER_FLAGS = ("override_opt_param_scheduler", "use_checkpoint_opt_param_scheduler")


def argv_from_args(saved: dict[str, Any], version: str | None = None) -> list[str]:
    """The command line whose plan is the saved run's: each planning flag of Megatron-LM ``version``'s table
    (:func:`neox_epoch.semantics.megatron_lm.rules_for`) whose saved value is not its default (validate_args' own
    fills, e.g. the global batch, are equivalent when given; not with a step schedule, which refuses a given
    global batch); the saved world size."""
    out: list[str] = []
    for spec in flag_table(megatron_lm_sem.rules_for(version).version)["options"]:
        dest, value = spec["dest"], saved.get(spec["dest"])
        if (
            dest not in PLAN_DESTS
            or value is None
            or value == spec["default"]
            or (dest == "encoder_seq_length" and saved.get("seq_length"))
            or (dest == "train_iters" and saved.get("train_samples"))
            or (  # update_train_iters filled it in
                dest == "global_batch_size" and saved.get("step_batch_size_schedule")
            )
        ):
            continue
        flag = next(o for o in spec["options"] if o.startswith("--") and not o.startswith("--no-"))
        if spec["action"] in ("store_true", "store_false"):
            out.append(flag)
        elif spec["action"] == "boolean_optional":
            out.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, (list, tuple)) and spec["nargs"] is None:  # a string validate_args split (phases)
            out += [flag, ",".join(str(v) for v in value)]
        elif isinstance(value, (list, tuple)):
            out += [flag, *(str(v) for v in value)]
        else:
            out += [flag, str(value)]
    return [*out, "--world-size", str(saved.get("world_size") or 1)]


def _new_run(mi: MegatronInput, plan: Plan, lr_follows: bool) -> NewRun:
    args, run = mi.args, mi.run
    train = [s for s in plan.sources if s.split == "train"]
    blends = [b for b in plan.blends if b.split == "train"]
    weights = tuple(float(w) for w in (blends[0].weights or ())) if blends and blends[0].weights else None
    blended = len(train) > 1 or weights is not None
    builds = train_builds(train, blended, separation=True)
    length = split_samples(plan, "train")
    shape = LoaderShape(
        args.micro_batch_size,
        args.data_parallel_size,
        run.global_batch_size // (args.micro_batch_size * args.data_parallel_size),
    )
    return NewRun(
        shape, plan, tuple(s.name for s in train), weights if blended else None, builds, length, False, lr_follows
    )


def _saved(ckpt: Checkpoint, version: str) -> tuple[MegatronInput | None, str]:
    """The saved run planned from its args, or why not (a note)."""
    try:
        return megatron_input(argv_from_args(ckpt.values, version), version), "the args saved in the checkpoint"
    except NeoxEpochError as err:
        return None, f"the args saved in the checkpoint do not plan ({err}): the saved build is not compared"


def _end_findings(consumed: int, new: NewRun, mi: MegatronInput, iteration: int) -> list[str]:
    """What the new run's length does with the samples left: Megatron-LM's sampler and its loop bound."""
    left = max(0, mi.run.train_iters - iteration)
    if consumed >= new.dataset_samples:
        return [
            f"no-samples-left: {consumed} samples consumed and the new train dataset has {new.dataset_samples}: "
            "Megatron-LM's sampler asserts 'no samples left to consume' (ask for more samples: --train-iters or "
            "--train-samples)"
        ]
    if consumed + left * new.shape.train_batch_size > new.dataset_samples:
        return [
            f"runs-out: {left} iterations of {new.shape.train_batch_size} from sample {consumed} need "
            f"{consumed + left * new.shape.train_batch_size} samples and the new train dataset has "
            f"{new.dataset_samples}: the data loader ends before train_iters {mi.run.train_iters} (with "
            "--dataloader-type single the next batch raises StopIteration; ask for the samples the run draws)"
        ]
    return []


def valid_start(
    saved_args: dict[str, Any],
    iteration: int,
    mi: MegatronInput,
    plan: Plan,
) -> tuple[ValidStart | None, list[str]]:
    """Megatron-LM's validation loader at the resume: ``consumed_valid_samples`` from the checkpoint's args (each
    evaluation added ``eval_iters x global_batch_size``; 0 with ``iteration > 0``: recomputed with the new args as
    ``iteration // eval_interval * eval_iters * global_batch_size``), where its sampler starts unless
    --full-validation or --skip-train start it at 0. Findings when the sampler refuses the start or the evaluations
    until the end (every eval_interval, and one after the last iteration) need more samples than the new dataset
    has. (None, []) without evaluation or a validation dataset."""
    args, run = mi.args, mi.run
    length = split_samples(plan, "valid")
    if not args.eval_iters or length < 1 or args.skip_train:
        return None, []
    drawn = int(saved_args.get("consumed_valid_samples") or 0)
    how = f"drawn = consumed_valid_samples = {drawn} (the args saved in the checkpoint)"
    consumed = drawn
    if drawn == 0 and iteration > 0 and not args.train_samples and args.eval_interval:
        consumed, line = recomputed_valid(args, run.global_batch_size, iteration)
        how += f"; none counted, so Megatron-LM {args.megatron_lm_version} recomputes it with the new args: {line}"
    start = 0 if args.full_validation else consumed
    how += f"; start = {'0 (--full-validation)' if args.full_validation else 'consumed_valid_samples'} = {start}"
    if start >= length:
        return ValidStart(drawn, start, drawn, how), [
            f"valid-no-samples-left: the validation loader starts at sample {start} of a validation dataset of "
            f"{length}: Megatron-LM's sampler asserts 'no samples left to consume' at the data build (ask for more "
            "validation samples: --eval-iters, --eval-interval, --train-iters)"
        ]
    interval = args.eval_interval or 0
    evaluations = evaluations_after(iteration, run.train_iters, interval)
    if args.start_eval_at_iter is not None:  # 0.19.2: the loop evaluates from start_eval_at_iter on
        evaluations -= evaluations_after(iteration, max(iteration, args.start_eval_at_iter - 1), interval) - 1
    eval_gbs = args.eval_global_batch_size or run.global_batch_size
    loader = (args.eval_micro_batch_size or args.micro_batch_size) * args.data_parallel_size
    needed = evaluations * args.eval_iters * (eval_gbs // loader)
    # per source: the blend positions of the saved run's draws, the resumed run's (whole batches while they last)
    # and as many continuing after the saved run's (not with --full-validation: every evaluation reads it all)
    ahead = [min(needed, max(0, length - at) // loader) * loader for at in (start, drawn)]
    windows = (((0, drawn, 1),), ((start, start + ahead[0], 1),), ((drawn, drawn + ahead[1], 1),))
    sources = () if args.full_validation else valid_sources(plan, windows)
    valid = ValidStart(drawn, start, drawn, how, sources)
    if args.full_validation or needed <= (length - start) // loader:
        return valid, []
    return valid, [
        f"valid-runs-out: {evaluations} evaluations after the resume (every {interval} iterations to "
        f"{run.train_iters}, and one at the end) draw {needed} batches of {loader} from sample {start}; the "
        f"validation dataset has {length} samples: its loader ends (StopIteration) before the last evaluation"
    ]


def override_iteration(mi: MegatronInput, saved_gbs: int, saved_consumed: int) -> tuple[int, int, str, list[str]]:
    """--override-ckpt-iteration K (0.19.2, megatron/training/checkpointing.py:load_checkpoint): the resume starts
    at iteration K with consumed_train_samples = K x the current global batch; when the checkpoint's global batch
    differs, load_checkpoint raises RuntimeError (a finding). (iteration, consumed, how, findings)."""
    k, g, v = mi.args.override_ckpt_iteration or 0, mi.args.global_batch_size, mi.args.megatron_lm_version
    consumed = k * g
    how = (
        f"consumed = override_ckpt_iteration * global_batch_size = {k} * {g} = {consumed} (--override-ckpt-iteration: "
        f"Megatron-LM {v}'s load_checkpoint replaces the saved iteration and consumed_train_samples {saved_consumed})"
    )
    if saved_gbs == g:
        return k, consumed, how, []
    return (
        k,
        consumed,
        how,
        [
            f"override-refused: --override-ckpt-iteration {k}: Megatron-LM {v}'s load_checkpoint raises RuntimeError "
            f"(checkpoint global_batch_size ({saved_gbs}) != current global_batch_size ({g}): it would recompute "
            f"consumed_train_samples as {k} * {g} = {consumed} and replay the data loader from the wrong "
            "sample offset); "
            f"resume with the checkpoint's global batch {saved_gbs}, or without --override-ckpt-iteration"
        ],
    )


def recomputed_valid(args: MegatronArgs, global_batch_size: int, iteration: int) -> tuple[int, str]:
    """The consumed_valid_samples build_train_valid_test_data_loaders recomputes when the checkpoint counts none
    (megatron/training/training.py): iteration // eval_interval * eval_iters * global batch (0.16.1); 0.19.2
    subtracts the evaluations --start-eval-at-iter skipped (at least 0) and counts the evaluation batch."""
    interval, iters = args.eval_interval or 1, args.eval_iters
    if not args.rules.eval_batch:
        value = iteration // interval * iters * global_batch_size
        return value, (
            f"iteration // eval_interval * eval_iters * global_batch_size = {iteration} // {interval} * "
            f"{iters} * {global_batch_size} = {value}"
        )
    start = args.start_eval_at_iter or 0
    eval_gbs = args.eval_global_batch_size or global_batch_size
    value = max(0, iteration // interval - start // interval) * iters * eval_gbs
    return value, (
        f"max(0, iteration // eval_interval - start_eval_at_iter // eval_interval) * eval_iters * "
        f"eval_global_batch_size = max(0, {iteration} // {interval} - {start} // {interval}) * {iters} * "
        f"{eval_gbs} = {value}"
    )


def _scheduler_findings(old: MegatronInput, new: MegatronInput) -> list[str]:
    """OptimizerParamScheduler.load_state_dict: each value the checkpoint holds must equal the new one."""
    same = (old.args.lr, old.args.min_lr, old.args.lr_decay_style) == (
        new.args.lr,
        new.args.min_lr,
        new.args.lr_decay_style,
    )
    if same and old.run.scheduler == new.run.scheduler:
        return []
    return [
        f"lr-schedule: the learning-rate schedule changes ({old.run.scheduler} -> {new.run.scheduler}): "
        "Megatron-LM's OptimizerParamScheduler refuses the checkpoint ('class input value ... do not match') "
        "unless --override-opt_param-scheduler or --use-checkpoint-opt_param-scheduler is given"
    ]


def check(ckpt: Checkpoint, argv: Sequence[str], version: str, exposure: bool = False) -> ResumeCheck:
    """resume-check of a Megatron-LM checkpoint resumed with the command line ``argv``."""
    saved_args, it = ckpt.values, ckpt.iteration
    gbs = saved_args.get("global_batch_size")
    if not isinstance(gbs, int) or gbs < 1:
        raise ConfigError(
            f"{ckpt.directory}: the saved args have global_batch_size {gbs!r}, expected a whole number "
            ">= 1; not a Megatron-LM training checkpoint"
        )
    consumed = int(saved_args.get("consumed_train_samples") or 0)
    how = f"consumed = consumed_train_samples = {consumed} (the args saved in the checkpoint)"
    if consumed == 0 and it > 0 and not saved_args.get("train_samples"):
        consumed, how = it * gbs, f"consumed = iteration * global_batch_size = {it} * {gbs} = {it * gbs} (none saved)"
    new_mi = megatron_input(list(argv), version)
    if new_mi.args.phase_transition_iterations and new_mi.args.train_samples:
        return phase_check(ckpt, list(argv), version, new_mi, it, consumed, how)
    overridden: list[str] = []
    if new_mi.args.override_ckpt_iteration is not None:
        it, consumed, how, overridden = override_iteration(new_mi, gbs, consumed)
    follows = any(bool(t.lstrip("-").replace("-", "_") in SCHEDULER_FLAGS) for t in argv)
    new = _new_run(new_mi, make_plan(new_mi.inp), follows)
    old_mi, source = _saved(ckpt, version)
    saved, old_plan = None, None
    if old_mi is not None:
        old_plan = _new_run(old_mi, make_plan(old_mi.inp), False)
        saved = SavedBuild(old_plan.plan.seq_length, old_plan.weights, old_plan.builds, source, separation=True)
    start = ResumeStart(
        consumed,
        consumed,
        f"start = consumed_train_samples = {consumed} (Megatron-LM's pretraining "
        "sampler starts there, whatever the batch)",
    )
    old = OldRun(ckpt, gbs, consumed, how, None)
    findings = overridden + build_findings(old, saved, new) + _end_findings(consumed, new, new_mi, it)
    left = max(0, new_mi.run.train_iters - it)
    findings += blend_findings(new, saved, consumed, start, left)
    valid, valid_findings = valid_start(saved_args, it, new_mi, new.plan)
    findings += valid_findings + data_findings(ckpt, it, new.plan, new_mi.inp.seed)
    if old_mi is not None and not follows:
        findings += _scheduler_findings(old_mi, new_mi)
    notes = [source if old_mi is None else f"the saved run's build from {source}"]
    if new_mi.args.rampup_batch_size is not None:
        notes.append("--rampup-batch-size: the samples drawn after the resume are counted at the final global batch")
    if new_mi.args.step_batch_size_schedule is not None:
        notes.append(
            f"--step-batch-size-schedule: the samples drawn after the resume are counted at the global batch "
            f"{new_mi.args.global_batch_size} (micro x dp), not the schedule's batches"
        )
    sources = deltas(new, saved, consumed, start, left)
    found: tuple[SourceExposure, ...] = ()
    if exposure and old_plan is not None and old_mi is not None and len(old_plan.names) == len(new.names):
        found = megatron_exposures(
            new,
            [s for s in old_plan.plan.sources if s.split == "train"],
            old_plan.plan.seq_length,
            old_mi.inp.seed,
            sources,
            int(new_mi.inp.mcore.add_extra_token_to_sequence),
        )
    elif exposure:
        notes.append("exposure not computed: the saved run's args do not plan, or its blend has other sources")
    return ResumeCheck(
        old,
        new,
        start,
        "Megatron-LM",
        sources,
        tuple(findings),
        tuple(notes),
        consumed,
        semantics=f"Megatron-LM {new_mi.args.megatron_lm_version}",
        valid=valid,
        test=end_test(
            new_mi.args.eval_iters, new_mi.run.global_batch_size, split_samples(new.plan, "test"), "Megatron-LM"
        ),
        exposures=found,
    )


def data_findings(ckpt: Checkpoint, iteration: int, plan: Plan, seed: int | None) -> list[str]:
    """A checkpoint saved under ``neox-epoch launch`` (``neox_epoch_state.json`` in its iteration directory): its
    data fingerprint against the resumed line's train data; one finding naming what changed."""
    import os

    from neox_epoch.formats.fingerprint import DataFingerprint, compare, fingerprint, message
    from neox_epoch.megatron_lm import state_file

    roots = [ckpt.directory, os.path.dirname(os.path.normpath(ckpt.directory))]
    state = next((st for st in (state_file.read(r, iteration) for r in roots) if st is not None), None)
    saved = state.get("fingerprint") if state else None
    if not isinstance(saved, dict):
        return []
    old = DataFingerprint.from_dict(saved)
    prefixes = [s.prefix for s in plan.sources if s.split == "train"]
    new = fingerprint(prefixes, int(plan.seq_length), int(seed if seed is not None else old.seed), old.stages)
    diffs = compare(old, new)
    return [f"{state_file.STATE_NAME}: {message(diffs)}; the resumed run would train on other data"] if diffs else []


# ------------------------------------------------------------------------------------------------ phases


def phase_check(
    ckpt: Checkpoint, argv: list[str], version: str, new_mi: MegatronInput, it: int, consumed: int, how: str
) -> ResumeCheck:
    """A resume with --phase-transition-iterations (Megatron-LM 0.19, docs/stages-research.md): the launch builds
    the current phase's train dataset only and starts its loader at ``(iteration - last transition) x global
    batch``, not at consumed_train_samples. Entering a new phase, each source starts at its sample 0: findings name
    the samples of each source that the phase trains again (an earlier phase's first ones, same order) and those
    no phase has reached; each earlier phase is planned with the command line saved in the checkpoint it wrote at
    its end (:func:`_earlier_lines`)."""
    from neox_epoch.plan.phases import phase_input, plan_phases

    g = new_mi.run.global_batch_size
    transitions = list(new_mi.args.phase_transition_iterations or ())
    bounds = [0, *transitions, int(new_mi.args.train_samples or 0) // g]
    first = max(b for b in bounds[:-1] if b <= it)
    end = min((b for b in bounds[1:] if b > it), default=bounds[-1])
    number = bounds.index(first) + 1
    pmi = phase_input(new_mi, first, end)
    plan = make_plan(pmi.inp)
    follows = any(bool(t.lstrip("-").replace("-", "_") in SCHEDULER_FLAGS) for t in argv)
    new = _new_run(pmi, plan, follows)
    at = (it - first) * g
    requested = int(pmi.inp.mcore.num_samples[0] or 0) if pmi.inp.mcore.num_samples else 0
    start = ResumeStart(
        at,
        at,
        f"start = (iteration - last transition) * global_batch_size = ({it} - {first}) * {g} = "
        f"{at} in phase {number}'s own train dataset ({requested} samples asked of the builder), "
        f"not consumed_train_samples {consumed} (Megatron-LM "
        f"{new_mi.args.megatron_lm_version}, --phase-transition-iterations)",
    )
    old = OldRun(ckpt, g, consumed, how, None)
    notes = [
        f"phase {number} of {len(bounds) - 1}: iterations {first}..{end - 1}; this launch saves and exits at "
        f"iteration {end}"
        if end < bounds[-1]
        else f"phase {number} of {len(bounds) - 1}: iterations {first}..{end - 1}, the last phase"
    ]
    findings: list[str] = []
    if number > 1 and it == first:
        found, more = _phase_entry(ckpt, argv, version, bounds, number, plan_phases)
        findings += found
        notes += more
    elif it != first:
        notes.append(
            f"a resume inside phase {number}: Megatron-LM rebuilds the phase's whole dataset and starts at "
            f"its sample {at}; with the command line the phase started with, it continues exactly"
        )
    valid, valid_findings = valid_start(ckpt.values, it, new_mi, new.plan)
    return ResumeCheck(
        old,
        new,
        start,
        "Megatron-LM",
        (),
        tuple(findings + valid_findings),
        tuple(notes),
        consumed,
        semantics=f"Megatron-LM {new_mi.args.megatron_lm_version}",
        valid=valid,
        test=end_test(new_mi.args.eval_iters, g, split_samples(new.plan, "test"), "Megatron-LM"),
    )


def _earlier_lines(
    ckpt: Checkpoint,
    version: str,
    bounds: list[int],
    number: int,
) -> tuple[list[str], dict[int, list[str]], list[str]]:
    """Phase k's command line (k < number) is the saved args of the checkpoint phase k saved at its end,
    ``iter_{bounds[k]}`` beside this one (this one for phase number - 1); a phase whose checkpoint is gone is
    planned with the next line found. (phase 1's line, the later phases' lines, notes)."""
    import os

    from neox_epoch.formats.checkpoint import read_checkpoint

    save, lines, gone = os.path.dirname(os.path.normpath(ckpt.directory)), {}, []
    for k in range(1, number - 1):
        tag = os.path.join(save, f"iter_{bounds[k]:07d}")
        if os.path.isdir(tag):
            lines[k] = argv_from_args(read_checkpoint(tag).values, version)
        else:
            gone.append(f"phase {k}'s (iter_{bounds[k]:07d})")
    lines[number - 1] = argv_from_args(ckpt.values, version)
    base = lines[min(lines)]
    read = ", ".join(f"phase {k}: iter_{bounds[k]:07d}" for k in sorted(lines))
    head = "phase 1" if number == 2 else f"phases 1..{number - 1}"
    notes = [
        f"{head} planned with the command line each was launched with, as the checkpoint it "
        f"saved at its end keeps it ({read})"
    ]
    if gone:
        notes.append(
            f"not supported: the command line of a phase whose checkpoint is gone ({', '.join(gone)}): "
            "that phase is planned with the next phase's, so one launched with other data flags is not "
            "compared"
        )
    return base, {k: v for k, v in lines.items() if k > min(lines)}, notes


def _phase_entry(
    ckpt: Checkpoint, argv: list[str], version: str, bounds: list[int], number: int, plan_phases: Any
) -> tuple[list[str], list[str]]:
    """(findings, notes) for a launch entering phase ``number``: per source, what it trains again and never reaches."""
    base, groups, earlier = _earlier_lines(ckpt, version, bounds, number)
    try:
        pp = plan_phases(base, {**groups, number: argv}, version)
    except NeoxEpochError as err:
        return [], [
            f"the phases before {number} are not compared: the checkpoint's saved args do not plan as a "
            f"phased run ({err})"
        ]
    from neox_epoch.plan.phases import source_line

    notes = earlier
    notes += [f"phase {number}: {source_line(s)}" for s in pp.phases[number - 1].sources]
    findings: list[str] = []
    upto = pp.phases[:number]
    for s in pp.phases[number - 1].sources:
        n = s.samples_per_epoch
        done, at = divmod(s.earlier_draws, n)
        if s.again and at:
            findings.append(
                f"phase-repeat: {s.name}: phase {number} trains {s.again} of its {s.draws} draws again: phase "
                f"{s.again_phase}'s first {s.again} samples, in the same order (same --seed, documents and epochs "
                f"built; Megatron-LM starts each phase at its sample 0); a continuation would start at its draw "
                f"{s.earlier_draws} (pass {done + 1}, sample {at})"
            )
        elif s.other_order and at:
            findings.append(
                f"phase-reorder: {s.name}: phase {number} draws it in another order than the earlier phases (seed or "
                f"epochs built differ): its {s.draws} draws overlap the {at} samples of pass {done + 1} already "
                "trained at random, not a continuation"
            )
        rows = [r for ph in upto for r in ph.sources if r.name == s.name and r.draws]
        if (
            len(rows) > 1
            and len({r.order for r in rows}) == 1
            and all(r.draws <= n and r.epochs_built == 1 for r in rows)
        ):
            never = n - max(r.draws for r in rows)
            if never and at:
                findings.append(
                    f"phase-never: {s.name}: after phase {number}, {never} of its {n} samples are "
                    f"trained by no phase (each drew its first {max(r.draws for r in rows)} at most)"
                )
    return findings, notes
