"""Exact mode's per-phase options for Megatron-LM phases (:mod:`neox_epoch.plan.phases`): each phase's passes
(``--epochs`` / ``--source-epochs`` in a ``--phase K`` group), the learning-rate decay on phase boundaries
(``--decay-from-phase`` / ``--decay-until-phase``) and the checks that a phase's targets are drawable when
Megatron-LM starts every phase at each source's sample 0 (whole passes and whole global batches in every phase
but a source's last)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from neox_epoch.errors import ConfigError, PlanError
from neox_epoch.plan.from_megatron import MegatronInput, megatron_input
from neox_epoch.plan.model import Plan
from neox_epoch.plan.stage_schedule import StageSchedule, mcore_stage_schedule
from neox_epoch.plan.stages import StageDecay, StageResult, StagesConfig, StagesPlan


def phase_targets(tokens: Sequence[str]) -> tuple[dict[str, float] | None, list[str]]:
    """A phase group's ``--epochs E`` (as ``{"*": E}``: every source of the phase) or ``--source-epochs NAME=E ...``
    (its passes), and the other tokens."""
    from neox_epoch.plan.from_megatron import is_name_value

    targets: dict[str, float] | None = None
    rest: list[str] = []
    i = 0
    while i < len(tokens):
        flag, eq, inline = tokens[i].partition("=")
        if flag == "--epochs":
            value = inline if eq else (tokens[i + 1] if i + 1 < len(tokens) else "")
            i += 1 if eq else 2
            targets = {"*": _number("--epochs", value)}
            continue
        if flag == "--source-epochs":
            i += 1
            targets = {}
            while i < len(tokens) and is_name_value(tokens[i]):
                name, _, value = tokens[i].rpartition("=")
                targets[name] = _number(f"--source-epochs {tokens[i]}", value)
                i += 1
            continue
        rest.append(tokens[i])
        i += 1
    return targets, rest


def _number(where: str, value: str) -> float:
    try:
        x = float(value)
    except ValueError as err:
        raise ConfigError(f"{where}: {value!r} is not a number; expected passes, e.g. 1") from err
    if not x > 0:
        raise ConfigError(f"{where}: {value}; expected passes > 0")
    return x


@dataclass(frozen=True)
class ExactPhase:
    number: int
    iterations: int
    samples: int
    targets: dict[str, float]
    plan: Plan
    flags: str
    lr_schedule: StageSchedule | None = None
    """With ``--decay-from-phase`` / ``--decay-until-phase``: the one scheduler over every phase (same in each)."""


#: neox-epoch's options placing the learning-rate decay on phase boundaries (exact mode, outside the groups)
DECAY_OPTIONS = ("--decay-from-phase", "--decay-until-phase")


def phase_decay(tokens: Sequence[str]) -> tuple[dict[str, int], list[str]]:
    """``--decay-from-phase K`` / ``--decay-until-phase K`` (``{"from": K, "until": K}``) and the other tokens."""
    out: dict[str, int] = {}
    rest: list[str] = []
    i = 0
    while i < len(tokens):
        flag, eq, inline = tokens[i].partition("=")
        if flag in DECAY_OPTIONS:
            value = inline if eq else (tokens[i + 1] if i + 1 < len(tokens) else "")
            i += 1 if eq else 2
            if not value.isdigit() or int(value) < 1:
                raise ConfigError(f"{flag} {value!r}: expected a phase number (1, 2, ...)")
            out["from" if flag == DECAY_OPTIONS[0] else "until"] = int(value)
            continue
        rest.append(tokens[i])
        i += 1
    return out, rest


def _wsd_style(tokens: Sequence[str]) -> str:
    """The line's --lr-wsd-decay-style (the last one given), else Megatron-LM's default exponential."""
    style = "exponential"
    for i, t in enumerate(tokens):
        flag, eq, inline = t.partition("=")
        if flag == "--lr-wsd-decay-style":
            style = inline if eq else (tokens[i + 1] if i + 1 < len(tokens) else style)
    return style


def phases_lr_schedule(
    out: Sequence[ExactPhase], decay: Mapping[str, int], mi: MegatronInput, tokens: Sequence[str]
) -> tuple[StageSchedule, str]:
    """The one scheduler over the phases with the decay on the asked phase boundaries, and its flags in samples
    (the exact phases run sample-based: --lr-decay-samples, --lr-wsd-decay-samples)."""
    g = mi.run.global_batch_size
    for key, k in decay.items():
        if k > len(out):
            raise ConfigError(f"--decay-{key}-phase {k}: the run has {len(out)} phases; give 1..{len(out)}")
    stages, first = [], 0
    for p in out:
        stages.append(StageResult(f"phase {p.number}", first, p.iterations, p.iterations * g, ()))
        first += p.iterations
    names = [s.name for s in stages]
    sd = StageDecay(
        from_stage=f"phase {decay['from']}" if "from" in decay else None,
        until_stage=f"phase {decay['until']}" if "until" in decay else None,
    )
    try:
        StagesConfig.check_decay(sd, names)
    except ConfigError as err:
        raise ConfigError(f"--decay-from-phase/--decay-until-phase: {err}") from None
    a = mi.args
    sched = mcore_stage_schedule(
        StagesPlan(tuple(stages), g, {}),
        sd,
        style=a.lr_decay_style,
        wsd_style=_wsd_style(tokens),
        warmup_fraction=a.lr_warmup_fraction,
        warmup_samples=a.lr_warmup_samples,
        lr=a.lr,
        min_lr=a.min_lr,
        init_lr=a.lr_warmup_init,
    )
    settings: dict[str, object] = {}
    for key, value in sched.settings.items():
        if key.endswith("-iters"):
            key, value = key[: -len("iters")] + "samples", value * g
        settings[key] = value
    return replace(sched, settings=settings), " ".join(f"{k} {v}" for k, v in settings.items())


def _check_whole(per_phase: Sequence[dict[str, float]]) -> None:
    """Only a source's last phase may draw a fractional pass: Megatron-LM starts every phase at sample 0."""
    last: dict[str, int] = {}
    for k, targets in enumerate(per_phase):
        for name, p in targets.items():
            if p:
                last[name] = k
    for k, targets in enumerate(per_phase):
        for name, p in targets.items():
            if k < last[name] and abs(p - round(p)) > 1e-9:
                raise PlanError(
                    f"--phase {k + 1}: {name}={p:g} passes, and phase {last[name] + 1} draws {name} again: Megatron-LM "
                    f"starts every phase at each source's sample 0 (no flag gives a source an offset), so phase "
                    f"{last[name] + 1} would train {name}'s first samples again and never reach the rest; give "
                    f"{name} whole passes in every phase but its last ({name}={max(1, round(p))}), or draw its "
                    "fractional pass in its last phase"
                )


def _check_whole_batches(out: Sequence[ExactPhase], per_phase: Sequence[dict[str, float]], g: int) -> None:
    """A source drawn again in a later phase must get its whole passes here: a phase whose targets are not whole
    global batches leaves a remainder undrawn, which the next phase (starting at sample 0) never reaches."""
    import math

    totals = []
    for k, p in enumerate(out):
        wanted = {
            s.name: round(p.targets.get(s.name, p.targets.get(s.prefix, 0)) * s.samples_per_epoch)
            for s in p.plan.sources
            if s.split == "train"
        }
        short = [
            (s.name, wanted[s.name], s.samples_drawn)
            for s in p.plan.sources
            if s.split == "train"
            and s.samples_drawn != wanted[s.name]
            and any(per_phase[j].get(s.name) for j in range(k + 1, len(per_phase)))
        ]
        if short:
            totals.append((k, sum(wanted.values()), short))
    if not totals:
        return
    k, total, short = totals[0]
    divisor = math.gcd(*[t for _, t, _ in totals])
    fit = max(d for d in range(1, g + 1) if divisor % d == 0)
    name, want, got = short[0]
    raise PlanError(
        f"--phase {k + 1}: {name} needs {want} samples (its whole passes) but the phase's {total} samples are "
        f"not whole global batches of {g}: it draws {got}, and the next phase that draws {name} restarts at its "
        f"sample 0 and never reaches the rest; use a global batch that divides every such phase's samples "
        f"(--global-batch-size {fit}), or give {name} its last passes in one phase"
    )


def _phase_targets(
    lines: Sequence[Sequence[str]], targets: Mapping[int, Mapping[str, float]], version: str
) -> list[dict[str, float]]:
    """Passes per source for each phase's line (``{"*": E}``: every source of that phase)."""
    per_phase: list[dict[str, float]] = []
    for k in range(1, len(lines) + 1):
        given = targets.get(k)
        if given is None:
            raise ConfigError(
                f"--phase {k}: exact mode needs each phase's passes; add --source-epochs NAME=E ... (or "
                f"--epochs E) to --phase {k}"
            )
        if "*" in given:
            mi = megatron_input(list(lines[k - 1]), version)
            given = {s.label: given["*"] for s in mi.inp.train_sources}
        per_phase.append(dict(given))
    return per_phase
