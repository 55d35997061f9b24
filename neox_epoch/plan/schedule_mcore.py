"""Megatron-LM's learning-rate schedule, checkpoint, evaluation and exit flags when exact mode changes the run's
length (the rules: :mod:`neox_epoch.plan.schedule`'s docstring), and the schedule attached to an exact plan."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from neox_epoch.plan.inputs import PlanWarning
from neox_epoch.plan.model import Plan
from neox_epoch.plan.schedule import (
    FOLLOWS,
    KEPT,
    SCALED,
    WARNED,
    Schedule,
    ScheduleChange,
    eval_changes,
    exact_reason,
    exit_changes,
    run_length_changes,
    scale,
    with_schedule,
)


@dataclass(frozen=True)
class McoreScheduleKeys:
    """The Megatron-LM flags a new run length touches, as given (Megatron-LM's defaults otherwise)."""

    lr_decay_style: str = "linear"
    """--lr-decay-style (constant, linear, cosine, inverse-square-root, WSD)."""
    lr_decay_iters: int | None = None
    """--lr-decay-iters (iteration-based runs); None: train_iters."""
    lr_decay_samples: int | None = None
    """--lr-decay-samples (sample-based runs); None: train_samples."""
    lr_warmup_fraction: float | None = None
    """--lr-warmup-fraction: warmup as a fraction of the decay."""
    lr_warmup_iters: int = 0
    """--lr-warmup-iters: absolute warmup (iteration-based runs)."""
    lr_warmup_samples: int = 0
    """--lr-warmup-samples: absolute warmup (sample-based runs)."""
    lr_wsd_decay_iters: int | None = None
    """--lr-wsd-decay-iters: the WSD annealing phase (iteration-based runs)."""
    lr_wsd_decay_samples: int | None = None
    """--lr-wsd-decay-samples: the WSD annealing phase (sample-based runs)."""
    save_interval: int | None = None
    """--save-interval."""
    eval_interval: int | None = None
    """--eval-interval (None: no evaluation during training)."""
    eval_iters: int = 100
    """--eval-iters (0: no evaluation)."""
    exit_interval: int | None = None
    """--exit-interval."""


# ----------------------------------------------------------------------------------------------------------
# Megatron-LM


def mcore_schedule(
    keys: McoreScheduleKeys,
    old_iters: int | None,
    old_samples: int | None,
    new_iters: int,
    global_batch_size: int,
    reason: str,
    warmup_limit: float = 0.1,
    new_samples: int | None = None,
) -> Schedule:
    """What happens to Megatron-LM's schedule flags when the run goes from ``old_iters`` iterations (or
    ``old_samples`` samples, a sample-based run; both None: not known) to ``new_iters`` iterations
    (``new_samples``: the samples they draw when the batch changes, else new_iters x global batch)."""
    samples = old_samples is not None and old_iters is None
    unit = "samples" if samples else "iters"
    old = old_samples if samples else old_iters
    new = (new_samples if new_samples is not None else new_iters * global_batch_size) if samples else new_iters
    out: list[ScheduleChange] = []
    warnings: list[PlanWarning] = []
    out += run_length_changes(f"--train-{unit}", old, new, reason)
    decay_key = f"--lr-decay-{unit}"
    decay_given = keys.lr_decay_samples if samples else keys.lr_decay_iters
    change, warn = _mcore_length(decay_key, decay_given, old, new, unit, keys.lr_decay_style, follows_default=True)
    out.append(change)
    warnings += warn
    decay = change.new if change.new is not None else new
    warm_change, warm_warn = _mcore_warmup(keys, samples, old, new, decay, warmup_limit)
    out.append(warm_change)
    warnings += warm_warn
    wsd = keys.lr_wsd_decay_samples if samples else keys.lr_wsd_decay_iters
    if wsd is not None:
        change, warn = _mcore_length(
            f"--lr-wsd-decay-{unit}", wsd, old, new, unit, keys.lr_decay_style, follows_default=False
        )
        out.append(change)
        warnings += warn
    for change_list, warn in (
        _mcore_save(keys.save_interval, new_iters, old_iters if not samples else None),
        eval_changes(keys.eval_interval, keys.eval_iters, "--eval-interval", new_iters),
        exit_changes(
            keys.exit_interval,
            "--exit-interval",
            new_iters,
            "Megatron-LM saves a checkpoint first when --save is set, then exits",
        ),
    ):
        out += change_list
        warnings += warn
    return Schedule(tuple(out), tuple(warnings))


def _mcore_length(
    key: str, given: int | None, old: int | None, new: int, unit: str, style: str, follows_default: bool
) -> tuple[ScheduleChange, list[PlanWarning]]:
    run = f"--train-{unit}"
    if given is None:
        return ScheduleChange(
            key, None, None, FOLLOWS, f"not set: Megatron-LM uses {run} = {new}; nothing to change"
        ), []
    if old is None or old == new:
        if given == new or old == new:
            return ScheduleChange(key, given, given, KEPT, f"{run} is {new}; unchanged"), []
        text = (
            f"{key} {given} is kept in a run of {new} {unit}: no {run} was given to scale it from; set it to "
            f"{new} (or leave it out: Megatron-LM then uses {run})"
            if follows_default
            else f"{key} {given} is kept in a run of {new} {unit}: no {run} was given to scale it from"
        )
        return ScheduleChange(key, given, given, WARNED, text), [PlanWarning("lr-schedule", "lr-schedule: " + text)]
    value, formula = scale(given, new, old)
    note = (
        " (it equalled the run: it follows the run)"
        if given == old
        else f" (keeps its ratio {given}/{old} = {given / old:.4g} to {run})"
    )
    if key.startswith("--lr-wsd") and style != "WSD":
        note += f"; used only with --lr-decay-style WSD (here {style})"
    return ScheduleChange(key, given, value, SCALED, f"{key.lstrip('-')} = {formula}{note}"), []


def _mcore_warmup(
    keys: McoreScheduleKeys, samples: bool, old: int | None, new: int, decay: int, limit: float
) -> tuple[ScheduleChange, list[PlanWarning]]:
    unit = "samples" if samples else "iters"
    if keys.lr_warmup_fraction is not None:
        warm = keys.lr_warmup_fraction * decay
        change = ScheduleChange(
            "--lr-warmup-fraction",
            keys.lr_warmup_fraction,
            keys.lr_warmup_fraction,
            FOLLOWS,
            f"a fraction of the decay: {keys.lr_warmup_fraction} * {decay} = {warm:g} {unit}",
        )
    else:
        key = f"--lr-warmup-{unit}"
        given = keys.lr_warmup_samples if samples else keys.lr_warmup_iters
        if not given:
            return ScheduleChange(key, given, given, KEPT, "no warmup"), []
        if old is None or old == new:
            warm = float(given)
            change = ScheduleChange(key, given, given, KEPT, f"absolute: {given} {unit}")
        else:
            value, formula = scale(given, new, old)
            warm = float(value)
            change = ScheduleChange(
                key,
                given,
                value,
                SCALED,
                f"{key.lstrip('-')} = {formula} (keeps its share of the run; Megatron-LM asserts "
                "warmup < decay, which a warmup kept from the old run can break)",
            )
    if new > 0 and warm > limit * new:
        text = f"warmup: {warm:g} warmup {unit} are {warm / new:.0%} of the run's {new} (more than {limit:.0%})"
        if warm >= decay:
            text += "; Megatron-LM's OptimizerParamScheduler asserts warmup < decay and stops at startup"
        action = SCALED if change.action == SCALED else WARNED
        return replace(change, action=action), [PlanWarning("warmup", text)]
    return change, []


def _mcore_save(interval: int | None, new: int, old: int | None) -> tuple[list[ScheduleChange], list[PlanWarning]]:
    if not interval:
        return [], []
    if interval > new:
        hint = (
            f"; for about as many checkpoints as before set it to {scale(interval, new, old)[1]}"
            if old is not None and old != new
            else ""
        )
        text = (
            f"--save-interval {interval} > train_iters {new}: no checkpoint until the end of training "
            f"(Megatron-LM saves once after the last iteration){hint}"
        )
        return (
            [ScheduleChange("--save-interval", interval, interval, WARNED, text)],
            [PlanWarning("checkpoint-interval", text)],
        )
    end = "" if new % interval == 0 else ", and one at the end"
    return [
        ScheduleChange(
            "--save-interval", interval, interval, KEPT, f"{new // interval} checkpoints during the run{end}"
        )
    ], []


def attach_mcore(
    plan: Plan,
    keys: McoreScheduleKeys,
    old_iters: int | None,
    old_samples: int | None,
    passes: Mapping[str, float],
    warmup_limit: float = 0.1,
    new_samples: int | None = None,
) -> tuple[Plan, Schedule]:
    """The Megatron-LM schedule of an exact ``plan`` (the run given as ``old_iters`` or ``old_samples``, None
    when not given) and the plan with it attached; ``new_samples``: the samples a changing batch draws."""
    reason = exact_reason(plan, passes)
    if new_samples is not None:
        reason = (
            reason.split(": train_iters =")[0] + f": train_samples = {new_samples}, the batch schedule's first "
            f"{plan.train_iters} batches (the most that fit in sum(targets) = "
            f"{plan.train_samples + plan.remainder_samples})"
        )
    sched = mcore_schedule(
        keys, old_iters, old_samples, plan.train_iters, plan.global_batch_size, reason, warmup_limit, new_samples
    )
    return with_schedule(plan, sched, True), sched
