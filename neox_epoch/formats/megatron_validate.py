"""Megatron-LM's ``validate_args``, mirrored on the flags that matter to a plan, in Megatron-LM's order, and
what cannot be planned (mock data, --sft, --dataloader-type cyclic/external, object storage paths).

Pure: stdlib only; no torch, no megatron import."""

from __future__ import annotations

import argparse
import functools
import math
from typing import Any

from neox_epoch.formats.megatron_data_args import Blend
from neox_epoch.semantics import megatron_batches
from neox_epoch.semantics import megatron_lm as megatron_lm_sem
from neox_epoch.semantics.megatron_lm import MegatronRefusal, refuse


def sanity(ns: argparse.Namespace) -> None:
    """This planner's own value checks (Megatron-LM would run on with nonsense): one line each."""
    for dest in (
        "tensor_model_parallel_size",
        "pipeline_model_parallel_size",
        "context_parallel_size",
        "expert_model_parallel_size",
    ):
        if getattr(ns, dest) < 1:
            _bad(dest, getattr(ns, dest), "a size >= 1")
    for dest in (
        "train_iters",
        "train_samples",
        "eval_iters",
        "lr_decay_iters",
        "lr_decay_samples",
        "lr_warmup_iters",
        "lr_warmup_samples",
        "lr_wsd_decay_iters",
        "lr_wsd_decay_samples",
        "exit_interval",
        "exit_duration_in_mins",
        "eval_interval",
    ):
        value = getattr(ns, dest)
        if value is not None and value < 0:
            _bad(dest, value, "a count >= 0")
    for dest in ("start_eval_at_iter", "override_ckpt_iteration"):
        value = getattr(ns, dest, None)
        if value is not None and value < 0:
            _bad(dest, value, "an iteration >= 0")
    for dest in (
        "seq_length",
        "encoder_seq_length",
        "save_interval",
        "eval_global_batch_size",
        "eval_micro_batch_size",
        "tensor_parallel_num_weight_shards",
    ):
        value = getattr(ns, dest, None)
        if value is not None and value < 1:
            _bad(dest, value, "a count >= 1")
    for dest in ("mid_level_dataset_surplus", "lr_warmup_fraction", "lr", "min_lr", "lr_warmup_init"):
        value = getattr(ns, dest)
        if value is not None and not math.isfinite(value):
            _bad(dest, value, "a finite number")
    if ns.mid_level_dataset_surplus < 0:
        _bad("mid_level_dataset_surplus", ns.mid_level_dataset_surplus, "a surplus >= 0 (0.005 = 0.5%)")
    if ns.lr_warmup_fraction is not None and not 0 <= ns.lr_warmup_fraction <= 1:
        _bad("lr_warmup_fraction", ns.lr_warmup_fraction, "a fraction in [0, 1]")
    if any(v < 0 for v in ns.iterations_to_skip or ()):
        _bad("iterations_to_skip", ns.iterations_to_skip, "iterations >= 0")


def _bad(dest: str, value: object, expected: str) -> None:
    """Raise the planner's one-line value error for --dest."""
    flag = "--" + dest.replace("_", "-")
    raise MegatronRefusal(f"{flag}: {value}: expected {expected}; fix the value", "neox-epoch")


def _deprecated(ns: argparse.Namespace) -> None:
    """Mirror validate_args' refusals of deprecated flags (in its order)."""
    for dest, msg in (
        ("batch_size", "--batch-size argument is no longer valid, use --micro-batch-size instead"),
        ("warmup", "--warmup argument is no longer valid, use --lr-warmup-fraction instead"),
        ("model_parallel_size", "--model-parallel-size is no longer valid, use --tensor-model-parallel-size instead"),
    ):
        if getattr(ns, dest) is not None:
            flag = "--" + dest.replace("_", "-")
            raise refuse(
                flag, getattr(ns, dest), "validate_args", "AssertionError", msg, "a removed flag", msg.split(", ", 1)[1]
            )
    if ns.checkpoint_activations:
        raise refuse(
            "--checkpoint-activations",
            "set",
            "validate_args",
            "SystemExit",
            "",
            "a removed flag: Megatron-LM prints a note and exits",
            "use --recompute-activations (or --recompute-granularity/--recompute-method)",
        )


def phase_transitions(ns: argparse.Namespace) -> tuple[int, ...] | None:
    """Mirror validate_args: --phase-transition-iterations parsed, sorted, refused with a ramp."""
    if not ns.phase_transition_iterations:
        return None
    try:
        phases = tuple(sorted(int(x.strip()) for x in ns.phase_transition_iterations.split(",")))
    except ValueError as err:
        raise refuse(
            "--phase-transition-iterations",
            ns.phase_transition_iterations,
            "validate_args",
            "ValueError",
            str(err),
            "expected comma-separated iterations",
            "e.g. --phase-transition-iterations 1000,2000",
        ) from err
    if ns.rampup_batch_size is not None and megatron_lm_sem.current().phases_refuse_rampup:
        raise refuse(
            "--phase-transition-iterations",
            ns.phase_transition_iterations,
            "validate_args",
            "AssertionError",
            "multi-phase training does not support batch size ramp-up",
            "given with --rampup-batch-size",
            "drop one of the two",
        )
    return phases


def _iteration_or_sample_based(ns: argparse.Namespace) -> None:
    """Mirror validate_args' iteration-based and sample-based blocks (same order, same messages); 0.19.2
    skips them with --skip-train and no longer refuses a ramp-up with --train-iters (it ignores ramp-ups)."""
    rules = megatron_lm_sem.current()
    if ns.skip_train and rules.skip_train_skips_lr_checks:
        return
    if ns.train_iters:
        checks: tuple[tuple[Any, str, Any, str], ...] = (
            (ns.train_samples is None, "--train-samples", ns.train_samples, "expected iteration-based training"),
            (
                ns.lr_decay_samples is None,
                "--lr-decay-samples",
                ns.lr_decay_samples,
                "expected iteration-based learning rate decay",
            ),
            (
                ns.lr_warmup_samples == 0,
                "--lr-warmup-samples",
                ns.lr_warmup_samples,
                "expected iteration-based learning rate warmup",
            ),
            (
                ns.rampup_batch_size is None or not rules.rampup_refused_with_train_iters,
                "--rampup-batch-size",
                " ".join(map(str, ns.rampup_batch_size or [])),
                "expected no batch-size rampup for iteration-based training",
            ),
            (
                ns.lr_warmup_fraction is None or ns.lr_warmup_iters == 0,
                "--lr-warmup-fraction",
                ns.lr_warmup_fraction,
                "can only specify one of lr-warmup-fraction and lr-warmup-iters",
            ),
        )
        mode, fix = "--train-iters", "use the iteration-based flag (or switch the run to --train-samples)"
    elif ns.train_samples:
        checks = (
            (ns.train_iters is None, "--train-iters", ns.train_iters, "expected sample-based training"),
            (
                ns.lr_decay_iters is None,
                "--lr-decay-iters",
                ns.lr_decay_iters,
                "expected sample-based learning rate decay",
            ),
            (
                ns.lr_warmup_iters == 0,
                "--lr-warmup-iters",
                ns.lr_warmup_iters,
                "expected sample-based learnig rate warmup",
            ),
            (
                ns.lr_warmup_fraction is None or ns.lr_warmup_samples == 0,
                "--lr-warmup-fraction",
                ns.lr_warmup_fraction,
                "can only specify one of lr-warmup-fraction and lr-warmup-samples",
            ),
        )
        mode, fix = "--train-samples", "use the sample-based flag (or switch the run to --train-iters)"
    else:
        return
    for ok, flag, value, msg in checks:
        if not ok:
            if flag == "--rampup-batch-size":
                fix = "drop --rampup-batch-size, or give --train-samples instead of --train-iters"
            raise refuse(flag, value, "validate_args", "AssertionError", msg, f"not allowed with {mode}", fix)


def _eval_batch(ns: argparse.Namespace, gbs: int, dp: int) -> None:
    """Mirror validate_args' evaluation batch defaults and check (0.19.2): --eval-global-batch-size defaults to
    the global batch, --eval-micro-batch-size to the micro batch, and the first must be a multiple of the
    second times dp (validate_args sets them on ``ns``, as Megatron-LM sets them on args)."""
    if ns.eval_global_batch_size is None:
        ns.eval_global_batch_size = gbs
    if ns.eval_micro_batch_size is None:
        ns.eval_micro_batch_size = ns.micro_batch_size
    unit = ns.eval_micro_batch_size * dp
    if ns.eval_global_batch_size % unit:
        msg = (
            f"eval_global_batch_size ({ns.eval_global_batch_size}) must be divisible by eval_micro_batch_size "
            f"({ns.eval_micro_batch_size}) * data_parallel_size ({dp})"
        )
        raise refuse(
            "--eval-global-batch-size",
            ns.eval_global_batch_size,
            "validate_args",
            "AssertionError",
            msg,
            "each evaluation step is eval micro x dp x microbatches",
            f"use a multiple of {unit}",
        )


def seq_length_of(ns: argparse.Namespace) -> int | None:
    """Mirror validate_args' sequence-length checks: the 2*cp multiple, --seq-length vs --encoder-seq-length."""
    cp = ns.context_parallel_size
    if ns.seq_length is not None and cp > 1 and ns.seq_length % (cp * 2):
        raise refuse(
            "--seq-length",
            ns.seq_length,
            "validate_args",
            "AssertionError",
            "seq-length should be a multiple of 2 * context-parallel-size if context-parallel-size > 1.",
            f"context parallelism splits each sequence into 2 * {cp} chunks",
            f"use a multiple of {2 * cp}",
        )
    if ns.seq_length is not None:
        if ns.encoder_seq_length is not None:
            raise refuse(
                "--encoder-seq-length",
                ns.encoder_seq_length,
                "validate_args",
                "AssertionError",
                "",
                "given with --seq-length",
                "give only --seq-length",
            )
        return int(ns.seq_length)
    if ns.encoder_seq_length is None:
        raise refuse(
            "--seq-length",
            "not given",
            "validate_args",
            "AssertionError",
            "",
            "the sample length is unknown",
            "give --seq-length N",
        )
    return int(ns.encoder_seq_length)


def validate_args(ns: argparse.Namespace, world_size: int) -> tuple[int, int, str | None]:
    """Mirror Megatron-LM's ``validate_args`` on the plan's flags, in its order.

    Returns (data-parallel size, global batch size, split). Model checks (required --num-layers ...,
    layer divisibility, precision ...) are not repeated here.
    """
    rules = megatron_lm_sem.current()
    gtp = 1
    if rules.gtp_weight_remat:
        gtp = megatron_lm_sem.gtp_weight_remat_size(ns.tensor_model_parallel_size, ns.tensor_parallel_num_weight_shards)
    dp = megatron_lm_sem.data_parallel_size(
        world_size, ns.tensor_model_parallel_size, ns.pipeline_model_parallel_size, ns.context_parallel_size, gtp
    )
    _deprecated(ns)
    split = ns.split
    if ns.data_path is not None and split is None:
        split = "969, 30, 1"
    if (ns.data_path is not None or ns.data_args_path is not None) and not (
        ns.data_path is None or ns.data_args_path is None
    ):
        raise refuse(
            "--data-args-path",
            ns.data_args_path,
            "validate_args",
            "AssertionError",
            "",
            "given with --data-path",
            "give one of the two",
        )
    per_split = any(p is not None for p in (ns.train_data_path, ns.valid_data_path, ns.test_data_path))
    if per_split and ns.per_split_data_args_path is not None:
        raise refuse(
            "--per-split-data-args-path",
            ns.per_split_data_args_path,
            "validate_args",
            "AssertionError",
            "",
            "given with --train/valid/test-data-path",
            "give one of the two",
        )
    phase_transitions(ns)
    if ns.micro_batch_size is None or ns.micro_batch_size <= 0:
        raise refuse(
            "--micro-batch-size",
            ns.micro_batch_size if ns.micro_batch_size is not None else "not given",
            "validate_args",
            "AssertionError",
            "",
            "each step's per-GPU batch is needed",
            "give --micro-batch-size N with N >= 1",
        )
    if rules.step_schedule and ns.step_batch_size_schedule is not None and ns.global_batch_size is not None:
        raise refuse(
            "--global-batch-size",
            ns.global_batch_size,
            "validate_args",
            "ValueError",
            "Cannot specify both --step-batch-size-schedule and --global-batch-size",
            "the step schedule sets the batch",
            "drop --global-batch-size",
        )
    gbs = ns.global_batch_size if ns.global_batch_size is not None else ns.micro_batch_size * dp
    if gbs <= 0:
        raise refuse(
            "--global-batch-size",
            gbs,
            "validate_args",
            "AssertionError",
            "",
            "a batch must hold samples",
            "give --global-batch-size N with N >= 1",
        )
    if rules.eval_batch:
        _eval_batch(ns, gbs, dp)
    _iteration_or_sample_based(ns)
    seq_length_of(ns)
    if ns.save is not None and (ns.save_interval is None or ns.save_interval <= 0):
        raise refuse(
            "--save-interval",
            ns.save_interval if ns.save_interval is not None else "not given",
            "validate_args",
            "AssertionError",
            "",
            "--save needs an interval",
            "give --save-interval N",
        )
    sources = (
        int(bool(ns.mock_data))
        + int(bool(ns.data_path))
        + int(per_split and any((ns.train_data_path, ns.valid_data_path, ns.test_data_path)))
    )
    if sources > 1:
        raise refuse(
            "--mock-data/--data-path/--*-data-path",
            "several",
            "validate_args",
            "AssertionError",
            "A single data source must be provided in training mode, else None",
            "more than one data source given",
            "give exactly one of them",
        )
    return dp, gbs, split


def unplannable(
    ns: argparse.Namespace, blend: Blend | None, per_split: tuple[Blend | None, Blend | None, Blend | None] | None
) -> None:
    """What Megatron-LM runs but this planner cannot plan: one line each (stage "neox-epoch")."""

    def no(flag: str, value: object, why: str, fix: str) -> MegatronRefusal:
        return MegatronRefusal(f"{flag}: {value}: cannot be planned: {why}; {fix}", "neox-epoch")

    if ns.mock_data:
        raise no(
            "--mock-data",
            "set",
            "Megatron-LM generates random tokens, there is no corpus to plan epochs over",
            "give --data-path PREFIX ...",
        )
    if ns.sft:
        raise no("--sft", "set", "SFT datasets pack conversations, not GPT samples", "plan pretraining runs only")
    if ns.dataloader_type in ("cyclic", "external"):
        raise no(
            "--dataloader-type",
            ns.dataloader_type,
            "only the default 'single' sampler draws samples in "
            "order (cyclic reshuffles per pass, external is user code)",
            "drop --dataloader-type",
        )
    blends = [blend] if blend is not None else list(per_split or [])
    for b in blends:
        for prefix in b[0] if b else ():
            if megatron_lm_sem.is_object_storage_path(prefix):
                raise no(
                    "--data-path",
                    prefix,
                    "object storage (s3:// msc://) cannot be read here",
                    "copy the .idx files locally and give the local prefix",
                )
    if blend is None and (per_split is None or not any(per_split)):
        raise no(
            "--data-path",
            "not given",
            f"without data Megatron-LM {megatron_lm_sem.current().version} silently trains on mock data",
            "give --data-path PREFIX ... or --train-data-path ...",
        )


@functools.lru_cache(maxsize=32)
def batch_schedule(
    version: str,
    global_batch_size: int,
    micro_batch_size: int,
    data_parallel_size: int,
    decrease_batch_size_if_needed: bool,
    rampup_batch_size: tuple[int, ...] | None,
    step_batch_size_schedule: str | None,
    seq_length: int | None,
) -> megatron_batches.BatchSchedule:
    """The num-microbatches calculator of Megatron-LM ``version``, built once per input: parsing a line builds it
    for validate_args' checks, :func:`megatron_run` takes the same one (a refusal is not cached: it raises again)."""
    with megatron_lm_sem.using(megatron_lm_sem.RULES[version]):
        return megatron_batches.build_num_microbatches_calculator(
            global_batch_size,
            micro_batch_size,
            data_parallel_size,
            decrease_batch_size_if_needed,
            rampup_batch_size,
            step_batch_size_schedule,
            seq_length,
        )
