"""Megatron-LM phases (``--phase-transition-iterations``): what each phase builds and trains, per source.

What Megatron-LM (core_v0.19.0 / megatron-core 0.19.2, docs/stages-research.md) does, mirrored here:

* a launch at ``iteration`` asks the builder for the current phase's samples only
  (``get_train_valid_test_num_samples``: the next transition's sample minus the last one's,
  :func:`neox_epoch.semantics.megatron_lm.get_train_valid_test_num_samples` with ``iteration``);
* its data loader starts at ``(iteration - last transition) * global_batch_size``: a phase entered at its
  transition starts at its sample 0, and its blend draws each source's samples 0, 1, 2, ... of that source's
  GPTDataset;
* a source's order depends on the seed (one ``--seed`` for every source), its documents, the sequence length
  and the epochs built (with the final-epoch separation): a phase that builds a source with the same ones as
  an earlier phase draws the samples that phase drew first, in the same order.

:func:`plan_phases` plans every phase with megatron-core's builder semantics
(:func:`neox_epoch.plan.planner.make_plan`) and says per source which draws an earlier phase already trained and
where a continuation would have started. :func:`exact_phases` gives per phase the flags that make each source
continue, where the real builder allows it: whole passes in every phase but a source's last.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from neox_epoch.errors import ConfigError, PlanError
from neox_epoch.plan.exact import exact_plan
from neox_epoch.plan.from_megatron import MegatronInput, exact_flags, megatron_input, without
from neox_epoch.plan.model import Plan, SourcePlan
from neox_epoch.plan.phase_options import DECAY_OPTIONS as DECAY_OPTIONS  # re-exported: plan/cli.py's ph.*
from neox_epoch.plan.phase_options import (
    ExactPhase,
    _check_whole,
    _check_whole_batches,
    _phase_targets,
    phases_lr_schedule,
)
from neox_epoch.plan.phase_options import phase_decay as phase_decay
from neox_epoch.plan.phase_options import phase_targets as phase_targets
from neox_epoch.plan.planner import make_plan
from neox_epoch.semantics import megatron_lm as megatron_lm_sem

#: the option that starts a phase's own flags in ``neox-epoch plan``
PHASE_OPTION = "--phase"
#: neox-epoch's exact-mode options inside a ``--phase K`` group (that phase's passes)
TARGET_OPTIONS = ("--epochs", "--source-epochs")


@dataclass(frozen=True)
class PhaseSource:
    """One source in one phase: what the phase draws and how it relates to earlier phases."""

    name: str
    prefix: str
    samples_per_epoch: int
    draws: int
    """Samples of this source the phase trains: positions 0 .. draws-1 of the phase's order of it."""
    epochs_built: int
    separate_final_epoch: bool
    order: tuple[object, ...]
    """What the source's order depends on (prefix, documents, seq_length, seed, epochs built, separation)."""
    earlier_draws: int
    """Draws of this source by earlier phases: where a continuation would start."""
    again: int
    """Of ``draws``, the samples an earlier phase with the same order already trained (its first ones)."""
    again_phase: int | None
    """The earlier phase (1-based) whose order this phase repeats (the one that drew the most of it)."""
    other_order: bool
    """An earlier phase drew this source in another order (another seed or epochs built): the overlap with
    what it trained is random, not a continuation."""


@dataclass(frozen=True)
class Phase:
    """One phase: its iterations, the builder's train request, and per source its draws."""

    number: int
    first_iteration: int
    end_iteration: int
    samples: int
    """Samples the phase trains ((end - first) x global batch)."""
    requested: int
    """Train samples Megatron-LM asks the builder for when this phase's launch starts at its first iteration."""
    loader_start: int
    """The data loader's first sample in the phase's dataset ((iteration - last transition) x global batch = 0)."""
    argv: tuple[str, ...]
    plan: Plan
    sources: tuple[PhaseSource, ...]


@dataclass(frozen=True)
class PhasesPlan:
    """Every phase of a phased Megatron-LM run."""

    transitions: tuple[int, ...]
    global_batch_size: int
    train_samples: int
    phases: tuple[Phase, ...]
    version: str

    def never_reached(self) -> dict[str, int | None]:
        """Per source (by prefix name), samples of one epoch no phase trains; None when phases drew it in other
        orders or past one epoch (not countable from the draw counts)."""
        out: dict[str, int | None] = {}
        seen: dict[str, list[PhaseSource]] = {}
        for ph in self.phases:
            for s in ph.sources:
                if s.draws:
                    seen.setdefault(s.name, []).append(s)
        for name, rows in seen.items():
            if len(rows) == 1 and (rows[0].epochs_built > 1 or rows[0].draws > rows[0].samples_per_epoch):
                continue  # one phase, more than one epoch: its plan's tokens unseen say it
            orders = {r.order for r in rows}
            if len(orders) > 1 or any(r.epochs_built > 1 or r.draws > r.samples_per_epoch for r in rows):
                out[name] = None
            else:
                out[name] = max(0, rows[0].samples_per_epoch - max(r.draws for r in rows))
        return out


def split_phase_groups(argv: Sequence[str]) -> tuple[list[str], dict[int, list[str]]]:
    """``plan`` tokens -> (the base line, {phase: its own tokens}); ``--phase K`` groups run to the next one."""
    if PHASE_OPTION not in argv:
        return list(argv), {}
    first = list(argv).index(PHASE_OPTION)
    base, groups = list(argv[:first]), {}
    rest = list(argv[first:])
    while rest:
        if len(rest) < 2 or not rest[1].isdigit() or int(rest[1]) < 1:
            raise ConfigError(
                f"--phase {rest[1] if len(rest) > 1 else ''}: expected --phase K (K = 1, 2, ...) followed by "
                "that phase's flags, e.g. --phase 2 --data-path 1 data/code"
            )
        k = int(rest[1])
        end = next((i for i in range(2, len(rest)) if rest[i] == PHASE_OPTION), len(rest))
        if k in groups:
            raise ConfigError(f"--phase {k}: given twice; give each phase's flags in one --phase {k} group")
        groups[k] = rest[2:end]
        rest = rest[end:]
    return base, groups


def _flags_of(tokens: Sequence[str]) -> list[str]:
    return [t.partition("=")[0] for t in tokens if t.startswith("--")]


def phase_lines(base: Sequence[str], groups: Mapping[int, Sequence[str]], count: int) -> list[list[str]]:
    """Each phase's command line: the previous phase's with the phase's own flags replacing the same flags."""
    for k in groups:
        if k > count:
            raise ConfigError(
                f"--phase {k}: the run has {count} phases (--phase-transition-iterations gives "
                f"{count - 1} transitions); give --phase 1 .. --phase {count}"
            )
    lines: list[list[str]] = []
    line = list(base)
    for k in range(1, count + 1):
        own = list(groups.get(k, ()))
        if own:
            replaced = _flags_of(own)
            if "--data-path" in replaced or "--train-data-path" in replaced:
                replaced += ["--data-path", "--train-data-path", "--valid-data-path", "--test-data-path"]
            line = without(line, replaced) + own
        lines.append(list(line))
    return lines


def _order(sp: SourcePlan, mi: MegatronInput) -> tuple[object, ...]:
    a = mi.args
    return (
        os.path.abspath(sp.prefix),
        tuple(sp.document_range),
        a.seq_length,
        a.seed,
        sp.epochs_built,
        sp.separate_final_epoch,
        a.split if not mi.inp.per_split_paths else None,
    )


def phase_input(mi: MegatronInput, first: int, end: int) -> MegatronInput:
    """The phase's plan input: the builder asked what Megatron-LM asks at ``first``, the phase trains its samples."""
    a, run = mi.args, mi.run
    g = run.global_batch_size
    train, valid, test = megatron_lm_sem.get_train_valid_test_num_samples(
        run.train_iters,
        a.train_samples,
        g,
        a.eval_interval,
        a.eval_iters,
        a.full_validation,
        a.skip_train,
        a.phase_transition_iterations,
        first,
        a.eval_global_batch_size,
        a.start_eval_at_iter,
    )
    samples = (end - first) * g
    mcore = replace(
        mi.inp.mcore,
        num_samples=(train, valid, test),
        train_consumed=samples,
        arithmetic=(
            f"Megatron-LM {a.megatron_lm_version} (get_train_valid_test_num_samples at iteration "
            f"{first}): train samples requested = the phase's own = {train}",
            f"the phase trains iterations {first}..{end - 1}: {end - first} x {g} = {samples} "
            "samples, from its dataset's sample 0",
        ),
    )
    inp = replace(mi.inp, train_iters=end - first, mcore=mcore)
    return replace(mi, inp=inp)


def _check_same(lines: Sequence[MegatronInput]) -> None:
    """Every phase's launch must carry the same transitions, global batch and train samples."""
    first = lines[0]
    for k, mi in enumerate(lines[1:], start=2):
        for what, a, b, flag in (
            (
                "--phase-transition-iterations",
                first.args.phase_transition_iterations,
                mi.args.phase_transition_iterations,
                "--phase-transition-iterations",
            ),
            ("global batch", first.run.global_batch_size, mi.run.global_batch_size, "--global-batch-size"),
            ("--train-samples", first.args.train_samples, mi.args.train_samples, "--train-samples"),
        ):
            if a != b:
                raise ConfigError(
                    f"--phase {k}: {what} {b} differs from phase 1's {a}; Megatron-LM's phases need the "
                    f"same {flag} in every launch (the global batch is checked on load): drop {flag} "
                    f"from --phase {k}"
                )


def plan_phases(base: Sequence[str], groups: Mapping[int, Sequence[str]], version: str) -> PhasesPlan:
    """Plan every phase of a phased Megatron-LM command line (``base`` = phase 1's flags, ``groups`` = each
    later phase's own flags)."""
    first = megatron_input(base, version)
    transitions = first.args.phase_transition_iterations
    if not transitions:
        raise ConfigError(
            "--phase: goes with --phase-transition-iterations T1,T2,... (the iterations where "
            "Megatron-LM saves, exits and the next phase's launch resumes)"
        )
    if first.args.train_samples is None:
        raise ConfigError(
            f"--phase-transition-iterations {','.join(map(str, transitions))}: Megatron-LM "
            f"{first.args.megatron_lm_version} raises TypeError ('<=' not supported between instances of 'NoneType' "
            "and 'int') in get_train_valid_test_num_samples with --train-iters: the phase bounds end with "
            "train_samples; give --train-samples N (iterations x global batch) instead of --train-iters"
        )
    lines = [first] + [megatron_input(argv, version) for argv in phase_lines(base, groups, len(transitions) + 1)[1:]]
    _check_same(lines)
    g, total = first.run.global_batch_size, int(first.args.train_samples)
    bounds = [0, *transitions, total // g]
    if any(b >= bounds[-1] for b in transitions) or len(set(bounds)) != len(bounds):
        raise ConfigError(
            f"--phase-transition-iterations {','.join(map(str, transitions))}: expected distinct "
            f"iterations inside the run (train_samples {total} // global batch {g} = {bounds[-1]} "
            "iterations)"
        )
    argvs = phase_lines(base, groups, len(transitions) + 1)
    phases: list[Phase] = []
    drawn: dict[str, list[PhaseSource]] = {}
    for k, mi in enumerate(lines):
        start, end = bounds[k], bounds[k + 1]
        pmi = phase_input(mi, start, end)
        plan = make_plan(pmi.inp)
        rows = []
        for sp in (s for s in plan.sources if s.split == "train"):
            order = _order(sp, pmi)
            before = drawn.get(sp.name, [])
            same = [r for r in before if r.order == order]
            best = max(same, key=lambda r: r.draws, default=None)
            again = min(sp.samples_drawn, best.draws) if best is not None else 0
            row = PhaseSource(
                name=sp.name,
                prefix=sp.prefix,
                samples_per_epoch=sp.samples_per_epoch,
                draws=sp.samples_drawn,
                epochs_built=sp.epochs_built,
                separate_final_epoch=sp.separate_final_epoch,
                order=order,
                earlier_draws=sum(r.draws for r in before),
                again=again,
                again_phase=_phase_of(phases, best) if best is not None else None,
                other_order=any(r.order != order for r in before if r.draws),
            )
            rows.append(row)
        for row in rows:
            drawn.setdefault(row.name, []).append(row)
        phases.append(
            Phase(
                k + 1,
                start,
                end,
                (end - start) * g,
                int((pmi.inp.mcore.num_samples or (0,))[0] or 0),
                0,
                tuple(argvs[k]),
                plan,
                tuple(rows),
            )
        )
    return PhasesPlan(tuple(transitions), g, total, tuple(phases), version)


def _phase_of(phases: Sequence[Phase], row: PhaseSource) -> int | None:
    for ph in phases:
        if any(r is row for r in ph.sources):
            return ph.number
    return None


# ----------------------------------------------------------------------------------------------------------
# rendering


def phase_report(pp: PhasesPlan) -> list[str]:
    """Per phase: its iterations, the builder's request, where the loader starts, and per source what it
    trains again / where a continuation would start; then what no phase reaches."""
    out = [
        f"Megatron-LM phases (--phase-transition-iterations {','.join(map(str, pp.transitions))}, train_samples "
        f"{pp.train_samples}, global batch {pp.global_batch_size}): each phase's launch asks the builder for that "
        "phase's samples only and starts its data loader at the phase's sample 0; one --seed for every source"
    ]
    for ph in pp.phases:
        out.append(
            f"phase {ph.number}: iterations {ph.first_iteration}..{ph.end_iteration - 1} ({ph.samples} samples); "
            f"builder asked for {ph.requested} train samples; loader starts at sample {ph.loader_start}"
        )
        for s in ph.sources:
            out.append("  " + source_line(s))
    missing = {n: v for n, v in pp.never_reached().items()}
    for name, never in missing.items():
        if never is None:
            out.append(
                f"{name}: drawn in other orders (or past one epoch) by different phases: which samples no phase "
                "trains is not countable from the draws (see each phase's tokens unseen)"
            )
        elif never:
            n = next(s.samples_per_epoch for ph in pp.phases for s in ph.sources if s.name == name)
            out.append(f"{name}: {never} of its {n} samples per epoch are never trained by any phase")
    return out


def source_line(s: PhaseSource) -> str:
    """One source of one phase in words."""
    head = (
        f"{s.name}: draws {s.draws} ({s.draws / s.samples_per_epoch:.4g} passes of {s.samples_per_epoch}), "
        f"its samples 0..{max(s.draws - 1, 0)} of {s.epochs_built} epoch(s) built"
    )
    if not s.earlier_draws:
        return head + "; first phase to draw it"
    done, at = divmod(s.earlier_draws, s.samples_per_epoch)
    if at == 0:
        return (
            f"{head}; earlier phases drew exactly {done} whole pass(es), so starting at its sample 0 begins pass "
            f"{done + 1}: a continuation"
        )
    cont = (
        f"a continuation would start at its draw {s.earlier_draws} (pass {done + 1}, sample {at}); Megatron-LM "
        "starts it at its sample 0"
    )
    if s.again:
        new = s.draws - s.again
        return (
            f"{head}; {s.again} of them are phase {s.again_phase}'s first {s.again} samples again, in the same "
            f"order (same seed, documents and epochs built){f', {new} new' if new else ''}; {cont}"
        )
    return (
        f"{head}; another order than the earlier phases' (seed or epochs built differ): what it trains overlaps "
        f"theirs at random; {cont}"
    )


# ----------------------------------------------------------------------------------------------------------
# exact mode (its per-phase options and checks: neox_epoch.plan.phase_options)


def exact_phases(
    base: Sequence[str],
    groups: Mapping[int, Sequence[str]],
    version: str,
    targets: Mapping[int, Mapping[str, float]],
    decay: Mapping[str, int] | None = None,
) -> tuple[list[ExactPhase], PhasesPlan]:
    """Per phase: the exact plan of its ``targets`` (phase -> passes per source, ``{"*": E}`` for every source) and
    the flags to paste into that phase's launch; the phase plan of the lines with those flags (checked: every phase
    draws its targets). ``decay`` (``{"from": K, "until": K}``): the learning-rate decay on those phase boundaries,
    its flags in every phase's (one scheduler, restored from each checkpoint, so the same flags in each)."""
    first = megatron_input(base, version)
    lines = phase_lines(base, groups, len(first.args.phase_transition_iterations or ()) + 1)
    per_phase = _phase_targets(lines, targets, version)
    _check_whole(per_phase)
    out: list[ExactPhase] = []
    g = first.run.global_batch_size
    for k, own in enumerate(per_phase, start=1):
        mi = megatron_input(lines[k - 1], version)
        base_inp = replace(
            mi.inp,
            train_iters=None,
            train_samples=None,
            mcore=replace(mi.inp.mcore, num_samples=None, train_consumed=None, arithmetic=None),
        )
        plan = exact_plan(base_inp, dict(own))
        out.append(ExactPhase(k, plan.train_iters, plan.train_samples, dict(own), plan, ""))
    _check_whole_batches(out, per_phase, g)
    iters = [p.iterations for p in out]
    bounds = [sum(iters[:k]) for k in range(1, len(iters))]
    total = sum(iters) * g
    fixed = f"--train-samples {total} --phase-transition-iterations {','.join(map(str, bounds))}"
    lr_schedule = None
    if decay:
        lr_schedule, lr_flags = phases_lr_schedule(out, decay, first, base)
        fixed += f" {lr_flags}"
    final: list[ExactPhase] = []
    new_groups: dict[int, list[str]] = {}
    for p, mi_line in zip(out, lines):
        mi = megatron_input(mi_line, version)
        data = exact_flags(mi.args, p.plan, {"--train-samples": total})
        flags = f"{fixed} " + data.replace(f"--train-samples {total} ", "", 1)
        final.append(replace(p, flags=flags, lr_schedule=lr_schedule))
        new_groups[p.number] = shlex.split(flags)

    def pasted(k: int) -> list[str]:  # phase k's own line with its flags pasted in (the data flags as a whole)
        replaced = _flags_of(new_groups[k]) + ["--train-iters"]
        if "--data-path" in replaced or "--train-data-path" in replaced:
            replaced += ["--data-path", "--train-data-path"]
        return without(lines[k - 1], replaced) + new_groups[k]

    checked = plan_phases(pasted(1), {k: pasted(k) for k in new_groups if k > 1}, version)
    for p, ph in zip(final, checked.phases):
        want = {s.name: s.samples_drawn for s in p.plan.sources if s.split == "train"}
        got = {s.name: s.draws for s in ph.sources}
        if want != got:
            raise PlanError(
                f"--phase {p.number}: with the flags {p.flags!r} Megatron-LM's phase would draw {got}, not "
                f"{want}; this phase cannot be made exact by flags alone"
            )
    return final, checked


def phases_json(pp: PhasesPlan, exact: Sequence[ExactPhase] = ()) -> dict[str, object]:
    """The JSON of ``plan --json`` for a phased command line (keys in docs/plan.md)."""
    flags = {p.number: p for p in exact}
    return {
        "framework": "megatron-core",
        "framework_version": pp.version,
        "phase_transition_iterations": list(pp.transitions),
        "global_batch_size": pp.global_batch_size,
        "train_samples": pp.train_samples,
        "phases": [
            {
                "phase": ph.number,
                "first_iteration": ph.first_iteration,
                "end_iteration": ph.end_iteration,
                "samples": ph.samples,
                "requested": ph.requested,
                "loader_start": ph.loader_start,
                "sources": [
                    {
                        "name": s.name,
                        "prefix": s.prefix,
                        "samples_per_epoch": s.samples_per_epoch,
                        "draws": s.draws,
                        "epochs_built": s.epochs_built,
                        "separate_final_epoch": s.separate_final_epoch,
                        "earlier_draws": s.earlier_draws,
                        "again": s.again,
                        "again_phase": s.again_phase,
                        "other_order": s.other_order,
                    }
                    for s in ph.sources
                ],
                **(
                    {"targets": flags[ph.number].targets, "megatron_flags": flags[ph.number].flags}
                    if ph.number in flags
                    else {}
                ),
                **(
                    {"lr_schedule": flags[ph.number].lr_schedule.to_json()}  # type: ignore[union-attr]
                    if ph.number in flags and flags[ph.number].lr_schedule is not None
                    else {}
                ),
                "plan": ph.plan.to_json(),
            }
            for ph in pp.phases
        ],
        "never_reached": pp.never_reached(),
    }
