"""Megatron-LM training-side semantics (megatron/training at tag core_v0.16.1): how many iterations a run
makes and how many samples it asks the dataset builder for, and where it refuses.

One function per Megatron-LM function mirrored, named after it; each raises :class:`MegatronRefusal` where
the real function raises (same exception type and message recorded on the error), so a plan never
promises a run that Megatron-LM would not start. Verified against the real functions by
tests/test_megatron_lm.py (tests/megatron_lm_truth.py runs them).

Pure: no torch, no megatron import.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from neox_epoch.errors import ConfigError

MEGATRON_LM_VERSION = "0.16.1"


class MegatronRefusal(ConfigError):
    """Megatron-LM itself would refuse this command line (or this planner cannot plan it).

    ``stage`` names the Megatron-LM function that refuses ("validate_args", "num_microbatches_calculator",
    "get_optimizer_param_scheduler", "update_train_iters", "get_train_valid_test_num_samples",
    "core_gpt_dataset_config_from_args", "train", "parse_args") or "neox-epoch" for what only this
    planner refuses; ``megatron_error`` and ``megatron_message`` are the exception type and message the
    real function raises (None for the planner's own refusals).
    """

    def __init__(self, message: str, stage: str, megatron_error: str | None = None,
                 megatron_message: str | None = None) -> None:
        super().__init__(message)
        self.stage = stage
        self.megatron_error = megatron_error
        self.megatron_message = megatron_message
        self.known: dict[str, object] = {}
        """What was computed before the refusal (data_parallel_size, global_batch_size, train_iters ...)."""


def refuse(flag: str, value: object, stage: str, error: str, message: str, why: str, fix: str) -> MegatronRefusal:
    """A one-line refusal naming the flag, the value, Megatron-LM's own words, why and the fix."""
    quoted = f"{error}: {' '.join(message.split())!r}" if message else error
    text = f"{flag}: {value}: Megatron-LM {MEGATRON_LM_VERSION} {stage} refuses it ({quoted}): {why}; {fix}"
    return MegatronRefusal(text, stage, error, message)


# ---------------------------------------------------------------------------------------- data paths


def get_blend_from_list(blend: Sequence[str] | None) -> tuple[list[str], list[float] | None] | None:
    """Mirror ``megatron.core.datasets.utils.get_blend_from_list``.

    Odd length: all prefixes. Even length: (weight, prefix) pairs when every weight parses as a float;
    when one does not, the whole list is prefixes. Megatron-LM asserts that after the first token that is
    not a number, no later weight position holds a number (its ``any``/``all`` share one iterator).
    """
    if blend is None:
        return None
    tokens = list(blend)
    if len(tokens) % 2 == 1:
        return [t.strip() for t in tokens], None
    weights: list[float | None] = []
    for raw in tokens[0::2]:
        try:
            weights.append(float(raw))
        except ValueError:
            weights.append(None)
    first_none = next((i for i, w in enumerate(weights) if w is None), None)
    if first_none is None:
        return [t.strip() for t in tokens[1::2]], [float(w) for w in weights if w is not None]
    if any(w is not None for w in weights[first_none + 1:]):
        raise refuse("--data-path", " ".join(tokens), "get_blend_and_blend_per_split", "AssertionError", "",
                     "some weight positions hold numbers and some do not",
                     "give 'PREFIX ...' or 'WEIGHT PREFIX WEIGHT PREFIX ...'")
    return [t.strip() for t in tokens], None


def is_object_storage_path(path: str) -> bool:
    """Mirror ``megatron.core.datasets.object_storage_utils.is_object_storage_path`` (s3:// or msc://)."""
    return path.startswith("s3://") or path.startswith("msc://")


# ------------------------------------------------------------------------------------------ parallel


def data_parallel_size(world_size: int, tensor: int, pipeline: int, context: int) -> int:
    """Mirror ``validate_args``: dp = world // (tp * pp * cp), after asserting divisibility.

    Expert parallelism does not enter: in 0.16.1 experts are sharded inside the data-parallel group.
    """
    total = tensor * pipeline * context
    if world_size % total:
        msg = f"world size ({world_size}) is not divisible by total_model_size (total_model_size={total})"
        raise refuse("--world-size", world_size, "validate_args", "AssertionError", msg,
                     f"tensor {tensor} x pipeline {pipeline} x context {context} = {total} GPUs per model replica",
                     f"use a world size that is a multiple of {total}")
    return world_size // total


# ------------------------------------------------------------------------------- microbatch calculator


@dataclass(frozen=True)
class BatchSchedule:
    """The num-microbatches calculator Megatron-LM builds (constant or batch-size rampup)."""

    global_batch_size: int
    """--global-batch-size (after validate_args' default micro * dp)."""
    micro_batch_size: int
    """--micro-batch-size."""
    data_parallel_size: int
    """world // (tp * pp * cp)."""
    decrease_batch_size_if_needed: bool
    """Round each batch down to a multiple of micro * dp instead of refusing."""
    rampup: tuple[int, int, int] | None
    """(start batch, increment, ramp-up samples), or None for a constant batch."""
    rampup_samples_per_increment: float | None
    """ramp-up samples / number of increments (a float, as in Megatron-LM)."""

    def current_global_batch_size(self, consumed_samples: int) -> int:
        """Mirror ``RampupBatchsizeNumMicroBatchesCalculator.update``'s current global batch size."""
        if self.rampup is None:
            return self.global_batch_size
        start, increment, samples = self.rampup
        if consumed_samples > samples:
            return self.global_batch_size
        steps = int(consumed_samples / self.rampup_samples_per_increment)  # type: ignore[operator]
        return start + steps * increment

    def running_global_batch_size(self, consumed_samples: int) -> int:
        """The batch a step really consumes: rounded down to micro * dp with --decrease-batch-size-if-needed."""
        current = self.current_global_batch_size(consumed_samples)
        unit = self.micro_batch_size * self.data_parallel_size
        if self.decrease_batch_size_if_needed and current % unit:
            return (current // unit) * unit
        return current


def build_num_microbatches_calculator(global_batch_size: int, micro_batch_size: int, data_parallel_size: int,
                                      decrease_batch_size_if_needed: bool,
                                      rampup_batch_size: Sequence[int] | None) -> BatchSchedule:
    """Mirror ``_build_num_microbatches_calculator`` and the two calculators' ``__init__`` checks."""
    unit = micro_batch_size * data_parallel_size
    flag_vals = f"--global-batch-size {global_batch_size} --micro-batch-size {micro_batch_size}"
    if rampup_batch_size is None:
        if decrease_batch_size_if_needed:
            num = ((global_batch_size // unit) * unit) // unit
        else:
            if global_batch_size % unit:
                msg = (f"global batch size ({global_batch_size}) is not divisible by micro batch size "
                       f"({micro_batch_size}) times data parallel size ({data_parallel_size})")
                raise refuse("--global-batch-size", global_batch_size, "num_microbatches_calculator", "AssertionError",
                             msg, f"each step is micro {micro_batch_size} x dp {data_parallel_size} x microbatches",
                             f"use a multiple of {unit} (or --decrease-batch-size-if-needed)")
            num = global_batch_size // unit
        if num < 1:
            raise refuse("--global-batch-size", global_batch_size, "num_microbatches_calculator", "AssertionError",
                         f"number of microbatches should be at least 1, got {num}.",
                         f"{flag_vals} is smaller than micro x dp = {unit}", f"use at least {unit}")
        return BatchSchedule(global_batch_size, micro_batch_size, data_parallel_size, decrease_batch_size_if_needed,
                             None, None)
    start, increment, samples = (int(v) for v in rampup_batch_size)
    value = f"{start} {increment} {samples}"
    checks = (
        (global_batch_size > 0, f"global batch size should be positive, got {global_batch_size}."),
        (start > 0, f"start batch size should be positive, got {start}."),
        (increment > 0, f"batch size increment should be positive, got {increment}."),
        (samples >= 0, f"ramp-up samples should be non-negative, got {samples}."),
        (unit > 0, ""),
        (global_batch_size - start >= 0, "expected global batch size to be greater than or equal to start batch "
                                         f"size, got {global_batch_size} and {start}"),
    )
    for ok, msg in checks:
        if not ok:
            raise refuse("--rampup-batch-size", value, "num_microbatches_calculator", "AssertionError", msg,
                         "the ramp must go from a positive start up to --global-batch-size in positive steps",
                         "fix the three values: START INCREMENT SAMPLES")
    diff = global_batch_size - start
    if diff % increment:
        msg = (f"expected global batch size interval ({diff}) to be divisible by global batch size increment "
               f"({increment})")
        raise refuse("--rampup-batch-size", value, "num_microbatches_calculator", "AssertionError", msg,
                     "the ramp must land exactly on --global-batch-size", "use an increment that divides the gap")
    if diff == 0:
        raise refuse("--rampup-batch-size", value, "num_microbatches_calculator", "ZeroDivisionError",
                     "division by zero", "a ramp whose start equals --global-batch-size has no increments",
                     "drop --rampup-batch-size or start below the global batch")
    return BatchSchedule(global_batch_size, micro_batch_size, data_parallel_size, decrease_batch_size_if_needed,
                         (start, increment, samples), samples / (diff // increment))


def train_batch_consistency(schedule: BatchSchedule, train_iters: int) -> None:
    """Mirror the training loop's ``update_num_microbatches(consumed, consistency_check=True)`` per step.

    With a ramp, every batch size reached must be a multiple of micro * dp (unless
    --decrease-batch-size-if-needed); Megatron-LM fails at the first step that reaches one that is not.
    """
    if schedule.rampup is None or schedule.decrease_batch_size_if_needed:
        return
    unit = schedule.micro_batch_size * schedule.data_parallel_size
    consumed = 0
    for _ in range(train_iters):
        current = schedule.current_global_batch_size(consumed)
        if current % unit:
            msg = (f"current global batch size ({current}) is not divisible by micro-batch-size "
                   f"({schedule.micro_batch_size}) timesdata parallel size ({schedule.data_parallel_size})")
            raise refuse("--rampup-batch-size", " ".join(map(str, schedule.rampup)), "train", "AssertionError", msg,
                         f"the ramp reaches batch {current} at {consumed} consumed samples",
                         f"use a start and increment that are multiples of micro x dp = {unit}")
        if consumed > schedule.rampup[2]:
            return  # constant from here on: global batch size was checked by the calculator
        consumed += schedule.running_global_batch_size(consumed)


# -------------------------------------------------------------------------------------- iterations


def update_train_iters(train_iters: int | None, train_samples: int | None, schedule: BatchSchedule) -> int:
    """Mirror ``megatron.training.training.update_train_iters`` (sample-based runs).

    train_iters given: unchanged. Constant batch: train_samples // global batch. With a ramp: steps are
    counted while consumed <= ramp-up samples and <= train_samples, each consuming the current global
    batch; then the rest at the full batch, a partial last batch dropped.
    """
    if train_iters:
        return train_iters
    if train_samples is None:
        raise refuse("--train-iters/--train-samples", "neither", "get_optimizer_param_scheduler", "Exception",
                     "either train-iters or train-samples should be provided.",
                     "the run length is unknown", "give --train-iters N or --train-samples N")
    if schedule.rampup is None:
        return train_samples // schedule.global_batch_size
    iterations = 0
    consumed = 0
    while consumed <= schedule.rampup[2] and consumed <= train_samples:
        consumed += schedule.current_global_batch_size(consumed)
        iterations += 1
    if train_samples > consumed:
        iterations += (train_samples - consumed) // schedule.global_batch_size
    return iterations


def get_train_valid_test_num_samples(train_iters: int, train_samples: int | None, global_batch_size: int,
                                     eval_interval: int | None, eval_iters: int, full_validation: bool,
                                     skip_train: bool, phase_transition_iterations: Sequence[int] | None,
                                     iteration: int = 0) -> tuple[int, int | None, int]:
    """Mirror ``megatron.training.training.get_train_valid_test_num_samples`` at ``iteration`` (0: a new run).

    train = train_samples or train_iters * gbs; valid = (train_iters // eval_interval + 1) * eval_iters * gbs
    (eval_iters * gbs with --skip-train, None with --full-validation); test = eval_iters * gbs. With
    --phase-transition-iterations the train request is the current phase's samples. In 0.16.1 there is
    no --start-eval-at-iter term.
    """
    train = train_samples if train_samples else train_iters * global_batch_size
    valid: int | None
    if full_validation:
        valid = None
    elif skip_train:
        valid = eval_iters * global_batch_size
    else:
        if eval_interval is None:
            raise refuse("--eval-interval", "not given", "get_train_valid_test_num_samples", "TypeError",
                         "unsupported operand type(s) for //: 'int' and 'NoneType'",
                         "Megatron-LM 0.16.1 has no default and divides train_iters by it",
                         "give --eval-interval N (or --full-validation / --skip-train)")
        if eval_interval == 0:
            raise refuse("--eval-interval", 0, "get_train_valid_test_num_samples", "ZeroDivisionError",
                         "integer division or modulo by zero", "train_iters is divided by it",
                         "give --eval-interval N with N >= 1")
        valid = (train_iters // eval_interval + 1) * eval_iters * global_batch_size
    test = eval_iters * global_batch_size
    if phase_transition_iterations:
        if train_samples is None:
            raise refuse("--phase-transition-iterations", ",".join(map(str, phase_transition_iterations)),
                         "get_train_valid_test_num_samples", "TypeError",
                         "'<=' not supported between instances of 'NoneType' and 'int'",
                         "the phase bounds end with train_samples, which iteration-based runs leave None",
                         "use --train-samples with phase transitions")
        bounds = [0] + [t * global_batch_size for t in phase_transition_iterations] + [train_samples]
        current = iteration * global_batch_size
        last = max(s for s in bounds if s <= current)
        later = [s for s in bounds if s > current]
        if not later:
            raise refuse("--phase-transition-iterations", ",".join(map(str, phase_transition_iterations)),
                         "get_train_valid_test_num_samples", "ValueError", "min() arg is an empty sequence",
                         "no phase starts after the current iteration", "give transitions inside the run")
        train = min(later) - last
    return train, valid, test


# -------------------------------------------------------------------------------------- LR schedule


@dataclass(frozen=True)
class SchedulerSteps:
    """What ``get_optimizer_param_scheduler`` hands OptimizerParamScheduler, in samples."""

    lr_warmup_steps: float
    """Warmup length in samples (fraction * decay steps, or iters * gbs, or samples)."""
    lr_decay_steps: int
    """Decay length in samples."""
    wd_incr_steps: int
    """Weight-decay increment length in samples."""
    wsd_decay_steps: int | None
    """WSD decay length in samples (None unless given)."""


def get_optimizer_param_scheduler(train_iters: int | None, train_samples: int | None, global_batch_size: int,
                                  lr_decay_iters: int | None, lr_decay_samples: int | None,
                                  lr_warmup_iters: int, lr_warmup_samples: int, lr_warmup_fraction: float | None,
                                  lr_wsd_decay_iters: int | None, lr_wsd_decay_samples: int | None,
                                  lr_decay_style: str, lr: float | None, min_lr: float,
                                  lr_warmup_init: float) -> SchedulerSteps:
    """Mirror the step arithmetic of ``get_optimizer_param_scheduler`` and OptimizerParamScheduler's checks.

    ``train_iters`` is the iteration-based value (before update_train_iters); sample-based runs use samples.
    """
    if train_iters:
        decay_iters = lr_decay_iters if lr_decay_iters is not None else train_iters
        decay = decay_iters * global_batch_size
        wd = train_iters * global_batch_size
        wsd = lr_wsd_decay_iters * global_batch_size if lr_wsd_decay_iters is not None else None
        warmup: float = (lr_warmup_fraction * decay if lr_warmup_fraction is not None
                         else lr_warmup_iters * global_batch_size)
    elif train_samples:
        decay = lr_decay_samples if lr_decay_samples is not None else train_samples
        wd = train_samples
        wsd = lr_wsd_decay_samples
        warmup = lr_warmup_fraction * decay if lr_warmup_fraction is not None else lr_warmup_samples
    else:
        raise refuse("--train-iters/--train-samples", "neither", "get_optimizer_param_scheduler", "Exception",
                     "either train-iters or train-samples should be provided.", "the run length is unknown",
                     "give --train-iters N or --train-samples N")
    if lr is None:
        raise refuse("--lr", "not given", "get_optimizer_param_scheduler", "TypeError",
                     "float() argument must be a string or a real number, not 'NoneType'",
                     "the scheduler needs the peak learning rate", "give --lr VALUE")
    for ok, flag_name, value in ((min_lr >= 0.0, "--min-lr", min_lr), (lr >= min_lr, "--lr", lr),
                                 (lr_warmup_init <= lr, "--lr-warmup-init", lr_warmup_init)):
        if not ok:
            raise refuse(flag_name, value, "get_optimizer_param_scheduler", "AssertionError", "",
                         "the scheduler needs 0 <= --min-lr <= --lr and --lr-warmup-init <= --lr",
                         "fix the learning rates")
    flag = "--lr-decay-iters" if train_iters else "--lr-decay-samples"
    if not decay > 0:
        raise refuse(flag, decay, "get_optimizer_param_scheduler", "AssertionError", "",
                     "the LR decay must last at least one sample", f"give {flag} >= 1")
    if not warmup < decay:
        raise refuse("--lr-warmup-*", warmup, "get_optimizer_param_scheduler", "AssertionError", "",
                     f"warmup ({warmup} samples) must end before the decay ({decay} samples)",
                     "shorten the warmup or lengthen the decay")
    if lr_decay_style == "WSD" and wsd is None:
        raise refuse("--lr-decay-style", "WSD", "get_optimizer_param_scheduler", "AssertionError", "",
                     "WSD needs its decay length", "give --lr-wsd-decay-iters or --lr-wsd-decay-samples")
    return SchedulerSteps(warmup, int(decay), int(wd), None if wsd is None else int(wsd))


def finite(value: float) -> bool:
    """True for a finite float (not nan, not +-inf)."""
    return math.isfinite(value)
