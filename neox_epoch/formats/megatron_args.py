"""A pasted Megatron-LM ``pretrain_gpt.py`` command line, parsed the way Megatron-LM parses it.

``parse_megatron_argv(argv)`` reads the argv (optionally with the torchrun launcher in front) with an
argparse parser rebuilt from ``neox_epoch/data/megatron_flags/<version>.json`` (every option of that
Megatron-LM version's ``parse_args``: names, nargs, types, defaults; see scripts/megatron_flags.py; the
version is the one :func:`neox_epoch.semantics.megatron_lm.rules_for` gives for the megatron-core version
planned: 0.16.1 or 0.19.2; plus the ModelOpt options, known as not changing the data), so ``--flag=value``,
repeated flags (the last wins), nargs and Megatron-LM's defaults behave as in Megatron-LM. It then runs
the checks Megatron-LM makes before it builds data (``validate_args``, the num-microbatches calculator)
on the flags that matter to a plan, in Megatron-LM's order, and returns a frozen :class:`MegatronArgs`.
``megatron_run(args)`` gives what the run does with them (:class:`MegatronRun`: train_iters, samples
asked per split, LR schedule steps).

Refused, one line each (:class:`neox_epoch.semantics.megatron_lm.MegatronRefusal`, a ConfigError): what
Megatron-LM refuses (its exception and message kept on the error), an unknown flag (with a did-you-mean)
and what cannot be planned: mock data, --sft, --dataloader-type cyclic/external, object storage paths.

Pure: stdlib and the JSON table; no torch, no megatron import.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from neox_epoch.formats import launch_line
from neox_epoch.formats.megatron_data_args import Blend, data_blends, sequences_per_dataset
from neox_epoch.formats.megatron_flags import (
    build_parser,
    check_unknown,
    given_flags,
    megatron_lm_version,
    option_specs,
)
from neox_epoch.formats.megatron_launcher import launcher_world, resolve_world, split_launcher
from neox_epoch.formats.megatron_validate import (
    batch_schedule,
    phase_transitions,
    sanity,
    seq_length_of,
    unplannable,
    validate_args,
)
from neox_epoch.semantics import megatron_lm as megatron_lm_sem
from neox_epoch.semantics.megatron_lm import MegatronRefusal

#: dests of Megatron-LM options that change what is built or drawn (the rest is "not affecting the plan")
PLAN_DESTS = frozenset(
    {
        "data_path",
        "split",
        "train_data_path",
        "valid_data_path",
        "test_data_path",
        "data_args_path",
        "per_split_data_args_path",
        "data_cache_path",
        "per_dataset_sequences_path",
        "mock_data",
        "multiple_validation_sets",
        "full_validation",
        "mid_level_dataset_surplus",
        "seed",
        "seq_length",
        "encoder_seq_length",
        "sft",
        "dataloader_type",
        "dataloader_fast_cache_load",
        "object_storage_cache_path",
        "micro_batch_size",
        "global_batch_size",
        "rampup_batch_size",
        "decrease_batch_size_if_needed",
        "tensor_model_parallel_size",
        "pipeline_model_parallel_size",
        "context_parallel_size",
        "expert_model_parallel_size",
        "train_iters",
        "train_samples",
        "eval_interval",
        "eval_iters",
        "skip_train",
        "phase_transition_iterations",
        "iterations_to_skip",
        "exit_interval",
        "exit_duration_in_mins",
        "lr_decay_style",
        "lr_decay_iters",
        "lr_decay_samples",
        "lr_warmup_iters",
        "lr_warmup_samples",
        "lr_warmup_fraction",
        "lr_wsd_decay_iters",
        "lr_wsd_decay_samples",
        "save_interval",
        "save",
        "lr",
        "min_lr",
        "lr_warmup_init",
        "batch_size",
        "warmup",
        "model_parallel_size",
        "checkpoint_activations",
        "step_batch_size_schedule",
        "eval_global_batch_size",
        "eval_micro_batch_size",
        "start_eval_at_iter",
        "override_ckpt_iteration",
        "tensor_parallel_num_weight_shards",
    }
)


# ------------------------------------------------------------------------------------------ the result


@dataclass(frozen=True)
class MegatronArgs:
    """A Megatron-LM command line's flags that change what is built or drawn, with Megatron-LM's defaults."""

    argv: tuple[str, ...]
    """The command line as given (launcher part included)."""
    world_size: int
    """GPUs: --world-size, else --nproc-per-node x --nnodes, else 1 (Megatron-LM reads WORLD_SIZE, default 1)."""
    world_size_source: str
    """Where world_size came from, in words."""
    tensor_model_parallel_size: int
    """--tensor-model-parallel-size (default 1)."""
    pipeline_model_parallel_size: int
    """--pipeline-model-parallel-size (default 1)."""
    context_parallel_size: int
    """--context-parallel-size (default 1)."""
    expert_model_parallel_size: int
    """--expert-model-parallel-size (default 1): does not change the data-parallel size in 0.16.1."""
    data_parallel_size: int
    """world // (tp * pp * cp), as validate_args computes it."""
    micro_batch_size: int
    """--micro-batch-size (required)."""
    global_batch_size: int
    """--global-batch-size, else micro * dp (validate_args' default)."""
    global_batch_size_given: bool
    """False when the global batch is validate_args' default micro * dp."""
    rampup_batch_size: tuple[int, int, int] | None
    """--rampup-batch-size START INCREMENT SAMPLES (sample-based runs only)."""
    decrease_batch_size_if_needed: bool
    """--decrease-batch-size-if-needed: round batches down to a multiple of micro * dp."""
    seq_length: int | None
    """--seq-length (or --encoder-seq-length)."""
    blend: Blend | None
    """--data-path (or the --data-args-path file) as get_blend_from_list reads it: (prefixes, weights or None)."""
    blend_per_split: tuple[Blend | None, Blend | None, Blend | None] | None
    """--train/valid/test-data-path (or the --per-split-data-args-path file), per split."""
    split: str | None
    """--split; with --data-path and no --split, validate_args' legacy default "969, 30, 1"."""
    data_args_path: str | None
    """--data-args-path: a file holding the --data-path tokens (read)."""
    per_split_data_args_path: str | None
    """--per-split-data-args-path: a JSON file with train/valid/test blends (read)."""
    data_cache_path: str | None
    """--data-cache-path: where the index files are written (None: next to each prefix)."""
    per_dataset_sequences_path: str | None
    """--per-dataset-sequences-path: a JSON of sequence and document counts per prefix (read)."""
    sequences_per_dataset: tuple[tuple[str, tuple[int, ...]], ...] | None
    """The counts read from --per-dataset-sequences-path, used instead of each .idx header."""
    multiple_validation_sets: bool
    """--multiple-validation-sets: each valid prefix its own dataset."""
    full_validation: bool
    """--full-validation: the valid split is built for one full epoch (no size requested)."""
    mid_level_dataset_surplus: float
    """--mid-level-dataset-surplus (default 0.005): the per-source buffer in a weighted blend."""
    seed: int
    """--seed (default 1234): the shuffles' seed."""
    dataloader_type: str
    """--dataloader-type, "single" by default (the only one planned)."""
    train_iters: int | None
    """--train-iters as given."""
    train_samples: int | None
    """--train-samples as given."""
    eval_interval: int | None
    """--eval-interval (no default in 0.16.1: needed unless --skip-train or --full-validation)."""
    eval_iters: int
    """--eval-iters (default 100 in 0.16.1)."""
    skip_train: bool
    """--skip-train: evaluation only."""
    phase_transition_iterations: tuple[int, ...] | None
    """--phase-transition-iterations, sorted (validate_args sorts them)."""
    iterations_to_skip: tuple[int, ...]
    """--iterations-to-skip: steps that draw their batch but do not train on it."""
    exit_interval: int | None
    """--exit-interval: the run stops at the first multiple of it (fewer samples drawn)."""
    exit_duration_in_mins: int | None
    """--exit-duration-in-mins: the run may stop early (wall clock; not plannable)."""
    lr: float | None
    """--lr: the scheduler refuses a run without it."""
    min_lr: float
    """--min-lr (default 0.0)."""
    lr_warmup_init: float
    """--lr-warmup-init (default 0.0)."""
    lr_decay_style: str
    """--lr-decay-style (default "linear"; "WSD" needs a WSD decay length)."""
    lr_decay_iters: int | None
    """--lr-decay-iters (iteration-based; default train_iters)."""
    lr_decay_samples: int | None
    """--lr-decay-samples (sample-based; default train_samples)."""
    lr_warmup_iters: int
    """--lr-warmup-iters (default 0)."""
    lr_warmup_samples: int
    """--lr-warmup-samples (default 0)."""
    lr_warmup_fraction: float | None
    """--lr-warmup-fraction: warmup = fraction * decay steps."""
    lr_wsd_decay_iters: int | None
    """--lr-wsd-decay-iters."""
    lr_wsd_decay_samples: int | None
    """--lr-wsd-decay-samples."""
    save_interval: int | None
    """--save-interval (required with --save)."""
    not_affecting_plan: tuple[str, ...]
    """Megatron-LM flags given that do not change what is built or drawn (model, optimizer, logging ...)."""
    megatron_lm_version: str
    """The Megatron-LM version whose flags, defaults and rules were used (its option table's version)."""
    step_batch_size_schedule: str | None = None
    """--step-batch-size-schedule "TOKENS:BATCH ..." (0.19.2; None: constant batch)."""
    eval_global_batch_size: int | None = None
    """--eval-global-batch-size after validate_args' default (the global batch) in 0.19.2; None in 0.16.1."""
    eval_micro_batch_size: int | None = None
    """--eval-micro-batch-size after validate_args' default (the micro batch) in 0.19.2; None in 0.16.1."""
    start_eval_at_iter: int | None = None
    """--start-eval-at-iter (0.19.2): no evaluation before this iteration."""
    override_ckpt_iteration: int | None = None
    """--override-ckpt-iteration (0.19.2): a resume starts at this iteration, consumed = it x global batch."""
    gtp_weight_remat_size: int = 1
    """--tensor-parallel-num-weight-shards // tp (0.19.2; 1 by default): a model-parallel axis dp excludes and
    the num-microbatches calculator's dp includes."""
    calculator_data_parallel_size: int = 0
    """The data-parallel size the num-microbatches calculator gets: dp (0.16.1), dp x gtp_weight_remat_size
    (0.19.2 global_vars.set_global_variables); 0: same as data_parallel_size."""
    rampup_ignored: bool = False
    """--rampup-batch-size given to a Megatron-LM that parses and ignores it (0.19.2)."""

    @property
    def rules(self) -> megatron_lm_sem.Rules:
        """The rules of :attr:`megatron_lm_version`."""
        return megatron_lm_sem.RULES[self.megatron_lm_version]

    @property
    def calculator_dp(self) -> int:
        """The num-microbatches calculator's data-parallel size."""
        return self.calculator_data_parallel_size or self.data_parallel_size


def check_foreign(argv: Sequence[str], version: str | None = None) -> None:
    """Another framework's command line (Megatron-DeepSpeed, NeMo, GPT-NeoX's deepy.py) is refused once, in one
    line naming the framework and what is supported, instead of one unknown flag per rerun. ``version``: the
    megatron-core version planned (None: the default rules' table, before the version is known)."""
    version = megatron_lm_sem.rules_for(version).version
    launch_line.refuse_foreign([str(t) for t in argv], option_specs(version), megatron_lm_version(version))


def parse_megatron_argv(argv: Sequence[str], version: str | None = None) -> MegatronArgs:
    """Parse a pasted Megatron-LM (pretrain_gpt.py) command line into :class:`MegatronArgs`.

    ``version``: the megatron-core version planned; its Megatron-LM rules and option table
    (:func:`neox_epoch.semantics.megatron_lm.rules_for`: 0.19.x -> 0.19.2, else 0.16.1). Runs what Megatron-LM
    runs before building data on the plan's flags: parse_args, validate_args and the num-microbatches
    calculator's checks; then refuses what cannot be planned.
    """
    with megatron_lm_sem.using(megatron_lm_sem.rules_for(version)) as rules:
        return _parse(argv, rules)


def _parse(argv: Sequence[str], rules: megatron_lm_sem.Rules) -> MegatronArgs:
    """parse_megatron_argv under ``rules``."""
    check_foreign(argv, rules.version)
    launcher_tokens, tokens = split_launcher([str(t) for t in argv])
    parser = build_parser(rules.version)
    ns, extras = parser.parse_known_args(tokens)
    check_unknown(extras, rules.version)
    world, source = resolve_world(ns, launcher_world(launcher_tokens))
    sanity(ns)
    dp, gbs, split = validate_args(ns, world)
    gtp = (
        megatron_lm_sem.gtp_weight_remat_size(ns.tensor_model_parallel_size, ns.tensor_parallel_num_weight_shards)
        if rules.gtp_weight_remat
        else 1
    )
    rampup = tuple(int(v) for v in ns.rampup_batch_size) if ns.rampup_batch_size is not None else None
    step = getattr(ns, "step_batch_size_schedule", None)
    try:
        batch_schedule(
            rules.version,
            gbs,
            ns.micro_batch_size,
            dp * gtp,
            bool(ns.decrease_batch_size_if_needed),
            rampup if rules.rampup_used else None,
            step,
            seq_length_of(ns),
        )
    except MegatronRefusal as err:
        err.known.update(data_parallel_size=dp, global_batch_size=gbs)
        raise
    blend, per_split = data_blends(ns)
    unplannable(ns, blend, per_split)
    specs = option_specs(rules.version)
    computed: dict[str, Any] = {
        "argv": tuple(str(t) for t in argv),
        "world_size": world,
        "world_size_source": source,
        "data_parallel_size": dp,
        "global_batch_size": gbs,
        "global_batch_size_given": ns.global_batch_size is not None,
        "rampup_batch_size": rampup if rules.rampup_used else None,
        "seq_length": ns.seq_length if ns.seq_length is not None else ns.encoder_seq_length,
        "blend": blend,
        "blend_per_split": per_split,
        "split": split,
        "sequences_per_dataset": sequences_per_dataset(ns.per_dataset_sequences_path),
        "dataloader_type": ns.dataloader_type or "single",
        "phase_transition_iterations": phase_transitions(ns),
        "iterations_to_skip": tuple(ns.iterations_to_skip or ()),
        "not_affecting_plan": tuple(
            f for f in given_flags(tokens) if f in specs and specs[f]["dest"] not in PLAN_DESTS
        ),
        "megatron_lm_version": rules.version,
        "step_batch_size_schedule": step,
        "gtp_weight_remat_size": gtp,
        "calculator_data_parallel_size": dp * gtp,
        "rampup_ignored": rampup is not None and not rules.rampup_used,
    }
    return _from_namespace(ns, computed)


#: how a MegatronArgs field read as is from the namespace is converted, by its annotation
_CONVERT: dict[str, Any] = {"int": int, "float": float, "bool": bool}


def _from_namespace(ns: argparse.Namespace, computed: dict[str, Any]) -> MegatronArgs:
    """MegatronArgs from ``computed`` and, for every other field, the parsed option of the same name (converted by
    the field's annotation: ``int``, ``float``, ``bool``; anything else as parsed). A field this version's table
    does not have keeps its default."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(MegatronArgs):
        if f.name in computed:
            values[f.name] = computed[f.name]
        elif hasattr(ns, f.name):
            value = getattr(ns, f.name)
            convert = _CONVERT.get(str(f.type))
            values[f.name] = convert(value) if convert is not None else value
    return MegatronArgs(**values)
