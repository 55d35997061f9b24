"""Megatron-LM training-side semantics (megatron/training at tag core_v0.16.1, and the megatron-core 0.19.2
wheel's megatron/training): how many iterations a run makes and how many samples it asks the dataset
builder for, and where it refuses.

What differs between the versions is one :class:`Rules` record per version (:data:`RULES`), chosen by
:func:`rules_for` from the megatron-core version a plan mirrors; the functions read its fields instead of
comparing version strings.

One function per Megatron-LM function mirrored, named after it; each raises :class:`MegatronRefusal` where
the real function raises (same exception type and message recorded on the error), so a plan never
promises a run that Megatron-LM would not start. Verified against the real functions by
tests/megatron_lm/test_megatron_lm.py (tests/helpers/megatron_lm_truth.py runs them).

Pure: no torch, no megatron import.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass

from neox_epoch.errors import ConfigError

MEGATRON_LM_VERSION = "0.16.1"


@dataclass(frozen=True)
class Rules:
    """What one Megatron-LM version does differently, each field read in that version's code."""

    version: str
    """The Megatron-LM version (its option table is ``neox_epoch/data/megatron_flags/<version>.json``)."""
    rampup_used: bool
    """--rampup-batch-size builds the ramp-up calculator (0.16.1); False: parsed, then ignored with a warning
    (0.19.2 ``init_num_microbatches_calculator``)."""
    rampup_refused_with_train_iters: bool
    """validate_args refuses --rampup-batch-size with --train-iters (0.16.1; gone in 0.19.2)."""
    phases_refuse_rampup: bool
    """validate_args refuses --phase-transition-iterations with a ramp-up (0.16.1)."""
    step_schedule: bool
    """--step-batch-size-schedule exists (0.19.2 StepBatchsizeNumMicroBatchesCalculator)."""
    eval_batch: bool
    """--eval-global-batch-size/--eval-micro-batch-size and --start-eval-at-iter exist (0.19.2)."""
    skip_train_skips_lr_checks: bool
    """validate_args' iteration/sample-based checks are skipped with --skip-train (0.19.2)."""
    gtp_weight_remat: bool
    """--tensor-parallel-num-weight-shards: the model size includes gtp_weight_remat_size (0.19.2)."""
    override_ckpt_iteration: bool
    """--override-ckpt-iteration exists (0.19.2 checkpointing.load_checkpoint)."""


#: the Megatron-LM versions this project has read and tests against (their option tables ship with it)
RULES: dict[str, Rules] = {
    "0.16.1": Rules(
        "0.16.1",
        rampup_used=True,
        rampup_refused_with_train_iters=True,
        phases_refuse_rampup=True,
        step_schedule=False,
        eval_batch=False,
        skip_train_skips_lr_checks=False,
        gtp_weight_remat=False,
        override_ckpt_iteration=False,
    ),
    "0.19.2": Rules(
        "0.19.2",
        rampup_used=False,
        rampup_refused_with_train_iters=False,
        phases_refuse_rampup=False,
        step_schedule=True,
        eval_batch=True,
        skip_train_skips_lr_checks=True,
        gtp_weight_remat=True,
        override_ckpt_iteration=True,
    ),
}
_CURRENT: ContextVar[Rules] = ContextVar("megatron_lm_rules", default=RULES[MEGATRON_LM_VERSION])


def rules_for(mcore_version: str | None) -> Rules:
    """The rules of the Megatron-LM version that goes with megatron-core ``mcore_version``: 0.19 and later
    -> 0.19.2's; anything older (0.16.x, and 0.10.0, planned with 0.16.1's flags as before) -> 0.16.1's."""
    if mcore_version in RULES:
        return RULES[mcore_version]
    try:
        major, minor = (int(x) for x in str(mcore_version).split(".")[:2])
    except ValueError:
        return RULES[MEGATRON_LM_VERSION]
    return RULES["0.19.2"] if (major, minor) >= (0, 19) else RULES[MEGATRON_LM_VERSION]


def current() -> Rules:
    """The rules in force (:func:`using`), 0.16.1's by default."""
    return _CURRENT.get()


@contextlib.contextmanager
def using(rules: Rules) -> Iterator[Rules]:
    """Apply ``rules`` (refusals name its version) inside the block."""
    token = _CURRENT.set(rules)
    try:
        yield rules
    finally:
        _CURRENT.reset(token)


class MegatronRefusal(ConfigError):
    """Megatron-LM itself would refuse this command line (or this planner cannot plan it).

    ``stage`` names the Megatron-LM function that refuses ("validate_args", "num_microbatches_calculator",
    "get_optimizer_param_scheduler", "update_train_iters", "get_train_valid_test_num_samples",
    "core_gpt_dataset_config_from_args", "train", "parse_args") or "neox-epoch" for what only this
    planner refuses; ``megatron_error`` and ``megatron_message`` are the exception type and message the
    real function raises (None for the planner's own refusals).
    """

    def __init__(
        self, message: str, stage: str, megatron_error: str | None = None, megatron_message: str | None = None
    ) -> None:
        super().__init__(message)
        self.stage = stage
        self.megatron_error = megatron_error
        self.megatron_message = megatron_message
        self.known: dict[str, object] = {}
        """What was computed before the refusal (data_parallel_size, global_batch_size, train_iters ...)."""


def refuse(flag: str, value: object, stage: str, error: str, message: str, why: str, fix: str) -> MegatronRefusal:
    """A one-line refusal naming the flag, the value, Megatron-LM's own words, why and the fix."""
    quoted = f"{error}: {' '.join(message.split())!r}" if message else error
    text = f"{flag}: {value}: Megatron-LM {current().version} {stage} refuses it ({quoted}): {why}; {fix}"
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
    if any(w is not None for w in weights[first_none + 1 :]):
        raise refuse(
            "--data-path",
            " ".join(tokens),
            "get_blend_and_blend_per_split",
            "AssertionError",
            "",
            "some weight positions hold numbers and some do not",
            "give 'PREFIX ...' or 'WEIGHT PREFIX WEIGHT PREFIX ...'",
        )
    return [t.strip() for t in tokens], None


def is_object_storage_path(path: str) -> bool:
    """Mirror ``megatron.core.datasets.object_storage_utils.is_object_storage_path`` (s3:// or msc://)."""
    return path.startswith("s3://") or path.startswith("msc://")


# ------------------------------------------------------------------------------------------ parallel


def gtp_weight_remat_size(tensor: int, num_weight_shards: int | None) -> int:
    """Mirror ``megatron.core.model_parallel_config.resolve_tensor_parallel_weight_shards`` (0.19.2), which
    validate_args calls: --tensor-parallel-num-weight-shards S (default tp) gives gtp_weight_remat_size S // tp."""
    if num_weight_shards is None:
        return 1
    for bad, message in (
        (
            num_weight_shards < tensor,
            f"tensor_parallel_num_weight_shards ({num_weight_shards}) must "
            f"be >= tensor_model_parallel_size ({tensor}).",
        ),
        (
            num_weight_shards % tensor != 0,
            f"tensor_parallel_num_weight_shards ({num_weight_shards}) "
            f"must be divisible by tensor_model_parallel_size ({tensor}).",
        ),
    ):
        if bad:
            raise refuse(
                "--tensor-parallel-num-weight-shards",
                num_weight_shards,
                "validate_args",
                "ValueError",
                message,
                "each weight is split into tp x gtp_weight_remat_size shards",
                f"use a multiple of --tensor-model-parallel-size {tensor}",
            )
    return num_weight_shards // tensor


def data_parallel_size(world_size: int, tensor: int, pipeline: int, context: int, gtp_remat: int = 1) -> int:
    """Mirror ``validate_args``: dp = world // (tp * pp * cp [* gtp_weight_remat_size in 0.19.2]), after
    asserting divisibility (megatron/training/arguments.py:validate_args).

    Expert parallelism does not enter: experts are sharded inside the data-parallel group.
    """
    total = tensor * pipeline * context * gtp_remat
    if world_size % total:
        msg = f"world size ({world_size}) is not divisible by total_model_size (total_model_size={total})"
        remat = f" x gtp_weight_remat_size {gtp_remat}" if gtp_remat != 1 else ""
        raise refuse(
            "--world-size",
            world_size,
            "validate_args",
            "AssertionError",
            msg,
            f"tensor {tensor} x pipeline {pipeline} x context {context}{remat} = {total} GPUs per model replica",
            f"use a world size that is a multiple of {total}",
        )
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
    steps: tuple[tuple[int, int], ...] | None = None
    """--step-batch-size-schedule (0.19.2): (threshold in samples, global batch) sorted, or None."""

    @property
    def constant(self) -> bool:
        """True when every step consumes the same global batch."""
        return self.rampup is None and self.steps is None

    def current_global_batch_size(self, consumed_samples: int) -> int:
        """Mirror the calculators' current global batch: ``RampupBatchsizeNumMicroBatchesCalculator.update``
        (0.16.1), ``StepBatchsizeNumMicroBatchesCalculator._get_batch_size_for_samples`` (0.19.2)."""
        if self.steps is not None:
            batch = self.steps[0][1]
            for threshold, size in self.steps:
                if consumed_samples < threshold:
                    break
                batch = size
            return batch
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


def build_num_microbatches_calculator(
    global_batch_size: int,
    micro_batch_size: int,
    data_parallel_size: int,
    decrease_batch_size_if_needed: bool,
    rampup_batch_size: Sequence[int] | None,
    step_schedule: str | None = None,
    seq_length: int | None = None,
) -> BatchSchedule:
    """Mirror ``_build_num_microbatches_calculator`` (megatron/core/num_microbatches_calculator.py) and the
    calculators' ``__init__`` checks. 0.16.1: constant or ramp-up. 0.19.2: a ramp-up is ignored
    (``init_num_microbatches_calculator`` only warns), --step-batch-size-schedule builds the step calculator.
    ``data_parallel_size`` is the one the calculator gets (0.19.2: dp x gtp_weight_remat_size)."""
    if step_schedule is not None:
        return _step_calculator(
            global_batch_size,
            micro_batch_size,
            data_parallel_size,
            decrease_batch_size_if_needed,
            step_schedule,
            seq_length,
        )
    if rampup_batch_size is not None and current().rampup_used:
        return _rampup_calculator(
            global_batch_size, micro_batch_size, data_parallel_size, decrease_batch_size_if_needed, rampup_batch_size
        )
    unit = micro_batch_size * data_parallel_size
    flag_vals = f"--global-batch-size {global_batch_size} --micro-batch-size {micro_batch_size}"
    if decrease_batch_size_if_needed:
        num = ((global_batch_size // unit) * unit) // unit
    else:
        if global_batch_size % unit:
            msg = (
                f"global batch size ({global_batch_size}) is not divisible by micro batch size "
                f"({micro_batch_size}) times data parallel size ({data_parallel_size})"
            )
            raise refuse(
                "--global-batch-size",
                global_batch_size,
                "num_microbatches_calculator",
                "AssertionError",
                msg,
                f"each step is micro {micro_batch_size} x dp {data_parallel_size} x microbatches",
                f"use a multiple of {unit} (or --decrease-batch-size-if-needed)",
            )
        num = global_batch_size // unit
    if num < 1:
        raise refuse(
            "--global-batch-size",
            global_batch_size,
            "num_microbatches_calculator",
            "AssertionError",
            f"number of microbatches should be at least 1, got {num}.",
            f"{flag_vals} is smaller than micro x dp = {unit}",
            f"use at least {unit}",
        )
    return BatchSchedule(
        global_batch_size, micro_batch_size, data_parallel_size, decrease_batch_size_if_needed, None, None
    )


def _rampup_calculator(
    global_batch_size: int,
    micro_batch_size: int,
    data_parallel_size: int,
    decrease_batch_size_if_needed: bool,
    rampup_batch_size: Sequence[int],
) -> BatchSchedule:
    """Mirror ``RampupBatchsizeNumMicroBatchesCalculator.__init__``'s checks (0.16.1)."""
    unit = micro_batch_size * data_parallel_size
    start, increment, samples = (int(v) for v in rampup_batch_size)
    value = f"{start} {increment} {samples}"
    checks = (
        (global_batch_size > 0, f"global batch size should be positive, got {global_batch_size}."),
        (start > 0, f"start batch size should be positive, got {start}."),
        (increment > 0, f"batch size increment should be positive, got {increment}."),
        (samples >= 0, f"ramp-up samples should be non-negative, got {samples}."),
        (unit > 0, ""),
        (
            global_batch_size - start >= 0,
            "expected global batch size to be greater than or equal to start batch "
            f"size, got {global_batch_size} and {start}",
        ),
    )
    for ok, msg in checks:
        if not ok:
            raise refuse(
                "--rampup-batch-size",
                value,
                "num_microbatches_calculator",
                "AssertionError",
                msg,
                "the ramp must go from a positive start up to --global-batch-size in positive steps",
                "fix the three values: START INCREMENT SAMPLES",
            )
    diff = global_batch_size - start
    if diff % increment:
        msg = (
            f"expected global batch size interval ({diff}) to be divisible by global batch size increment ({increment})"
        )
        raise refuse(
            "--rampup-batch-size",
            value,
            "num_microbatches_calculator",
            "AssertionError",
            msg,
            "the ramp must land exactly on --global-batch-size",
            "use an increment that divides the gap",
        )
    if diff == 0:
        raise refuse(
            "--rampup-batch-size",
            value,
            "num_microbatches_calculator",
            "ZeroDivisionError",
            "division by zero",
            "a ramp whose start equals --global-batch-size has no increments",
            "drop --rampup-batch-size or start below the global batch",
        )
    return BatchSchedule(
        global_batch_size,
        micro_batch_size,
        data_parallel_size,
        decrease_batch_size_if_needed,
        (start, increment, samples),
        samples / (diff // increment),
    )


# ------------------------------------------------------------------------------ step batch-size schedule


def _schedule_number(text: str, schedule: str) -> int:
    """Mirror ``StepBatchsizeNumMicroBatchesCalculator._parse_numeric_value`` (0.19.2): an optional K/M/B/T
    suffix (1e3 .. 1e12), the number read as a float, multiplied, truncated to int."""
    value = text.strip().upper()
    multiplier = 1
    for suffix, factor in (("T", 1_000_000_000_000), ("B", 1_000_000_000), ("M", 1_000_000), ("K", 1_000)):
        if value.endswith(suffix):
            multiplier, value = factor, value[:-1]
            break
    try:
        return int(float(value) * multiplier)
    except (ValueError, OverflowError) as err:
        raise refuse(
            "--step-batch-size-schedule",
            repr(schedule),
            "num_microbatches_calculator",
            type(err).__name__,
            str(err),
            f"{text!r} is not a number (with an optional K, M, B or T suffix)",
            'write it like "0:768 250B:1536"',
        ) from err


def parse_step_schedule(schedule: str, seq_length: int | None) -> tuple[tuple[int, int], ...]:
    """Mirror ``StepBatchsizeNumMicroBatchesCalculator._parse_schedule`` and ``_validate_schedule``
    (megatron/core/num_microbatches_calculator.py, 0.19.2): "THRESHOLD:BATCH ..." (commas count as spaces);
    with a sequence length (Megatron-LM always passes --seq-length) thresholds are tokens, // seq_length gives
    samples; sorted; the first threshold must be 0, thresholds strictly increasing, batches > 0."""
    pairs = []
    for entry in schedule.strip().replace(",", " ").split():
        if ":" not in entry:
            raise refuse(
                "--step-batch-size-schedule",
                repr(schedule),
                "num_microbatches_calculator",
                "ValueError",
                f'Invalid schedule entry "{entry}". Expected format: "THRESHOLD:BATCH_SIZE"',
                f"{entry!r} has no colon",
                'write it like "0:768 250B:1536"',
            )
        threshold_text, batch_text = entry.split(":", 1)
        threshold = _schedule_number(threshold_text, schedule)
        batch = _schedule_number(batch_text, schedule)
        pairs.append((threshold // seq_length if seq_length is not None else threshold, batch))
    pairs.sort(key=lambda p: p[0])
    checks = [(len(pairs) > 0, "schedule must have at least one entry")]
    if pairs:
        checks.append((pairs[0][0] == 0, f"first schedule entry must have threshold 0, got {pairs[0][0]}"))
        checks += [
            (b[0] > a[0], f"schedule thresholds must be strictly increasing, got {a[0]} before {b[0]}")
            for a, b in zip(pairs, pairs[1:])
        ]
        checks += [(size > 0, f"batch size must be positive, got {size}") for _, size in pairs]
    for ok, message in checks:
        if not ok:
            raise refuse(
                "--step-batch-size-schedule",
                repr(schedule),
                "num_microbatches_calculator",
                "AssertionError",
                message,
                "thresholds (in tokens) start at 0 and grow, batches are >= 1",
                "fix the schedule",
            )
    return tuple(pairs)


def _step_calculator(
    global_batch_size: int,
    micro_batch_size: int,
    data_parallel_size: int,
    decrease_batch_size_if_needed: bool,
    step_schedule: str,
    seq_length: int | None,
) -> BatchSchedule:
    """Mirror ``StepBatchsizeNumMicroBatchesCalculator.__init__`` (0.19.2): refused with
    --decrease-batch-size-if-needed; the schedule parsed and validated (divisibility is checked per step in
    the training loop: :func:`train_batch_consistency`)."""
    if decrease_batch_size_if_needed:
        raise refuse(
            "--decrease-batch-size-if-needed",
            "set",
            "num_microbatches_calculator",
            "ValueError",
            "Cannot specify both --step-batch-size-schedule and --decrease-batch-size-if-needed",
            "given with --step-batch-size-schedule",
            "drop one of the two",
        )
    steps = parse_step_schedule(step_schedule, seq_length)
    return BatchSchedule(global_batch_size, micro_batch_size, data_parallel_size, False, None, None, steps)


def train_batch_consistency(schedule: BatchSchedule, train_iters: int) -> None:
    """Mirror the training loop's ``update_num_microbatches(consumed, consistency_check=True)`` per step
    (megatron/training/training.py:train).

    With a ramp (0.16.1), every batch size reached must be a multiple of micro * dp (unless
    --decrease-batch-size-if-needed); Megatron-LM fails at the first step that reaches one that is not. A step
    schedule (0.19.2) is checked the same way, and its number of microbatches may not decrease
    (train asserts it when the schedule moves on).
    """
    if schedule.steps is not None:
        _step_consistency(schedule, train_iters)
        return
    if schedule.rampup is None or schedule.decrease_batch_size_if_needed:
        return
    unit = schedule.micro_batch_size * schedule.data_parallel_size
    consumed = 0
    for _ in range(train_iters):
        current = schedule.current_global_batch_size(consumed)
        if current % unit:
            msg = (
                f"current global batch size ({current}) is not divisible by micro-batch-size "
                f"({schedule.micro_batch_size}) timesdata parallel size ({schedule.data_parallel_size})"
            )
            raise refuse(
                "--rampup-batch-size",
                " ".join(map(str, schedule.rampup)),
                "train",
                "AssertionError",
                msg,
                f"the ramp reaches batch {current} at {consumed} consumed samples",
                f"use a start and increment that are multiples of micro x dp = {unit}",
            )
        if consumed > schedule.rampup[2]:
            return  # constant from here on: global batch size was checked by the calculator
        consumed += schedule.running_global_batch_size(consumed)


def _step_consistency(schedule: BatchSchedule, train_iters: int) -> None:
    """The step schedule's per-step checks in train (0.19.2): microbatches never decrease (checked from the
    second iteration on), then the current batch is a multiple of micro * dp."""
    assert schedule.steps is not None
    unit = schedule.micro_batch_size * schedule.data_parallel_size
    value = repr(" ".join(f"{t}:{b}" for t, b in schedule.steps))
    consumed, previous = 0, schedule.steps[0][1] // unit
    for iteration in range(train_iters):
        current = schedule.current_global_batch_size(consumed)
        if iteration and current // unit < previous:
            raise refuse(
                "--step-batch-size-schedule",
                value,
                "train",
                "AssertionError",
                f"Number of microbatches should not decrease; going from {previous} to {current // unit}",
                f"the schedule lowers the batch to {current} at {consumed} consumed samples",
                "give batches that only grow",
            )
        previous = current // unit
        if current % unit:
            msg = (
                f"current global batch size ({current}) is not divisible by micro_batch_size "
                f"({schedule.micro_batch_size}) * data_parallel_size ({schedule.data_parallel_size})"
            )
            raise refuse(
                "--step-batch-size-schedule",
                value,
                "train",
                "AssertionError",
                msg,
                f"the schedule reaches batch {current} at {consumed} consumed samples",
                f"use batches that are multiples of micro x dp = {unit}",
            )
        if consumed >= schedule.steps[-1][0]:
            return  # the last batch from here on
        consumed += current


# -------------------------------------------------------------------------------------- iterations


def update_train_iters(train_iters: int | None, train_samples: int | None, schedule: BatchSchedule) -> int:
    """Mirror ``megatron.training.training.update_train_iters`` (sample-based runs).

    train_iters given: unchanged. Constant batch: train_samples // global batch (a partial last batch
    dropped). With a ramp (0.16.1): steps are counted while consumed <= ramp-up samples and <= train_samples,
    each consuming the current global batch; then the rest at the full batch, a partial last batch dropped.
    With a step schedule (0.19.2): steps are counted while consumed < train_samples, so the count rounds up
    and the last step may consume past train_samples.
    """
    if train_iters:
        return train_iters
    if train_samples is None:
        raise refuse(
            "--train-iters/--train-samples",
            "neither",
            "get_optimizer_param_scheduler",
            "Exception",
            "either train-iters or train-samples should be provided.",
            "the run length is unknown",
            "give --train-iters N or --train-samples N",
        )
    iterations = 0
    consumed = 0
    if schedule.steps is not None:
        while consumed < train_samples:
            consumed += schedule.current_global_batch_size(consumed)
            iterations += 1
        return iterations
    if schedule.rampup is None:
        return train_samples // schedule.global_batch_size
    while consumed <= schedule.rampup[2] and consumed <= train_samples:
        consumed += schedule.current_global_batch_size(consumed)
        iterations += 1
    if train_samples > consumed:
        iterations += (train_samples - consumed) // schedule.global_batch_size
    return iterations


def schedule_fit(schedule: BatchSchedule, total: int) -> tuple[int, int]:
    """(iterations, samples): the most whole batches of the schedule, from the start, whose samples sum to at
    most ``total``. With 0.19.2's step schedule, ``--train-samples`` = those samples makes update_train_iters
    (while consumed < train_samples) stop after exactly those iterations."""
    iterations = consumed = 0
    while True:
        batch = schedule.running_global_batch_size(consumed)
        last = (
            schedule.constant
            or (schedule.steps is not None and consumed >= schedule.steps[-1][0])
            or (schedule.rampup is not None and consumed > schedule.rampup[2])
        )
        if last:  # the final batch from here on: the rest in one step
            more = (total - consumed) // batch
            return iterations + more, consumed + more * batch
        if consumed + batch > total:
            return iterations, consumed
        consumed += batch
        iterations += 1


def schedule_consumed(schedule: BatchSchedule, train_iters: int) -> int:
    """Samples ``train_iters`` iterations consume from the start: the batch schedule summed (the running
    batch, rounded down with --decrease-batch-size-if-needed)."""
    if schedule.constant:
        return train_iters * schedule.running_global_batch_size(0)
    last = schedule.steps[-1][0] if schedule.steps is not None else (schedule.rampup or (0, 0, 0))[2] + 1
    consumed = 0
    for done in range(train_iters):
        if consumed >= last:  # the final batch from here on
            return consumed + (train_iters - done) * schedule.running_global_batch_size(consumed)
        consumed += schedule.running_global_batch_size(consumed)
    return consumed


def get_train_valid_test_num_samples(
    train_iters: int,
    train_samples: int | None,
    global_batch_size: int,
    eval_interval: int | None,
    eval_iters: int,
    full_validation: bool,
    skip_train: bool,
    phase_transition_iterations: Sequence[int] | None,
    iteration: int = 0,
    eval_global_batch_size: int | None = None,
    start_eval_at_iter: int | None = None,
) -> tuple[int, int | None, int]:
    """Mirror ``megatron.training.training.get_train_valid_test_num_samples`` at ``iteration`` (0: a new run).

    train = train_samples or train_iters * gbs; valid = evaluations * eval_iters * eval_gbs with evaluations =
    train_iters // eval_interval + 1, in 0.19.2 minus start_eval_at_iter // eval_interval (at least 0)
    (eval_iters * eval_gbs with --skip-train, None with --full-validation); test = eval_iters * eval_gbs.
    eval_gbs is --eval-global-batch-size (0.19.2), defaulting to the global batch (always it in 0.16.1). With
    --phase-transition-iterations the train request is the current phase's samples.
    """
    eval_gbs = eval_global_batch_size if eval_global_batch_size is not None else global_batch_size
    train = train_samples if train_samples else train_iters * global_batch_size
    valid: int | None
    if full_validation:
        valid = None
    elif skip_train:
        valid = eval_iters * eval_gbs
    else:
        if eval_interval is None:
            raise refuse(
                "--eval-interval",
                "not given",
                "get_train_valid_test_num_samples",
                "TypeError",
                "unsupported operand type(s) for //: 'int' and 'NoneType'",
                f"Megatron-LM {current().version} has no default and divides train_iters by it",
                "give --eval-interval N (or --full-validation / --skip-train)",
            )
        if eval_interval == 0:
            raise refuse(
                "--eval-interval",
                0,
                "get_train_valid_test_num_samples",
                "ZeroDivisionError",
                "integer division or modulo by zero",
                "train_iters is divided by it",
                "give --eval-interval N with N >= 1",
            )
        points = train_iters // eval_interval + 1
        if start_eval_at_iter is not None:
            points = max(0, points - start_eval_at_iter // eval_interval)
        valid = points * eval_iters * eval_gbs
    test = eval_iters * eval_gbs
    if phase_transition_iterations:
        train = _phase_train_samples(train_samples, global_batch_size, phase_transition_iterations, iteration)
    return train, valid, test


def evaluations_run(train_iters: int, eval_interval: int | None, start_eval_at_iter: int | None) -> int:
    """Evaluations a whole run makes on the validation set: the training loop's (at each iteration that is a
    multiple of eval_interval and, in 0.19.2, >= start_eval_at_iter: megatron/training/training.py:train) and
    the one after training (training.py:pretrain, not gated by start_eval_at_iter)."""
    if not eval_interval:
        return 1
    first = max(start_eval_at_iter or 0, 1)
    loop = train_iters // eval_interval - (first - 1) // eval_interval if first <= train_iters else 0
    return loop + 1


def _phase_train_samples(
    train_samples: int | None, global_batch_size: int, phase_transition_iterations: Sequence[int], iteration: int
) -> int:
    """The current phase's train samples (get_train_valid_test_num_samples with phase transitions)."""
    if train_samples is None:
        raise refuse(
            "--phase-transition-iterations",
            ",".join(map(str, phase_transition_iterations)),
            "get_train_valid_test_num_samples",
            "TypeError",
            "'<=' not supported between instances of 'NoneType' and 'int'",
            "the phase bounds end with train_samples, which iteration-based runs leave None",
            "use --train-samples with phase transitions",
        )
    bounds = [0] + [t * global_batch_size for t in phase_transition_iterations] + [train_samples]
    now = iteration * global_batch_size
    last = max(s for s in bounds if s <= now)
    later = [s for s in bounds if s > now]
    if not later:
        raise refuse(
            "--phase-transition-iterations",
            ",".join(map(str, phase_transition_iterations)),
            "get_train_valid_test_num_samples",
            "ValueError",
            "min() arg is an empty sequence",
            "no phase starts after the current iteration",
            "give transitions inside the run",
        )
    return min(later) - last


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


def get_optimizer_param_scheduler(
    train_iters: int | None,
    train_samples: int | None,
    global_batch_size: int,
    lr_decay_iters: int | None,
    lr_decay_samples: int | None,
    lr_warmup_iters: int,
    lr_warmup_samples: int,
    lr_warmup_fraction: float | None,
    lr_wsd_decay_iters: int | None,
    lr_wsd_decay_samples: int | None,
    lr_decay_style: str,
    lr: float | None,
    min_lr: float,
    lr_warmup_init: float,
) -> SchedulerSteps:
    """Mirror the step arithmetic of ``get_optimizer_param_scheduler`` and OptimizerParamScheduler's checks.

    ``train_iters`` is the iteration-based value (before update_train_iters); sample-based runs use samples.
    """
    if train_iters:
        decay_iters = lr_decay_iters if lr_decay_iters is not None else train_iters
        decay = decay_iters * global_batch_size
        wd = train_iters * global_batch_size
        wsd = lr_wsd_decay_iters * global_batch_size if lr_wsd_decay_iters is not None else None
        warmup: float = (
            lr_warmup_fraction * decay if lr_warmup_fraction is not None else lr_warmup_iters * global_batch_size
        )
    elif train_samples:
        decay = lr_decay_samples if lr_decay_samples is not None else train_samples
        wd = train_samples
        wsd = lr_wsd_decay_samples
        warmup = lr_warmup_fraction * decay if lr_warmup_fraction is not None else lr_warmup_samples
    else:
        raise refuse(
            "--train-iters/--train-samples",
            "neither",
            "get_optimizer_param_scheduler",
            "Exception",
            "either train-iters or train-samples should be provided.",
            "the run length is unknown",
            "give --train-iters N or --train-samples N",
        )
    if lr is None:
        raise refuse(
            "--lr",
            "not given",
            "get_optimizer_param_scheduler",
            "TypeError",
            "float() argument must be a string or a real number, not 'NoneType'",
            "the scheduler needs the peak learning rate",
            "give --lr VALUE",
        )
    for ok, flag_name, value in (
        (min_lr >= 0.0, "--min-lr", min_lr),
        (lr >= min_lr, "--lr", lr),
        (lr_warmup_init <= lr, "--lr-warmup-init", lr_warmup_init),
    ):
        if not ok:
            raise refuse(
                flag_name,
                value,
                "get_optimizer_param_scheduler",
                "AssertionError",
                "",
                "the scheduler needs 0 <= --min-lr <= --lr and --lr-warmup-init <= --lr",
                "fix the learning rates",
            )
    flag = "--lr-decay-iters" if train_iters else "--lr-decay-samples"
    if not decay > 0:
        raise refuse(
            flag,
            decay,
            "get_optimizer_param_scheduler",
            "AssertionError",
            "",
            "the LR decay must last at least one sample",
            f"give {flag} >= 1",
        )
    if not warmup < decay:
        raise refuse(
            "--lr-warmup-*",
            warmup,
            "get_optimizer_param_scheduler",
            "AssertionError",
            "",
            f"warmup ({warmup} samples) must end before the decay ({decay} samples)",
            "shorten the warmup or lengthen the decay",
        )
    if lr_decay_style == "WSD" and wsd is None:
        raise refuse(
            "--lr-decay-style",
            "WSD",
            "get_optimizer_param_scheduler",
            "AssertionError",
            "",
            "WSD needs its decay length",
            "give --lr-wsd-decay-iters or --lr-wsd-decay-samples",
        )
    return SchedulerSteps(warmup, int(decay), int(wd), None if wsd is None else int(wsd))


def finite(value: float) -> bool:
    """True for a finite float (not nan, not +-inf)."""
    return math.isfinite(value)
