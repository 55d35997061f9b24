"""Megatron-LM's learning-rate schedule lengths: ``get_optimizer_param_scheduler``'s arithmetic and checks.

Pure: no torch, no megatron import."""

from __future__ import annotations

from dataclasses import dataclass

from neox_epoch.semantics.megatron_lm import refuse

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
