"""The learning-rate schedule over a staged run: warmup once, the decay placed on stage boundaries when asked.

A staged run is one run to its framework: one scheduler over ``train_iters``, so the warmup happens once, at
the start. The stage plan's ``decay`` (:class:`~neox_epoch.formats.stage_config.StageDecay`) places the decay:

* ``until_stage``: the decay ends where that stage ends. GPT-NeoX: ``lr_decay_iters`` = that iteration
  (``AnnealingLR`` decays from the warmup's end to ``lr_decay_iters``; linear then stays at ``min_lr``,
  exponential keeps falling, cosine rises again: warned). Megatron-LM: ``--lr-decay-iters`` (past it,
  ``OptimizerParamScheduler`` returns ``min_lr``).
* ``from_stage``: the learning rate stays at its peak until that stage starts, then decays (WSD). Megatron-LM:
  ``--lr-decay-style WSD``, ``--lr-decay-iters`` the decay's end, ``--lr-wsd-decay-iters`` = end - start (its
  scheduler anneals over the last ``wsd_decay_steps`` of ``lr_decay_steps``). GPT-NeoX's ``AnnealingLR`` has no
  constant phase before its decay (styles constant, linear, cosine, exponential): refused, with the fix.

The learning rate at iteration ``i`` (0-based) is what the framework's scheduler gives after ``i`` steps, the
rate of the ``(i + 1)``-th optimizer step: NeoX's ``AnnealingLR.get_lr`` with ``num_iters = i``, megatron-core's
``OptimizerParamScheduler.get_lr`` with ``num_steps = i * global_batch_size`` (Megatron-LM's
``get_optimizer_param_scheduler``: every length in samples for iteration-based runs too). :func:`neox_lr` and
:func:`mcore_lr` mirror those two functions line by line (tests/plan/test_stage_schedule.py runs the real ones).
Pure: no torch, no framework.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from neox_epoch.errors import ConfigError
from neox_epoch.formats.neox_config import NeoxConfig, get_float
from neox_epoch.formats.stage_config import StageDecay
from neox_epoch.plan.model import Plan
from neox_epoch.plan.schedule import (
    KEPT,
    SET,
    NeoxScheduleKeys,
    Schedule,
    ScheduleChange,
    _neox_cosine,
    _neox_warmup,
    with_schedule,
)
from neox_epoch.plan.stages import StagesPlan

if TYPE_CHECKING:
    from neox_epoch.plan.staged import StagedRun

#: Megatron-LM's --lr-wsd-decay-style choices (megatron/training config: SchedulerConfig) and its default
WSD_STYLES = ("exponential", "linear", "cosine", "minus_sqrt")


def neox_lr(
    num_iters: float, start_lr: float, warmup_iter: float, end_iter: int, style: str, min_lr: float = 0.0
) -> float:
    """GPT-NeoX's ``AnnealingLR.get_lr`` (megatron/learning_rates.py), unchanged."""
    if warmup_iter > 0 and num_iters <= warmup_iter:
        return float(start_lr) * max(1, num_iters) / warmup_iter
    n = num_iters - warmup_iter
    end = end_iter - warmup_iter
    if style == "linear":
        lr = start_lr * (end - n) / end
    elif style == "cosine":
        lr = min_lr + ((start_lr - min_lr) / 2.0 * (math.cos(math.pi * n / end) + 1))
    elif style == "exponential":
        lr = start_lr * math.exp(-0.693 * n / end)
    else:
        lr = start_lr
    return max(lr, min_lr)


def mcore_lr(
    num_steps: float,
    max_lr: float,
    min_lr: float,
    warmup_steps: float,
    decay_steps: float,
    style: str,
    wsd_steps: float | None = None,
    wsd_style: str = "exponential",
    init_lr: float = 0.0,
) -> float:
    """megatron-core's ``OptimizerParamScheduler.get_lr`` (0.16.1 and 0.19.2 alike), unchanged."""
    if warmup_steps > 0 and num_steps <= warmup_steps:
        return init_lr + (max_lr - init_lr) * float(num_steps) / float(warmup_steps)
    if style == "constant":
        return max_lr
    if num_steps > decay_steps:
        return min_lr
    if style == "inverse-square-root":
        return max(min_lr, max_lr * max(warmup_steps, 1) ** 0.5 / (max(num_steps, 1) ** 0.5))
    ratio = float(num_steps - warmup_steps) / float(decay_steps - warmup_steps)
    if style == "linear":
        coeff = 1.0 - ratio
    elif style == "cosine":
        coeff = 0.5 * (math.cos(math.pi * ratio) + 1.0)
    elif style == "WSD":
        assert wsd_steps is not None
        start = decay_steps - wsd_steps
        if num_steps <= start:
            coeff = 1.0
        else:
            r = float(num_steps - start) / float(wsd_steps)
            coeff = {
                "linear": 1.0 - r,
                "cosine": 0.5 * (math.cos(math.pi * r) + 1.0),
                "exponential": 2.0 * math.pow(0.5, r) - 1.0,
                "minus_sqrt": 1.0 - math.sqrt(r),
            }[wsd_style]
    else:
        raise ConfigError(
            f"--lr-decay-style {style!r}: expected one of constant, linear, cosine, inverse-square-root, WSD"
        )
    return min_lr + coeff * (max_lr - min_lr)


@dataclass(frozen=True)
class StageSchedule:
    """The schedule over a staged run: the framework settings that make it, and the rate at each boundary."""

    framework: str
    """``neox`` or ``megatron-core``."""
    settings: dict[str, Any]
    """What to give the framework: NeoX keys (``lr_decay_iters``) or Megatron-LM flags (``--lr-decay-style``...)."""
    warmup_iters: float
    """Iterations of warmup (NeoX: ``warmup * lr_decay_iters``; Megatron-LM: warmup steps / global batch)."""
    decay_start: float
    """Iteration at which the decay starts (the warmup's end, or ``from_stage``'s first iteration)."""
    decay_end: int
    """Iteration at which the decay ends (``until_stage``'s end, else the framework's decay length)."""
    points: tuple[tuple[str, int, float], ...]
    """(what, iteration, learning rate): iteration 0, each stage's first iteration, the decay's end, the run's end."""
    style: str
    peak: float
    """The peak learning rate the rates are computed with (1.0 when the config gives none: rates are shares)."""
    lr_given: bool
    scheduler: dict[str, Any]
    """The framework scheduler's own arguments for this run: NeoX ``AnnealingLR(start_lr, warmup_iter, total_iters,
    decay_style, min_lr)``; megatron-core ``OptimizerParamScheduler(init_lr, max_lr, min_lr, lr_warmup_steps,
    lr_decay_steps, lr_decay_style, wsd_decay_steps, lr_wsd_decay_style)`` (steps in samples)."""
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "framework": self.framework,
            "settings": dict(self.settings),
            "style": self.style,
            "warmup_iters": round(self.warmup_iters, 6),
            "decay_start": round(self.decay_start, 6),
            "decay_end": self.decay_end,
            "peak_lr": self.peak if self.lr_given else None,
            "points": [
                {
                    "at": what,
                    "iteration": it,
                    "lr": lr if self.lr_given else None,
                    "share_of_peak": round(lr / self.peak, 6) if self.peak else None,
                }
                for what, it, lr in self.points
            ],
            "notes": list(self.notes),
        }

    def lines(self) -> list[str]:
        head = (
            f"learning-rate schedule over the run ({self.framework}, {self.style}): warmup once, "
            f"{self.warmup_iters:g} iterations; decay from iteration {self.decay_start:g} to {self.decay_end}"
        )
        if self.settings:
            head += "; " + ", ".join(f"{k} {v}" for k, v in self.settings.items())
        out = [head]
        for what, it, lr in self.points:
            rate = f"{lr:.6g}" if self.lr_given else f"{lr / self.peak:.4f} x peak"
            out.append(f"  iteration {it:>8,d}  {rate:>14}  {what}")
        out += [f"  note: {n}" for n in self.notes]
        return out


def decay_window(plan: StagesPlan, decay: StageDecay | None) -> tuple[int | None, int | None]:
    """(first iteration of ``from_stage`` or None, end iteration of ``until_stage`` or None)."""
    if decay is None:
        return None, None
    by = {st.name: st for st in plan.stages}
    start = by[decay.from_stage].first_iteration if decay.from_stage is not None else None
    end = by[decay.until_stage].end_iteration if decay.until_stage is not None else None
    return start, end


def _points(plan: StagesPlan, decay_end: int, rate: Any) -> tuple[tuple[str, int, float], ...]:
    def label(k: int, name: str) -> str:
        what = name if name.startswith("phase ") else f"stage {k + 1} {name!r}"
        return f"{what} starts" + ("" if k else " (first step)")

    out = [(label(k, st.name), st.first_iteration, rate(st.first_iteration)) for k, st in enumerate(plan.stages)]
    if decay_end < plan.train_iters and decay_end not in {it for _, it, _ in out}:
        out.append(("the decay ends", decay_end, rate(decay_end)))
    out.append(("last step", plan.train_iters - 1, rate(plan.train_iters - 1)))
    return tuple(sorted(out, key=lambda p: p[1]))


def neox_stage_schedule(
    plan: StagesPlan,
    decay: StageDecay | None,
    *,
    lr_decay_iters: int | None,
    lr_decay_fraction: float | None,
    warmup: float,
    style: str,
    lr: float | None,
    min_lr: float = 0.0,
) -> StageSchedule:
    """NeoX's one AnnealingLR over the staged run; with ``decay``, ``lr_decay_iters`` on the asked boundary."""
    start, end = decay_window(plan, decay)
    if start is not None and start > 0:
        raise ConfigError(
            f"neox_epoch.decay.from_stage {decay.from_stage!r}: GPT-NeoX's AnnealingLR (megatron/learning_rates.py) "  # type: ignore[union-attr]
            "decays from the warmup's end and has no constant phase before the decay (no WSD style); remove from_stage "
            "(until_stage ends the decay on a stage boundary), or train with megatron-core (--lr-decay-style WSD)"
        )
    settings: dict[str, Any] = {}
    if end is not None or decay is not None:
        end = end if end is not None else plan.train_iters
        settings["lr_decay_iters"] = end
        decay_iters = end
    elif lr_decay_iters is not None:
        decay_iters = max(1, lr_decay_iters)
    elif lr_decay_fraction is not None:
        decay_iters = max(1, math.floor(plan.train_iters * lr_decay_fraction))
    else:
        decay_iters = max(1, plan.train_iters)
    warmup_iter = warmup * decay_iters
    if decay is not None and warmup_iter >= decay_iters:
        raise ConfigError(
            f"neox_epoch.decay: the warmup ({warmup} * {decay_iters} = {warmup_iter:g} iterations) is not "
            f"shorter than the decay ending at iteration {decay_iters}; lower warmup, or end the decay at "
            "a later stage"
        )
    peak = lr if lr is not None else 1.0
    notes = []
    if style == "cosine" and decay_iters < plan.train_iters:
        notes.append(
            f"cosine ends at iteration {decay_iters} of {plan.train_iters}: NeoX does not clamp it, the rate "
            "rises again after it (use linear, or end the decay with the last stage)"
        )
    if style == "linear" and decay_iters < plan.train_iters:
        notes.append(f"after iteration {decay_iters} the rate stays at min_lr {min_lr:g}")
    return StageSchedule(
        "neox",
        settings,
        warmup_iter,
        warmup_iter,
        decay_iters,
        _points(plan, decay_iters, lambda i: neox_lr(i, peak, warmup_iter, decay_iters, style, min_lr)),
        style,
        peak,
        lr is not None,
        {
            "start_lr": peak,
            "warmup_iter": warmup_iter,
            "total_iters": decay_iters,
            "decay_style": style,
            "min_lr": min_lr,
        },
        tuple(notes),
    )


def mcore_stage_schedule(
    plan: StagesPlan,
    decay: StageDecay | None,
    *,
    style: str = "linear",
    wsd_style: str = "exponential",
    lr_decay_iters: int | None = None,
    lr_wsd_decay_iters: int | None = None,
    warmup_iters: int = 0,
    warmup_fraction: float | None = None,
    lr: float | None = None,
    min_lr: float = 0.0,
    init_lr: float = 0.0,
    warmup_samples: int | None = None,
) -> StageSchedule:
    """Megatron-LM's one OptimizerParamScheduler over the staged run (iteration-based flags, as Megatron-LM's
    get_optimizer_param_scheduler turns them into steps of samples); with ``decay``, the flags that put it on the
    asked boundaries. ``warmup_samples``: a sample-based run's --lr-warmup-samples (instead of ``warmup_iters``)."""
    if wsd_style not in WSD_STYLES:
        raise ConfigError(f"--lr-wsd-decay-style {wsd_style!r}: expected one of {', '.join(WSD_STYLES)}")
    g = plan.global_batch_size
    start, end = decay_window(plan, decay)
    settings: dict[str, Any] = {}
    decay_iters = lr_decay_iters if lr_decay_iters is not None else plan.train_iters
    wsd_iters = lr_wsd_decay_iters
    if decay is not None:
        decay_iters = end if end is not None else plan.train_iters
        settings["--lr-decay-iters"] = decay_iters
        if start is not None:
            style, wsd_iters = "WSD", decay_iters - start
            settings.update(
                {"--lr-decay-style": "WSD", "--lr-wsd-decay-iters": wsd_iters, "--lr-wsd-decay-style": wsd_style}
            )
    if style == "WSD" and wsd_iters is None:
        raise ConfigError("--lr-decay-style WSD: needs --lr-wsd-decay-iters (or decay.from_stage in the stage plan)")
    decay_steps = decay_iters * g
    warmup_steps = (
        warmup_fraction * decay_steps
        if warmup_fraction is not None
        else warmup_samples
        if warmup_samples is not None
        else warmup_iters * g
    )
    wsd_steps = wsd_iters * g if wsd_iters is not None else None
    if warmup_steps >= decay_steps:
        raise ConfigError(
            f"the warmup ({warmup_steps / g:g} iterations) is not shorter than the decay ({decay_iters} "
            "iterations): OptimizerParamScheduler asserts lr_warmup_steps < lr_decay_steps; lower the "
            "warmup or end the decay at a later stage"
        )
    decay_start = warmup_steps / g if style != "WSD" else decay_iters - (wsd_iters or 0)
    if style == "WSD" and decay_start * g < warmup_steps:
        raise ConfigError(
            f"decay.from_stage: the decay would start at iteration {decay_start:g}, inside the warmup "
            f"({warmup_steps / g:g} iterations); start it at a later stage, or shorten the warmup"
        )
    peak = lr if lr is not None else 1.0
    return StageSchedule(
        "megatron-core",
        settings,
        warmup_steps / g,
        decay_start,
        decay_iters,
        _points(
            plan,
            decay_iters,
            lambda i: mcore_lr(i * g, peak, min_lr, warmup_steps, decay_steps, style, wsd_steps, wsd_style, init_lr),
        ),
        style if style != "WSD" else f"WSD, {wsd_style} annealing",
        peak,
        lr is not None,
        {
            "init_lr": init_lr,
            "max_lr": peak,
            "min_lr": min_lr,
            "lr_warmup_steps": warmup_steps,
            "lr_decay_steps": decay_steps,
            "lr_decay_style": style,
            "wsd_decay_steps": wsd_steps,
            "lr_wsd_decay_style": wsd_style,
        },
    )


def neox_lr_schedule(cfg: NeoxConfig, keys: NeoxScheduleKeys, staged: StagedRun) -> StageSchedule:
    """NeoX's one AnnealingLR over the staged run (the block's ``decay`` placing lr_decay_iters on a boundary):
    the rate at each stage's first iteration, with the peak ``optimizer.params.lr`` (NeoX's default 0.001)."""
    opt = cfg.values.get("optimizer")
    params = opt.get("params") if isinstance(opt, dict) else None
    raw = params.get("lr", 0.001) if isinstance(params, dict) else 0.001
    lr = float(raw) if isinstance(raw, (int, float)) and not isinstance(raw, bool) else None
    try:
        return neox_stage_schedule(
            staged.stages,
            staged.config.decay,
            lr_decay_iters=keys.lr_decay_iters,
            lr_decay_fraction=keys.lr_decay_fraction,
            warmup=keys.warmup,
            style=keys.lr_decay_style,
            lr=lr,
            min_lr=get_float(cfg, "min_lr", 0.0) or 0.0,
        )
    except ConfigError as err:
        raise ConfigError(f"{cfg.block_origin or '<config>'}: {err}") from None


def with_stage_decay(
    plan: Plan, schedule: Schedule, keys: NeoxScheduleKeys, lr: StageSchedule, limit: float
) -> tuple[Plan, Schedule]:
    """The schedule with lr_decay_iters set where the block's ``decay`` ends it (a stage's last iteration), and the
    warmup and cosine checks redone for that decay length."""
    end = lr.decay_end
    stage_keys = replace(keys, lr_decay_iters=end)
    why = (
        f"lr_decay_iters = {end}: neox_epoch.decay ends the decay with a stage (its last iteration); warmup "
        f"{keys.warmup} * {end} = {lr.warmup_iters:g} iterations, once, at the start"
    )
    changes = []
    for c in schedule.changes:
        if c.key in ("lr_decay_iters", "lr_decay_fraction"):
            old = keys.lr_decay_iters
            changes.append(ScheduleChange("lr_decay_iters", old, end, KEPT if old == end else SET, why))
        elif c.key == "warmup":
            changes.append(_neox_warmup(stage_keys, None, plan.train_iters, end, limit)[0])
        else:
            changes.append(c)
    warnings = [w for w in schedule.warnings if w.code not in ("lr-schedule", "warmup")]
    warnings += _neox_warmup(stage_keys, None, plan.train_iters, end, limit)[1]
    warnings += _neox_cosine(stage_keys, end, plan.train_iters)
    new = Schedule(tuple(changes), tuple(warnings))
    plan = replace(plan, warnings=tuple(w for w in plan.warnings if w not in schedule.warnings))
    return with_schedule(plan, new, True), new
