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
import functools
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from neox_epoch.errors import ConfigError, did_you_mean
from neox_epoch.formats import launch_line
from neox_epoch.semantics import megatron_lm as megatron_lm_sem
from neox_epoch.semantics.megatron_lm import MegatronRefusal, refuse
from neox_epoch.util.inputs import JSON_BYTES, open_input

FLAGS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "megatron_flags")
DEFAULT_VERSION = megatron_lm_sem.MEGATRON_LM_VERSION
WORLD_FLAGS = ("--world-size", "--nproc-per-node", "--nproc_per_node", "--nnodes")
_TYPES: dict[str, Any] = {"int": int, "float": float, "str": str, "bool": bool}

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

Blend = tuple[tuple[str, ...], tuple[float, ...] | None]


@functools.cache
def flag_table(version: str = DEFAULT_VERSION) -> dict[str, Any]:
    """The JSON table of Megatron-LM ``version``'s options (loaded once per version)."""
    with open(os.path.join(FLAGS_DIR, f"{version}.json"), encoding="utf-8") as f:
        return json.load(f)


def megatron_lm_version(version: str = DEFAULT_VERSION) -> str:
    """The Megatron-LM version whose parse_args the table of ``version`` was read from."""
    return str(flag_table(version)["megatron_lm_version"])


def table_versions() -> tuple[str, ...]:
    """The Megatron-LM versions with an option table here (the verified ones of
    :data:`neox_epoch.semantics.megatron_lm.RULES`)."""
    return tuple(megatron_lm_sem.RULES)


class _Parser(argparse.ArgumentParser):
    """argparse, but an error is a one-line ConfigError instead of usage + exit 2."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        raise MegatronRefusal(
            f"{message}: Megatron-LM's parse_args rejects it the same way; fix the value",
            "parse_args",
            "SystemExit",
            "2",
        )


def _add_option(parser: argparse.ArgumentParser, spec: dict[str, Any]) -> None:
    """Re-create one option of Megatron-LM's parser from its table entry."""
    opts, action = spec["options"], spec["action"]
    kw: dict[str, Any] = {"dest": spec["dest"], "default": spec["default"]}
    if action in ("store_true", "store_false"):
        parser.add_argument(*opts, action=action, **kw)
        return
    if action == "boolean_optional":
        parser.add_argument(
            *[o for o in opts if not o.startswith("--no-")], action=argparse.BooleanOptionalAction, **kw
        )
        return
    kw["type"] = _TYPES.get(spec["type"] or "str", str)
    if spec["nargs"] is not None:
        kw["nargs"] = spec["nargs"]
    if spec["choices"] is not None and all(isinstance(c, (str, int, float)) for c in spec["choices"]):
        kw["choices"] = [kw["type"](c) for c in spec["choices"]]
    parser.add_argument(*opts, action="append" if action == "append" else "store", **kw)


@functools.cache
def modelopt_specs(version: str = DEFAULT_VERSION) -> dict[str, dict[str, Any]]:
    """Option string -> table entry of the ModelOpt options (``add_modelopt_args``, which pretrain_gpt.py adds to
    parse_args when nvidia-modelopt is installed: ``--enable-gpt-oss``, the ``--export-kd-*`` distillation
    flags ...). None of them changes what is built or drawn; a name the main table has is left to it."""
    main = {o for spec in flag_table(version)["options"] for o in spec["options"]}
    return {
        o: spec
        for spec in flag_table(version).get("modelopt_options", ())
        for o in spec["options"]
        if not set(spec["options"]) & main
    }


@functools.cache
def _option_specs(version: str = DEFAULT_VERSION) -> dict[str, dict[str, Any]]:
    """Option string -> table entry (Megatron-LM's parse_args options, then the ModelOpt ones)."""
    return {**modelopt_specs(version), **{o: spec for spec in flag_table(version)["options"] for o in spec["options"]}}


def build_parser(version: str = DEFAULT_VERSION) -> argparse.ArgumentParser:
    """An argparse parser with Megatron-LM ``version``'s options (allow_abbrev=False, as Megatron-LM) plus the
    world flags."""
    parser = _Parser(prog="pretrain_gpt.py", allow_abbrev=False, add_help=False)
    for spec in flag_table(version)["options"]:
        _add_option(parser, spec)
    for spec in {id(s): s for s in modelopt_specs(version).values()}.values():
        _add_option(parser, spec)
    clash = [f for f in WORLD_FLAGS if f in _option_specs(version)]
    if clash:
        raise ConfigError(
            f"megatron_flags/{version}.json: {clash[0]} is a Megatron-LM option now; the world flags need new names"
        )
    parser.add_argument("--world-size", dest="ne_world_size", type=int, default=None)
    parser.add_argument("--nproc-per-node", "--nproc_per_node", dest="ne_nproc_per_node", default=None)
    parser.add_argument("--nnodes", dest="ne_nnodes", default=None)
    return parser


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


@dataclass(frozen=True)
class MegatronRun:
    """What Megatron-LM does with a command line: iterations, samples asked per split, the LR schedule."""

    train_iters: int
    """After update_train_iters (sample-based runs: derived from train_samples and the batch schedule)."""
    global_batch_size: int
    """The final global batch."""
    num_samples: tuple[int, int | None, int]
    """get_train_valid_test_num_samples(): train, valid (None: full validation), test."""
    scheduler: megatron_lm_sem.SchedulerSteps
    """The LR schedule's lengths in samples."""
    schedule: megatron_lm_sem.BatchSchedule
    """The batch-size calculator (constant or ramp)."""


# ---------------------------------------------------------------------------------------- argv parsing


def split_launcher(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(launcher tokens, Megatron-LM tokens). Everything up to the ``*.py`` script is the launcher's
    (``torchrun --nproc_per_node 8 pretrain_gpt.py ...``; a ``.py`` value of a Megatron-LM flag is not a script),
    except options given before the launcher and ``--world-size``: those count as if given after the script
    (one given again there with another value is refused). A Megatron-LM flag among torchrun's is refused."""
    line = launch_line.cut([str(t) for t in argv], _option_specs(megatron_lm_sem.current().version))
    launch_line.check_given_twice(line.before, line.after, line.script)
    return line.launcher, line.before + line.after


def _launcher_world(tokens: list[str]) -> dict[str, str]:
    """The launcher ("launcher": torchrun, python or another's name) and torchrun's --nproc-per-node ("nproc")
    and --nnodes ("nnodes"), as torchrun reads them (either spelling, ``=value``, unique prefixes)."""
    return launch_line.launcher_world(tokens)


def _positive_int(flag: str, value: str) -> int:
    """An integer >= 1 for a world flag, else a one-line error."""
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise ConfigError(
            f"{flag}: {value!r}: expected a whole number of GPUs/nodes >= 1 (an elastic range "
            "like 1:4 has no fixed world size); give --world-size N"
        )
    return n


def _launched(ns: argparse.Namespace, launcher: dict[str, str]) -> tuple[str | None, str | None]:
    """(nproc, nnodes) of the line: torchrun's own flags, or the world flags after the script; both given and
    different is refused."""
    out = []
    for flag, dest, key in (("--nproc-per-node", "ne_nproc_per_node", "nproc"), ("--nnodes", "ne_nnodes", "nnodes")):
        given, launched = getattr(ns, dest), launcher.get(key)
        if given is not None and launched is not None and given != launched:
            raise ConfigError(f"{flag}: {given} after the script and {launched} in the launcher's flags; give it once")
        out.append(given if given is not None else launched)
    return out[0], out[1]


def resolve_world(ns: argparse.Namespace, launcher: dict[str, str]) -> tuple[int, str]:
    """(world size, its source in words). An explicit --world-size wins: it is the whole job's GPUs (the pasted
    torchrun line is one launch of it: one node's, or a test run's), and when torchrun's --nproc-per-node x
    --nnodes differs the source says so. Else nproc x nnodes (torchrun's flags or ours); else python alone is one
    process; another launcher (deepspeed, srun ...) is not read, so --world-size is needed."""
    nproc, nnodes = _launched(ns, launcher)
    started = ""
    if nproc is not None or nnodes is not None:
        started = f"--nproc-per-node {nproc or 1} x --nnodes {nnodes or 1}"
    if ns.ne_world_size is not None:
        world = _positive_int("--world-size", str(ns.ne_world_size))
        if not started:
            return world, "--world-size"
        try:
            n = _positive_int("--nproc-per-node", nproc or "1") * _positive_int("--nnodes", nnodes or "1")
        except ConfigError:
            return world, f"--world-size; the launcher's {started} is not a fixed world"
        if n == world:
            return world, f"--world-size, equal to the launcher's {started}"
        return world, (
            f"--world-size; it wins over the {n} processes the pasted launcher starts, {started}: "
            "--world-size is read as the whole job's GPUs, the pasted line as one launch of it, one node's"
        )
    if started:
        p = _positive_int("--nproc-per-node", nproc or "1")
        n = _positive_int("--nnodes", nnodes or "1")
        return p * n, f"--nproc-per-node {p} x --nnodes {n}"
    program = launcher.get("launcher")
    if program in (None, "python", "torchrun"):
        why = "python starts one process" if program == "python" else "Megatron-LM reads WORLD_SIZE"
        return 1, f"default 1 ({why}; give --world-size N)"
    raise ConfigError(
        f"{program}: a launcher whose world neox-epoch does not read (it reads torchrun's "
        "--nproc-per-node x --nnodes); give --world-size N, the GPUs the run uses"
    )


def given_flags(tokens: Sequence[str]) -> list[str]:
    """The option strings present in ``tokens`` (``--flag=value`` counted as ``--flag``), in order, once each."""
    out: list[str] = []
    for tok in tokens:
        name = tok.partition("=")[0]
        if name.startswith("--") and name not in out:
            out.append(name)
    return out


def other_versions_wording(name: str, version: str) -> str | None:
    """For a flag that ``version``'s table lacks but another known table has: "added after 0.16.1 (in
    Megatron-LM 0.19.2)" / "removed after 0.16.1 (not in 0.19.2)" (None: no known version has it)."""
    has = [v for v in table_versions() if v != version and name in _option_specs(v)]
    if not has:
        return None
    later = [v for v in has if _version_key(v) > _version_key(version)]
    if later:
        return f"added after {version} (in Megatron-LM {', '.join(later)})"
    return f"removed after {', '.join(has)} (not in {version})"


def _version_key(version: str) -> tuple[int, ...]:
    """'0.19.2' -> (0, 19, 2)."""
    return tuple(int(p) for p in version.split(".")[:3] if p.isdigit())


def _check_unknown(extras: list[str], version: str = DEFAULT_VERSION) -> None:
    """An unknown flag (with a did-you-mean, or the known version that has it) or a stray value is a one-line
    error."""
    if not extras:
        return
    tok = extras[0]
    if tok.startswith("-"):
        name = tok.partition("=")[0]
        fork = (
            " (a Megatron-DeepSpeed flag)"
            if name in launch_line.MEGATRON_DEEPSPEED_FLAGS
            else " (a flag Megatron-LM removed)"
            if name in launch_line.OLD_MEGATRON_FLAGS
            else ""
        )
        other = None if fork else other_versions_wording(name, version)
        if other is not None:
            raise MegatronRefusal(
                f"{name}: not a Megatron-LM {version} flag: {other}; Megatron-LM {version}'s "
                "parse_args exits on it; drop it, or plan for the version that has it with "
                "--framework-version",
                "parse_args",
                "SystemExit",
                "2",
            )
        choices = list(_option_specs(version)) + list(WORLD_FLAGS)
        raise MegatronRefusal(
            f"{name}: not a Megatron-LM {version} flag{fork or did_you_mean(name, choices)}: "
            "Megatron-LM's parse_args exits on it; fix or drop it",
            "parse_args",
            "SystemExit",
            "2",
        )
    raise MegatronRefusal(
        f"{tok!r}: a value without a flag (the flag before it takes fewer values): Megatron-LM's "
        "parse_args exits on it; fix the command line",
        "parse_args",
        "SystemExit",
        "2",
    )


# ----------------------------------------------------------------------------------------- data files


def _read_text(flag: str, path: str) -> str:
    """A file a flag names, or a one-line error."""
    try:
        with open_input(path, f"file {flag} names", JSON_BYTES, encoding="utf-8") as f:
            return str(f.read())
    except ConfigError as err:  # (open_input's line names the path first)
        raise ConfigError(f"{flag}: {path}: cannot be read: {str(err).removeprefix(path + ': ')}") from None
    except OSError as err:
        raise ConfigError(f"{flag}: {path}: cannot be read ({err.strerror}); give an existing file") from err


def _read_json(flag: str, path: str) -> Any:
    """A JSON file a flag names, or a one-line error."""
    try:
        return json.loads(_read_text(flag, path))
    except json.JSONDecodeError as err:
        raise ConfigError(f"{flag}: {path}: not JSON ({err.msg} at line {err.lineno}); fix the file") from err


def _blend(tokens: Sequence[str] | None) -> Blend | None:
    """get_blend_from_list as a frozen tuple."""
    got = megatron_lm_sem.get_blend_from_list(tokens)
    if got is None:
        return None
    return tuple(got[0]), None if got[1] is None else tuple(got[1])


def _per_split_from_file(path: str) -> tuple[Blend | None, Blend | None, Blend | None]:
    """--per-split-data-args-path: {"train": ..., "valid": ..., "test": ...}, each a list or a string."""
    data = _read_json("--per-split-data-args-path", path)
    if not isinstance(data, dict) or any(k not in data for k in ("train", "valid", "test")):
        raise ConfigError(
            f"--per-split-data-args-path: {path}: expected a JSON object with keys train, valid, test "
            "(Megatron-LM raises KeyError without one); add the missing key (null for none)"
        )
    out = []
    for key in ("train", "valid", "test"):
        value = data[key]
        out.append(_blend(value.split() if isinstance(value, str) else value))
    return out[0], out[1], out[2]


def _sequences_per_dataset(path: str | None) -> tuple[tuple[str, tuple[int, ...]], ...] | None:
    """--per-dataset-sequences-path: {prefix: [sequence count, document count]}."""
    if path is None:
        return None
    data = _read_json("--per-dataset-sequences-path", path)
    if not isinstance(data, dict):
        raise ConfigError(
            f"--per-dataset-sequences-path: {path}: expected a JSON object prefix -> [sequences, "
            "documents]; fix the file"
        )
    return tuple((str(k), tuple(int(x) for x in v)) for k, v in sorted(data.items()))


def _data(ns: argparse.Namespace) -> tuple[Blend | None, tuple[Blend | None, Blend | None, Blend | None] | None]:
    """Mirror get_blend_and_blend_per_split: (blend, blend_per_split), reading the args files."""
    if ns.data_path is not None or ns.data_args_path is not None:
        if ns.data_args_path is not None:
            return _blend(_read_text("--data-args-path", ns.data_args_path).split()), None
        return _blend(ns.data_path), None
    if any(p is not None for p in (ns.train_data_path, ns.valid_data_path, ns.test_data_path)):
        return None, (_blend(ns.train_data_path), _blend(ns.valid_data_path), _blend(ns.test_data_path))
    if ns.per_split_data_args_path is not None:
        return None, _per_split_from_file(ns.per_split_data_args_path)
    return None, None


# ----------------------------------------------------------------------------------------- validation


def _sanity(ns: argparse.Namespace) -> None:
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


def _phases(ns: argparse.Namespace) -> tuple[int, ...] | None:
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
        checks = (
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


def _seq_length(ns: argparse.Namespace) -> int | None:
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
    _phases(ns)
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
    _seq_length(ns)
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


def _unplannable(
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


def check_foreign(argv: Sequence[str], version: str | None = None) -> None:
    """Another framework's command line (Megatron-DeepSpeed, NeMo, GPT-NeoX's deepy.py) is refused once, in one
    line naming the framework and what is supported, instead of one unknown flag per rerun. ``version``: the
    megatron-core version planned (None: the default rules' table, before the version is known)."""
    version = megatron_lm_sem.rules_for(version).version
    launch_line.refuse_foreign([str(t) for t in argv], _option_specs(version), megatron_lm_version(version))


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
    _check_unknown(extras, rules.version)
    world, source = resolve_world(ns, _launcher_world(launcher_tokens))
    _sanity(ns)
    dp, gbs, split = validate_args(ns, world)
    gtp = (
        megatron_lm_sem.gtp_weight_remat_size(ns.tensor_model_parallel_size, ns.tensor_parallel_num_weight_shards)
        if rules.gtp_weight_remat
        else 1
    )
    rampup = tuple(int(v) for v in ns.rampup_batch_size) if ns.rampup_batch_size is not None else None
    step = getattr(ns, "step_batch_size_schedule", None)
    try:
        megatron_lm_sem.build_num_microbatches_calculator(
            gbs, ns.micro_batch_size, dp * gtp, ns.decrease_batch_size_if_needed, rampup, step, _seq_length(ns)
        )
    except MegatronRefusal as err:
        err.known.update(data_parallel_size=dp, global_batch_size=gbs)
        raise
    blend, per_split = _data(ns)
    _unplannable(ns, blend, per_split)
    specs = _option_specs(rules.version)
    ignored = [f for f in given_flags(tokens) if f in specs and specs[f]["dest"] not in PLAN_DESTS]
    return MegatronArgs(
        argv=tuple(str(t) for t in argv),
        world_size=world,
        world_size_source=source,
        tensor_model_parallel_size=ns.tensor_model_parallel_size,
        pipeline_model_parallel_size=ns.pipeline_model_parallel_size,
        context_parallel_size=ns.context_parallel_size,
        expert_model_parallel_size=ns.expert_model_parallel_size,
        data_parallel_size=dp,
        micro_batch_size=ns.micro_batch_size,
        global_batch_size=gbs,
        global_batch_size_given=ns.global_batch_size is not None,
        rampup_batch_size=rampup if rules.rampup_used else None,  # type: ignore[arg-type]
        decrease_batch_size_if_needed=bool(ns.decrease_batch_size_if_needed),
        seq_length=ns.seq_length if ns.seq_length is not None else ns.encoder_seq_length,
        blend=blend,
        blend_per_split=per_split,
        split=split,
        data_args_path=ns.data_args_path,
        per_split_data_args_path=ns.per_split_data_args_path,
        data_cache_path=ns.data_cache_path,
        per_dataset_sequences_path=ns.per_dataset_sequences_path,
        sequences_per_dataset=_sequences_per_dataset(ns.per_dataset_sequences_path),
        multiple_validation_sets=bool(ns.multiple_validation_sets),
        full_validation=bool(ns.full_validation),
        mid_level_dataset_surplus=float(ns.mid_level_dataset_surplus),
        seed=int(ns.seed),
        dataloader_type=ns.dataloader_type or "single",
        train_iters=ns.train_iters,
        train_samples=ns.train_samples,
        eval_interval=ns.eval_interval,
        eval_iters=int(ns.eval_iters),
        skip_train=bool(ns.skip_train),
        phase_transition_iterations=_phases(ns),
        iterations_to_skip=tuple(ns.iterations_to_skip or ()),
        exit_interval=ns.exit_interval,
        exit_duration_in_mins=ns.exit_duration_in_mins,
        lr=ns.lr,
        min_lr=float(ns.min_lr),
        lr_warmup_init=float(ns.lr_warmup_init),
        lr_decay_style=ns.lr_decay_style,
        lr_decay_iters=ns.lr_decay_iters,
        lr_decay_samples=ns.lr_decay_samples,
        lr_warmup_iters=int(ns.lr_warmup_iters),
        lr_warmup_samples=int(ns.lr_warmup_samples),
        lr_warmup_fraction=ns.lr_warmup_fraction,
        lr_wsd_decay_iters=ns.lr_wsd_decay_iters,
        lr_wsd_decay_samples=ns.lr_wsd_decay_samples,
        save_interval=ns.save_interval,
        not_affecting_plan=tuple(ignored),
        megatron_lm_version=rules.version,
        step_batch_size_schedule=step,
        eval_global_batch_size=getattr(ns, "eval_global_batch_size", None),
        eval_micro_batch_size=getattr(ns, "eval_micro_batch_size", None),
        start_eval_at_iter=getattr(ns, "start_eval_at_iter", None),
        override_ckpt_iteration=getattr(ns, "override_ckpt_iteration", None),
        gtp_weight_remat_size=gtp,
        calculator_data_parallel_size=dp * gtp,
        rampup_ignored=rampup is not None and not rules.rampup_used,
    )


def _dataset_config(args: MegatronArgs) -> None:
    """Mirror the GPTDatasetConfig checks core_gpt_dataset_config_from_args triggers."""
    if args.blend_per_split is not None and any(args.blend_per_split):
        if args.split is not None:
            raise refuse(
                "--split",
                args.split,
                "core_gpt_dataset_config_from_args",
                "AssertionError",
                "split and blend_per_split are incompatible",
                "per-split data paths are not split",
                "drop --split",
            )
        for b in args.blend_per_split:
            if b is not None and b[1] is not None and len(b[0]) != len(b[1]):
                raise refuse(
                    "--*-data-path",
                    b,
                    "core_gpt_dataset_config_from_args",
                    "AssertionError",
                    "blend per split prefixes and weights must be equal in number",
                    "",
                    "fix the blend",
                )
    elif args.blend is not None and args.split is None:
        raise refuse(
            "--split",
            "not given",
            "core_gpt_dataset_config_from_args",
            "AssertionError",
            "split must be provided when blend is not None",
            "--data-args-path gets no legacy default split",
            "give --split e.g. 969,30,1",
        )


def megatron_run(args: MegatronArgs) -> MegatronRun:
    """What Megatron-LM does with the command line, in its order: the LR scheduler (update_train_iters for
    sample-based runs), get_train_valid_test_num_samples, the dataset config's checks, under the rules of
    ``args.megatron_lm_version``."""
    with megatron_lm_sem.using(args.rules):
        return _run(args)


def _run(args: MegatronArgs) -> MegatronRun:
    """megatron_run under the rules in force."""
    known: dict[str, object] = {
        "data_parallel_size": args.data_parallel_size,
        "global_batch_size": args.global_batch_size,
    }
    try:
        schedule = megatron_lm_sem.build_num_microbatches_calculator(
            args.global_batch_size,
            args.micro_batch_size,
            args.calculator_dp,
            args.decrease_batch_size_if_needed,
            args.rampup_batch_size,
            args.step_batch_size_schedule,
            args.seq_length,
        )
        if not args.train_iters and args.train_samples:
            train_iters = megatron_lm_sem.update_train_iters(args.train_iters, args.train_samples, schedule)
        else:
            train_iters = args.train_iters or 0
        steps = megatron_lm_sem.get_optimizer_param_scheduler(
            args.train_iters,
            args.train_samples,
            args.global_batch_size,
            args.lr_decay_iters,
            args.lr_decay_samples,
            args.lr_warmup_iters,
            args.lr_warmup_samples,
            args.lr_warmup_fraction,
            args.lr_wsd_decay_iters,
            args.lr_wsd_decay_samples,
            args.lr_decay_style,
            args.lr,
            args.min_lr,
            args.lr_warmup_init,
        )
        known.update(
            train_iters=train_iters,
            scheduler=steps,
            train_consumed=megatron_lm_sem.schedule_consumed(schedule, train_iters),
        )
        num = megatron_lm_sem.get_train_valid_test_num_samples(
            train_iters,
            args.train_samples,
            args.global_batch_size,
            args.eval_interval,
            args.eval_iters,
            args.full_validation,
            args.skip_train,
            args.phase_transition_iterations,
            eval_global_batch_size=args.eval_global_batch_size,
            start_eval_at_iter=args.start_eval_at_iter,
        )
        known.update(num_samples=num)
        _dataset_config(args)
        _builder_sizes(args, num)
        megatron_lm_sem.train_batch_consistency(schedule, train_iters)
    except MegatronRefusal as err:
        err.known.update(known)
        raise
    return MegatronRun(train_iters, args.global_batch_size, num, steps, schedule)


def _builder_sizes(args: MegatronArgs, num: tuple[int, int | None, int]) -> None:
    """Mirror ``BlendedMegatronDatasetBuilder.__init__``'s check: a split asked for no size (the valid split
    with --full-validation) must have no weights."""
    if num[1] is not None:
        return
    if args.blend_per_split is not None:
        weighted = args.blend_per_split[1] is not None and args.blend_per_split[1][1] is not None
    else:
        weighted = args.blend is not None and args.blend[1] is not None
    if weighted:
        message = (
            "size_is_none => weights_are_none fails \n"
            + " " * 20
            + "for valid split\n"
            + " " * 20
            + "This can occur with multiple validation sets if datasets have weights"
        )
        raise refuse(
            "--full-validation",
            "set",
            "builder",
            "AssertionError",
            message,
            "the valid split is asked for no size, and a blend with weights needs one",
            "drop the weights (blend by length) or drop --full-validation",
        )
