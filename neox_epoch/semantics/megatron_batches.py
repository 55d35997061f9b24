"""Megatron-LM's batch sizes: the num-microbatches calculator (constant, batch-size rampup) and the step
batch-size schedule (0.19.2), with the checks Megatron-LM makes on them.

Pure: no torch, no megatron import."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from neox_epoch.semantics.megatron_lm import current, refuse

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
