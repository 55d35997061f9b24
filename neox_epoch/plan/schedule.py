"""The learning-rate schedule, checkpoint, evaluation and exit keys when exact mode changes train_iters.

Exact mode sets ``train_iters`` for exactly N passes. The keys whose meaning is a length in iterations
(or samples) must follow, or the run silently keeps the old run's schedule: a shipped config taken from
``train_iters`` 320000 to 3023 with ``lr_decay_iters`` 320000 decays over 320000 iterations and, with
NeoX's ``warmup`` 0.01 (a fraction of the decay length), warms up for 3200 iterations: the learning rate
never reaches its peak and never decays.

The rules mirror what the frameworks do with these keys:

* GPT-NeoX (``megatron/training.py`` ``get_learning_rate_scheduler``): the decay length is
  ``lr_decay_iters`` if set, else ``floor(train_iters * lr_decay_fraction)`` if set, else ``train_iters``
  (at least 1); ``warmup_iter = warmup * decay length``. ``train`` saves when ``is_save_iter``
  (``checkpoint_factor`` multiples, or powers with ``checkpoint_scale: log``, or ``extra_save_iters``)
  and once more after the last iteration; it evaluates every ``eval_interval`` iterations and once at the
  end; ``exit_interval`` calls ``sys.exit`` inside the loop. ``AnnealingLR.get_lr`` does not clamp the
  cosine after the decay: past ``lr_decay_iters`` the learning rate rises again.
* Megatron-LM (``megatron/training/training.py`` ``get_optimizer_param_scheduler``): ``--lr-decay-iters``
  (or ``-samples``) defaults to the run's length; ``--lr-warmup-fraction`` is a fraction of the decay,
  ``--lr-warmup-iters``/``-samples`` are absolute and ``OptimizerParamScheduler`` asserts warmup < decay;
  ``--lr-wsd-decay-iters``/``-samples`` are absolute. A final checkpoint is saved after the loop unless the
  last iteration was a ``--save-interval`` multiple; evaluation runs at ``--eval-interval`` multiples and
  at the end.

``min_lr`` and ``lr`` are rates, not lengths: they never change. So: a key the framework derives from the run's
length follows by itself (nothing to change); a length equal to the old run's follows the new run; another explicit
length keeps its ratio to the run; an interval the new run never reaches is kept and warned about. Megatron-LM's
rules are in :mod:`neox_epoch.plan.schedule_mcore`. Pure functions, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from neox_epoch.plan.inputs import PlanWarning

if TYPE_CHECKING:
    from neox_epoch.plan.model import Plan

#: what was done with a key
SET, SCALED, FOLLOWS, KEPT, WARNED = "set", "scaled", "follows", "kept", "warned"
#: the actions that change a value (what launch passes to NeoX and --write-config writes)
CHANGING = (SET, SCALED)
#: warning codes this module emits
CODES = ("lr-schedule", "warmup", "checkpoint-interval", "eval-interval", "exit-interval")
NEOX_DECAY_STYLES = ("constant", "linear", "cosine", "exponential")


@dataclass(frozen=True)
class ScheduleChange:
    """One key: its old and new value, what was done and why (with the arithmetic)."""

    key: str
    """The key as the framework spells it: NeoX ``lr_decay_iters``, Megatron-LM ``--lr-decay-iters``."""
    old: Any
    """The value before exact mode (None: not set)."""
    new: Any
    """The value to use (equal to ``old`` unless the action is ``set`` or ``scaled``)."""
    action: str
    """``set``, ``scaled``, ``follows`` (derived by the framework from train_iters: nothing to change),
    ``kept`` (unchanged and fine) or ``warned`` (unchanged, with a warning)."""
    why: str
    """The reason, with the numbers filled in, e.g. ``lr_decay_iters = 320000 * 3023 / 320000 = 3023``."""

    def to_json(self) -> dict[str, Any]:
        """``{key, old, new, action, why}`` (the JSON ``settings.schedule`` entries)."""
        return {"key": self.key, "old": self.old, "new": self.new, "action": self.action, "why": self.why}

    def line(self) -> str:
        """``key old -> new (action): why`` for logs and the text report."""
        old = "(not set)" if self.old is None else self.old
        new = "(not set)" if self.new is None else self.new
        value = f"{old} -> {new}" if self.action in CHANGING else f"{old}"
        return f"{self.key}: {value} ({self.action}): {self.why}"


@dataclass(frozen=True)
class Schedule:
    """The result: one entry per key looked at, and the warnings for the plan."""

    changes: tuple[ScheduleChange, ...]
    """Every key looked at, in the order the framework uses them."""
    warnings: tuple[PlanWarning, ...]
    """Schedule warnings (codes in :data:`CODES`)."""

    def overwrite(self) -> dict[str, Any]:
        """The keys to pass to the framework: ``{key: new}`` for every ``set`` or ``scaled`` entry."""
        return {c.key: c.new for c in self.changes if c.action in CHANGING}

    def to_json(self) -> list[dict[str, Any]]:
        """The JSON ``settings.schedule`` list."""
        return [c.to_json() for c in self.changes]


@dataclass(frozen=True)
class NeoxScheduleKeys:
    """The GPT-NeoX keys a new train_iters touches, as the config gives them (NeoX's defaults otherwise)."""

    lr_decay_iters: int | None = None
    """Decay length in iterations; None: NeoX uses lr_decay_fraction, else train_iters."""
    lr_decay_fraction: float | None = None
    """Decay over floor(train_iters * fraction) iterations (used only when lr_decay_iters is None)."""
    lr_decay_style: str = "linear"
    """constant, linear, cosine or exponential."""
    warmup: float = 0.01
    """Warmup as a fraction of the decay length (NeoX: warmup_iter = warmup * decay iterations)."""
    saves: bool = False
    """``save`` is set: NeoX writes checkpoints (without it, the checkpoint keys do nothing)."""
    checkpoint_factor: int | float | None = None
    """Checkpoint spacing (linear: every multiple; log: powers of it)."""
    checkpoint_scale: str = "linear"
    """linear or log."""
    extra_save_iters: tuple[int, ...] = ()
    """Extra iterations to save at."""
    eval_interval: int | None = 1000
    """Iterations between evaluations (NeoX default 1000)."""
    eval_iters: int = 100
    """Iterations per evaluation (0: no evaluation)."""
    exit_interval: int | None = None
    """NeoX exits (sys.exit) at the first multiple of it."""
    loads: bool = False
    """``load`` is set: the run may resume from a checkpoint."""
    use_checkpoint_lr_scheduler: bool = False
    """On resume, NeoX takes the warmup and decay lengths from the checkpoint."""
    train_epochs: int | None = None
    """NeoX train_epochs (replaced by train_iters in exact mode)."""


# ----------------------------------------------------------------------------------------------------------
# arithmetic


def scale(value: int, new: int, old: int) -> tuple[int, str]:
    """``value * new / old`` rounded half up (at least 1), and the formula with the numbers filled in."""
    exact = value * new / old
    rounded = max(1, math.floor(exact + 0.5))
    shown = f"{rounded}" if exact == rounded else f"{exact:.4f}, rounded to {rounded}"
    return rounded, f"{value} * {new} / {old} = {shown}"


def neox_decay_iters(lr_decay_iters: int | None, lr_decay_fraction: float | None, train_iters: int) -> int:
    """NeoX's decay length (get_learning_rate_scheduler): lr_decay_iters, else floor(train_iters * fraction),
    else train_iters; at least 1."""
    if lr_decay_iters is not None:
        return max(1, lr_decay_iters)
    if lr_decay_fraction is not None:
        return max(1, math.floor(train_iters * lr_decay_fraction))
    return max(1, train_iters)


def _decay_progress(run: int, warmup_iter: float, decay: int, style: str) -> str:
    """What the learning rate does by the end of a ``run``-iteration run with this warmup and decay."""
    if warmup_iter >= run:
        return (
            f"the warmup ({warmup_iter:g} iterations) outlasts the run: the learning rate never reaches its "
            "peak and never decays"
        )
    if style == "constant":
        return "constant style: no decay; the decay length only sets the warmup"
    if decay <= warmup_iter:
        return "the decay length is not longer than the warmup"
    done = min(1.0, (run - warmup_iter) / (decay - warmup_iter))
    return f"the decay is {done:.1%} done when the run ends"


# ----------------------------------------------------------------------------------------------------------
# GPT-NeoX


def neox_schedule(
    keys: NeoxScheduleKeys, old_iters: int | None, new_iters: int, reason: str, warmup_limit: float = 0.1
) -> Schedule:
    """What happens to NeoX's schedule keys when train_iters goes from ``old_iters`` (None: not known) to
    ``new_iters`` for ``reason``."""
    out: list[ScheduleChange] = []
    warnings: list[PlanWarning] = []
    out += run_length_changes("train_iters", old_iters, new_iters, reason)
    if keys.train_epochs is not None:
        out.append(
            ScheduleChange(
                "train_epochs",
                keys.train_epochs,
                None,
                SET,
                "replaced by train_iters: neox_epoch builds each source's index for all the passes "
                "at once (NeoX's train_epochs loop replays the first pass's order)",
            )
        )
    decay_change, decay_warn = _neox_decay(keys, old_iters, new_iters)
    out.append(decay_change)
    warnings += decay_warn
    decay = neox_decay_iters(
        decay_change.new if decay_change.key == "lr_decay_iters" else keys.lr_decay_iters,
        keys.lr_decay_fraction,
        new_iters,
    )
    warm_change, warm_warn = _neox_warmup(keys, old_iters, new_iters, decay, warmup_limit)
    out.append(warm_change)
    warnings += warm_warn
    warnings += _neox_cosine(keys, decay, new_iters)
    save_changes, save_warn = _neox_saves(keys, old_iters, new_iters)
    out += save_changes
    warnings += save_warn
    for change, warn in (
        eval_changes(keys.eval_interval, keys.eval_iters, "eval_interval", new_iters),
        exit_changes(
            keys.exit_interval,
            "exit_interval",
            new_iters,
            "NeoX calls sys.exit inside the training loop: no final evaluation, and no final "
            "checkpoint unless that iteration is a save iteration",
        ),
    ):
        out += change
        warnings += warn
    if keys.loads and keys.use_checkpoint_lr_scheduler and any(c.action == SCALED for c in out):
        warnings.append(
            PlanWarning(
                "lr-schedule",
                "lr-schedule: use_checkpoint_lr_scheduler is set: resuming from load, NeoX takes the warmup and decay "
                "lengths from the checkpoint (AnnealingLR.load_state_dict), not the adjusted ones; unset it, or set "
                "override_lr_scheduler, for a fresh run of this plan",
            )
        )
    return Schedule(tuple(out), tuple(warnings))


def run_length_changes(key: str, old: int | None, new: int, reason: str) -> list[ScheduleChange]:
    if old == new:
        return [ScheduleChange(key, old, new, KEPT, f"unchanged: {reason}")]
    return [ScheduleChange(key, old, new, SET, reason)]


def _neox_decay(keys: NeoxScheduleKeys, old: int | None, new: int) -> tuple[ScheduleChange, list[PlanWarning]]:
    decay = keys.lr_decay_iters
    if decay is None and keys.lr_decay_fraction is not None:
        length = neox_decay_iters(None, keys.lr_decay_fraction, new)
        return ScheduleChange(
            "lr_decay_fraction",
            keys.lr_decay_fraction,
            keys.lr_decay_fraction,
            FOLLOWS,
            f"NeoX decays over floor(train_iters * lr_decay_fraction) = floor({new} * "
            f"{keys.lr_decay_fraction}) = {length} iterations; nothing to change",
        ), []
    if decay is None:
        return ScheduleChange(
            "lr_decay_iters",
            None,
            None,
            FOLLOWS,
            f"not set: NeoX decays over train_iters = {new} iterations; nothing to change",
        ), []
    ignored = (
        " (NeoX uses lr_decay_iters and ignores lr_decay_fraction when both are set)"
        if keys.lr_decay_fraction is not None
        else ""
    )
    if old is None or old == new:
        if decay == new:
            return ScheduleChange("lr_decay_iters", decay, decay, KEPT, f"equals train_iters {new}{ignored}"), []
        if old == new:
            return ScheduleChange(
                "lr_decay_iters", decay, decay, KEPT, f"train_iters is unchanged; the decay keeps its length{ignored}"
            ), []
        warm = keys.warmup * decay
        progress = _decay_progress(new, warm, decay, keys.lr_decay_style)
        text = (
            f"lr_decay_iters {decay} is kept in a {new}-iteration run: the config gives no train_iters to scale it "
            f"from, so the learning rate decays over {decay} iterations ({progress}); "
            f"remove lr_decay_iters (NeoX then decays over train_iters) or set it to {new}"
        )
        return (
            ScheduleChange("lr_decay_iters", decay, decay, WARNED, text + ignored),
            [PlanWarning("lr-schedule", "lr-schedule: " + text)],
        )
    new_decay, formula = scale(decay, new, old)
    if decay == old:
        why = f"lr_decay_iters = {formula} (it equalled train_iters: the decay follows the run){ignored}"
    else:
        why = f"lr_decay_iters = {formula} (keeps its ratio {decay}/{old} = {decay / old:.4g} to train_iters){ignored}"
    return ScheduleChange("lr_decay_iters", decay, new_decay, SCALED, why), []


def _neox_warmup(
    keys: NeoxScheduleKeys, old: int | None, new: int, decay: int, limit: float
) -> tuple[ScheduleChange, list[PlanWarning]]:
    w = keys.warmup
    warm = w * decay
    was = ""
    if old is not None and old != new:
        old_decay = neox_decay_iters(keys.lr_decay_iters, keys.lr_decay_fraction, old)
        was = f" (was {w} * {old_decay} = {w * old_decay:g})"
    why = (
        f"a fraction of the decay length (NeoX: warmup_iter = warmup * decay iterations): {w} * {decay} = "
        f"{warm:g} warmup iterations{was}"
    )
    if new > 0 and warm > limit * new:
        outlasts = "; it outlasts the run: the learning rate never reaches its peak" if warm >= new else ""
        text = (
            f"warmup: {w} * {decay} = {warm:g} warmup iterations are {warm / new:.0%} of the {new} training "
            f"iterations (more than {limit:.0%}){outlasts}"
        )
        return ScheduleChange("warmup", w, w, WARNED, why), [PlanWarning("warmup", text)]
    return ScheduleChange("warmup", w, w, FOLLOWS, why), []


def _neox_cosine(keys: NeoxScheduleKeys, decay: int, new: int) -> list[PlanWarning]:
    if keys.lr_decay_style != "cosine" or decay >= new:
        return []
    return [
        PlanWarning(
            "lr-schedule",
            f"lr-schedule: lr_decay_style cosine with the decay ending at iteration {decay} of {new}: NeoX's cosine "
            "(AnnealingLR.get_lr) is not clamped after the decay, so the learning rate rises again for the last "
            f"{new - decay} iterations; set lr_decay_iters to train_iters ({new}) or remove it",
        )
    ]


def _neox_saves(keys: NeoxScheduleKeys, old: int | None, new: int) -> tuple[list[ScheduleChange], list[PlanWarning]]:
    if not keys.saves:
        return [], []
    out: list[ScheduleChange] = []
    warnings: list[PlanWarning] = []
    f = keys.checkpoint_factor
    if f is not None and keys.checkpoint_scale == "log":
        out.append(
            ScheduleChange(
                "checkpoint_factor",
                f,
                f,
                KEPT,
                f"checkpoint_scale log: checkpoints at the powers of {f} below {new}, and at the end",
            )
        )
    elif f is not None:
        ff = int(f)
        if ff > new:
            hint = (
                f"; for about as many checkpoints as before set it to {scale(ff, new, old)[1]}"
                if old is not None and old != new
                else ""
            )
            text = (
                f"checkpoint_factor {ff} > train_iters {new}: no checkpoint until the end of training (NeoX "
                f"saves once more after the last iteration){hint}"
            )
            out.append(ScheduleChange("checkpoint_factor", f, f, WARNED, text))
            warnings.append(PlanWarning("checkpoint-interval", text))
        else:
            out.append(
                ScheduleChange(
                    "checkpoint_factor", f, f, KEPT, f"{new // ff} checkpoints at multiples of {ff}, and one at the end"
                )
            )
    late = [i for i in keys.extra_save_iters if i > new]
    if late:
        text = f"extra_save_iters {late} lie past the run's last iteration {new}: never saved"
        out.append(
            ScheduleChange("extra_save_iters", list(keys.extra_save_iters), list(keys.extra_save_iters), WARNED, text)
        )
        warnings.append(PlanWarning("checkpoint-interval", text))
    return out, warnings


def eval_changes(
    interval: int | None, eval_iters: int, key: str, new: int
) -> tuple[list[ScheduleChange], list[PlanWarning]]:
    if not interval or eval_iters <= 0:
        return [], []
    if interval > new:
        text = (
            f"{key} {interval} > train_iters {new}: no evaluation until the end of training (one evaluation "
            f"after the last iteration); set {key} to at most {new} to evaluate during the run"
        )
        return [ScheduleChange(key, interval, interval, WARNED, text)], [PlanWarning("eval-interval", text)]
    return [
        ScheduleChange(
            key, interval, interval, KEPT, f"{new // interval} evaluations during the run, and one at the end"
        )
    ], []


def exit_changes(interval: int | None, key: str, new: int, how: str) -> tuple[list[ScheduleChange], list[PlanWarning]]:
    if not interval or interval > new:
        return [], []
    text = (
        f"{key} {interval}: the run stops at iteration {interval} of its {new} ({how}); the passes are complete "
        f"only once a resumed run reaches iteration {new}"
    )
    return [ScheduleChange(key, interval, interval, WARNED, text)], [PlanWarning("exit-interval", text)]


# ----------------------------------------------------------------------------------------------------------
# attaching a schedule to a plan


def exact_reason(plan: Plan, passes: Mapping[str, float]) -> str:
    """Why exact mode set train_iters: the passes and ``sum(targets) // global_batch_size``."""
    values = set(passes.values())
    what = (
        f"{passes_text(next(iter(values)))} over every train source"
        if len(values) == 1
        else "passes " + ", ".join(f"{k}={_num(v)}" for k, v in passes.items())
    )
    total = plan.train_samples + plan.remainder_samples
    return (
        f"exact mode, {what}: train_iters = sum(targets) // global_batch_size = {total} // "
        f"{plan.global_batch_size} = {plan.train_iters}"
    )


def _num(v: float) -> str:
    return f"{int(v)}" if float(v).is_integer() else f"{v:g}"


def passes_text(v: float) -> str:
    """``1 pass``, ``2 passes``, ``0.5 passes``."""
    return f"{_num(v)} pass" if v == 1 else f"{_num(v)} passes"


def with_schedule(plan: Plan, schedule: Schedule, exact: bool) -> Plan:
    """``plan`` with the schedule's warnings (replacing the plan's own ``warmup`` check, which used the old run's
    lengths) and, in exact mode, ``settings["schedule"]``."""
    warnings = tuple(w for w in plan.warnings if w.code != "warmup") + schedule.warnings
    settings = dict(plan.settings)
    if exact:
        settings["schedule"] = schedule.to_json()
    return replace(plan, warnings=warnings, settings=settings)


def attach_neox(
    plan: Plan,
    keys: NeoxScheduleKeys,
    old_iters: int | None,
    passes: Mapping[str, float] | None,
    warmup_limit: float = 0.1,
) -> tuple[Plan, Schedule]:
    """The NeoX schedule for ``plan`` and the plan with it attached. ``passes`` None: not exact mode (the
    config's train_iters stands; only the checks run)."""
    if passes is None:
        sched = neox_schedule(
            replace(keys, train_epochs=None),
            plan.train_iters,
            plan.train_iters,
            "train_iters from the config",
            warmup_limit,
        )
    else:
        sched = neox_schedule(keys, old_iters, plan.train_iters, exact_reason(plan, passes), warmup_limit)
    return with_schedule(plan, sched, passes is not None), sched
