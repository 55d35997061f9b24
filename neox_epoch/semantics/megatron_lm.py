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


# -------------------------------------------------------------------------------------- iterations


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


def finite(value: float) -> bool:
    """True for a finite float (not nan, not +-inf)."""
    return math.isfinite(value)
