"""NeoX YAML configs: load and merge several files as NeoX does, validate keys and types, derive the batch
as NeoX does, and turn them into a :class:`~neox_epoch.plan.planner.PlanInput`. Also the ``neox_epoch`` block.

NeoX's ``NeoXArgs.from_ymls`` merges the YAML files in order and stores keys with ``-`` turned into ``_``;
a key already loaded is an error when written with ``_`` and silently replaced when written with ``-``
(:func:`load_neox_configs`). Unknown keys make NeoX fail with a bare ``TypeError``; here they get a
did-you-mean, or the replacement of a key NeoX removed. ``calculate_derived`` then counts the GPUs (a
hostfile, ``global_num_gpus`` or ``torch.cuda.device_count()``) and derives train_batch_size; the same count
comes from :mod:`neox_epoch.batch.world` (shared with ``check-batch``) in :func:`neox_batch`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

from neox_epoch.batch.check import batch_errors, derive_batch
from neox_epoch.batch.config import LauncherSettings, neox_launcher
from neox_epoch.batch.world import NeoxCount, neox_gpu_count, neox_hostfile_path
from neox_epoch.errors import BatchError, ConfigError, did_you_mean
from neox_epoch.plan.inputs import NeoxOptions, PlanInput, SourceSpec
from neox_epoch.plan.schedule import NEOX_DECAY_STYLES, NeoxScheduleKeys
from neox_epoch.util.textfile import read_config_text

BLOCK = "neox_epoch"


@dataclass(frozen=True)
class EpochBlock:
    """The ``neox_epoch`` block of a NeoX config: what the plugin is asked to do."""

    epochs: float | dict[str, float] | None = None
    """Passes over the train data: one number for all sources, or a map per source path or name."""
    blend_buffer: float | str | None = None
    """Replaces NeoX's 1.005 per-source factor: a number (1.0 = none) or "exact" for blend targets.
    Default: 1.0 for one source, "exact" for blends."""
    separate_epochs: bool = False
    """Shuffle each epoch on its own so that pass k ends at a known iteration (NeoX #1268)."""
    log_dir: str | None = None
    """Directory for the JSONL records (plan at build time, live counters, final report)."""
    enforce: bool = False
    """Fail, rather than warn, when the run cannot be exact (and on a silent index wrap)."""
    targets: dict[str, int] | None = None
    """Written by ``plan --write-config`` for blends: exact samples per source (re-checked when used)."""
    weights: list[float] | None = None
    """Written by ``plan --write-config`` for blends: the blend weights verified to draw the targets."""

    @staticmethod
    def from_mapping(raw: Any, where: str) -> EpochBlock:
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: {BLOCK}: expected a mapping such as {{\"epochs\": 1}}, found {raw!r}")
        fields = {k.replace("-", "_"): v for k, v in raw.items()}
        known = set(EpochBlock.__dataclass_fields__)
        for k in fields:
            if k not in known:
                raise ConfigError(f"{where}: {BLOCK}.{k}: unknown key{did_you_mean(k, known)}; known keys: {sorted(known)}")
        ep = fields.get("epochs")
        if ep is not None:
            if isinstance(ep, dict):
                for name, v in ep.items():
                    _number(v, f"{where}: {BLOCK}.epochs.{name}", positive=True)
            else:
                _number(ep, f"{where}: {BLOCK}.epochs", positive=True)
        bb = fields.get("blend_buffer")
        if bb is not None and bb != "exact":
            _number(bb, f"{where}: {BLOCK}.blend_buffer", positive=True)
            if float(bb) < 1.0:
                raise ConfigError(f"{where}: {BLOCK}.blend_buffer: {bb} is below 1.0; expected >= 1.0 or \"exact\"")
        for key in ("separate_epochs", "enforce"):
            if key in fields and not isinstance(fields[key], bool):
                raise ConfigError(f"{where}: {BLOCK}.{key}: expected true or false, found {fields[key]!r}")
        tg, wt = fields.get("targets"), fields.get("weights")
        if tg is not None and (not isinstance(tg, dict) or not all(
                isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in tg.values())):
            raise ConfigError(f"{where}: {BLOCK}.targets: expected a map of source -> positive integer samples, "
                              f"found {tg!r}; rewrite it with neox-epoch plan --write-config")
        if wt is not None and (not isinstance(wt, list) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in wt)):
            raise ConfigError(f"{where}: {BLOCK}.weights: expected a list of positive numbers, found {wt!r}; "
                              "rewrite it with neox-epoch plan --write-config")
        if fields.get("log_dir") is not None and not isinstance(fields["log_dir"], str):
            raise ConfigError(f"{where}: {BLOCK}.log_dir: expected a directory path string, found {fields['log_dir']!r}")
        return EpochBlock(**fields)

    def to_mapping(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None and v is not False}


#: NeoX config keys removed or renamed upstream: key -> (replacement, what happened and what to write)
RENAMED_KEYS: dict[str, tuple[str, str]] = {
    "gas": ("gradient_accumulation_steps",
            "removed in NeoX PR #1144 (2024); it never changed the batch, which always used "
            "gradient_accumulation_steps (default 1): remove it to keep the batch you had, or write "
            "gradient_accumulation_steps: N for N accumulation steps"),
    "save_interval": ("checkpoint_factor",
                      "replaced by checkpoint_factor in NeoX PR #737 (2022): write checkpoint_factor: N to save "
                      "every N iterations"),
}


@dataclass(frozen=True)
class NeoxConfig:
    """Merged NeoX config values (keys normalized to ``_``) and where each came from."""

    values: dict[str, Any]
    """Merged key -> value, without the neox_epoch block."""
    origin: dict[str, str]
    """Key -> the file that set it last."""
    block: EpochBlock | None = None
    """The neox_epoch block, if any file had one."""
    files: tuple[str, ...] = field(default_factory=tuple)
    """The files, in merge order."""
    written: dict[str, str] = field(default_factory=dict)
    """Key -> the key as written in the file that set it last (``train-iters``), for messages."""
    notes: tuple[str, ...] = ()
    """What NeoX does silently with these files (a key set again under its other spelling)."""
    block_origin: str = ""
    """The file that holds the neox_epoch block ('' when none does)."""


def deepy_config_paths(files: list[str], conf_dir: str | None = None) -> list[str]:
    """The config files as deepy.py resolves them (NeoXArgs.consume_deepy_args): ``-d/--conf_dir`` prefixed
    to each, and ``.yml`` appended to a name ending in neither ``.yml`` nor ``.json`` (``125M`` -> ``125M.yml``)."""
    paths = [os.path.join(conf_dir, f) for f in files] if conf_dir else list(files)
    return [p if p.endswith((".yml", ".json")) else p + ".yml" for p in paths]


def known_neox_keys() -> dict[str, str]:
    """NeoX's config key names and declared types (from neox_epoch/data/neox_keys.json)."""
    text = resources.files("neox_epoch").joinpath("data/neox_keys.json").read_text(encoding="utf-8")
    return dict(json.loads(text)["keys"])


def _read_yaml(path: str) -> dict[str, Any]:
    """One config file's top-level mapping; ConfigError for a missing, empty, invalid or non-mapping file."""
    text = read_config_text(path, "NeoX YAML config file")
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}: is not valid YAML{at} ({getattr(err, 'problem', err)}); expected a NeoX "
                          "YAML config") from None
    if raw is None:
        raise ConfigError(f"{path}: is empty; NeoX stops on an empty config file (AttributeError: 'NoneType' object "
                          "has no attribute 'items'): add config keys to it or leave it out")
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: holds a {type(raw).__name__}, not a mapping of config keys; expected a NeoX "
                          "YAML config")
    return raw


class _Merge:
    """The state of NeoX's ``from_ymls`` loop over the files: merged values, origins and notes."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.origin: dict[str, str] = {}
        self.written: dict[str, str] = {}
        self.notes: list[str] = []
        self.block: EpochBlock | None = None
        self.block_origin = ""

    def add(self, path: str, written: str, value: Any) -> None:
        """One key of one file, with NeoX's rule for a key seen before.

        NeoX raises when the key *as written* is already among the loaded keys (which are stored after
        ``-`` -> ``_``): ``train_iters`` after ``train-iters`` or ``train_iters`` is an error. Written with a
        ``-`` the key never matches, so ``train-iters`` after ``train_iters`` (or after ``train-iters``)
        silently replaces the earlier value; that is kept, and noted.
        """
        k = written.replace("-", "_")
        if k == BLOCK:
            if self.block is not None:
                raise ConfigError(f"{path}: {BLOCK}: already given in {self.block_origin}; keep one {BLOCK} block")
            self.block = EpochBlock.from_mapping(value, path)
            self.block_origin = path
            return
        if written in self.values:
            before = self.written[k]
            spelled = f" (as {before})" if before != written else ""
            raise ConfigError(
                f"{path}: {written}: already set in {self.origin[k]}{spelled}; NeoX stops on a key given twice "
                f"(\"duplicate keys with previously loaded file: {written}\"): keep it in one file"
            )
        if k in self.values:
            self.notes.append(
                f"{path}: {written} = {value!r} replaces {self.written[k]} = {self.values[k]!r} from {self.origin[k]}: "
                "NeoX keeps the later value without an error when the later file writes the key with '-' (as the "
                "overlays of plan --write-config do on purpose; elsewhere, check that the later value is the one meant)"
            )
        self.values[k] = value
        self.origin[k] = path
        self.written[k] = written


def _check_known(merge: _Merge, known: dict[str, str]) -> None:
    """NeoX's ``NeoXArgs(**config)``: the first unknown key (in merged order) stops it with a TypeError."""
    for k in merge.values:
        if k in known:
            continue
        where = f"{merge.origin[k]}: {merge.written[k]}"
        if k in RENAMED_KEYS:
            new, what = RENAMED_KEYS[k]
            raise ConfigError(f"{where}: NeoX no longer accepts this key (TypeError: unexpected keyword argument "
                              f"'{k}'); {what}: use {new}")
        raise ConfigError(f"{where}: unknown NeoX config key{did_you_mean(k, known)}; NeoX stops with TypeError: "
                          f"unexpected keyword argument '{k}': remove it or correct its name")


def load_neox_configs(paths: list[str], check_keys: bool = True) -> NeoxConfig:
    """Load and merge NeoX YAML files in order, as ``NeoXArgs.from_ymls`` does.

    Like NeoX: a key given again is an error when the later file writes it with ``_`` (the spelling NeoX
    stores), and silently replaces the earlier value when the later file writes it with ``-`` (kept, and
    recorded in :attr:`NeoxConfig.notes`); two files with the same basename are an error (checked after
    the file's keys, as NeoX does); an empty file is an error. With ``check_keys``, unknown keys are then
    reported like NeoX's ``TypeError`` (the first one in merged order), with a did-you-mean, or with the
    replacement of a key NeoX removed (:data:`RENAMED_KEYS`).
    """
    merge = _Merge()
    basenames: dict[str, str] = {}
    for path in paths:
        for key, value in _read_yaml(path).items():
            merge.add(path, str(key), value)
        base = os.path.basename(path)
        if base in basenames:
            raise ConfigError(
                f"{path}: same file name as {basenames[base]}; NeoX refuses two config files with the same name "
                "(it saves them side by side with the checkpoint): rename one"
            )
        basenames[base] = path
    if check_keys:
        _check_known(merge, known_neox_keys())
    return NeoxConfig(values=merge.values, origin=merge.origin, block=merge.block, files=tuple(paths),
                      written=merge.written, notes=tuple(merge.notes), block_origin=merge.block_origin)


def _number(v: Any, where: str, positive: bool = False, integer: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        hint = f" (write {v} without quotes)" if isinstance(v, str) and v.strip().replace(".", "", 1).isdigit() else ""
        kind = "an integer" if integer else "a number"
        raise ConfigError(f"{where}: expected {kind}, found {type(v).__name__} {v!r}{hint}")
    if integer and not isinstance(v, int):
        raise ConfigError(f"{where}: expected an integer, found {v!r}")
    if positive and not v > 0:
        raise ConfigError(f"{where}: expected a value > 0, found {v!r}")
    return float(v)


def get_int(cfg: NeoxConfig, key: str, default: int | None = None, positive: bool = True) -> int | None:
    """An integer config value, with the file named in the error when it is a string or a float."""
    if key not in cfg.values or cfg.values[key] is None:
        return default
    _number(cfg.values[key], f"{cfg.origin.get(key, '<config>')}: {key}", positive=positive, integer=True)
    return int(cfg.values[key])


def get_float(cfg: NeoxConfig, key: str, default: float | None = None) -> float | None:
    if key not in cfg.values or cfg.values[key] is None:
        return default
    return _number(cfg.values[key], f"{cfg.origin.get(key, '<config>')}: {key}")


def get_bool(cfg: NeoxConfig, key: str, default: bool) -> bool:
    """A true/false config value; NeoX refuses anything else (a string "false" is not false)."""
    v = cfg.values.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise ConfigError(f"{cfg.origin.get(key, '<config>')}: {key}: expected true or false, found "
                          f"{type(v).__name__} {v!r}; NeoX refuses it (validate_types): write true or false")
    return v


def _paths(cfg: NeoxConfig, key: str) -> list[str]:
    v = cfg.values.get(key)
    if v is None:
        return []
    if isinstance(v, str):
        raise ConfigError(f"{cfg.origin.get(key)}: {key}: expected a list of path prefixes, found the string {v!r}; "
                          f"NeoX refuses it (validate_types: a str, not a list): write [{json.dumps(v)}]")
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise ConfigError(f"{cfg.origin.get(key)}: {key}: expected a list of path prefixes, found {v!r}")
    return list(v)


def _weights(cfg: NeoxConfig, key: str, n: int) -> list[float | None]:
    v = cfg.values.get(key)
    if v is None:
        return [None] * n
    if not isinstance(v, list):
        raise ConfigError(f"{cfg.origin.get(key)}: {key}: expected a list of {n} numbers, found {v!r}")
    if len(v) != n:
        raise ConfigError(f"{cfg.origin.get(key)}: {key}: {len(v)} weights for {n} paths; give one weight per path")
    weights = [_number(x, f"{cfg.origin.get(key)}: {key}[{i}]") for i, x in enumerate(v)]
    negative = [w for w in weights if w < 0]
    if negative or not sum(weights) > 0:  # NeoX runs a 0 weight (that source is never drawn), not a 0 sum
        raise ConfigError(f"{cfg.origin.get(key)}: {key}: {v!r}; expected weights >= 0 with a sum > 0 (NeoX stops "
                          "on a sum of 0: \"assert sum_weights > 0.0\"); give each source a weight, 0 to leave it out")
    return weights


@dataclass(frozen=True)
class NeoxBatch:
    """NeoX's batch numbers for one world, derived as its ``calculate_derived`` derives them."""

    train_batch_size: int
    """Samples per iteration (NeoX's train_batch_size, given or derived)."""
    micro_batch_size: int | None
    """train_micro_batch_size_per_gpu (derived; as written when the world is not needed)."""
    gradient_accumulation_steps: int | None
    """gradient_accumulation_steps (derived; as written, default 1, when the world is not needed)."""
    global_num_gpus: int | None
    """NeoX's GPU count, None when it was not needed (train_batch_size given and no world known)."""
    data_parallel_size: int | None
    """global_num_gpus / (pp * mp), None with global_num_gpus."""
    basis: str
    """How the count came about (hostfile, --world-size, global_num_gpus, torch.cuda.device_count())."""

    def describe(self) -> str:
        """One line for the report: the count, its basis and the batch arithmetic."""
        if self.global_num_gpus is None:
            return f"train_batch_size {self.train_batch_size} as written ({self.basis})"
        return (f"NeoX counts {self.global_num_gpus} GPUs {self.basis}; dp {self.data_parallel_size}: "
                f"train_batch_size = micro * grad_accum * dp = {self.micro_batch_size} * "
                f"{self.gradient_accumulation_steps} * {self.data_parallel_size} = {self.train_batch_size}")


def _launcher(cfg: NeoxConfig, overrides: LauncherSettings | None) -> LauncherSettings:
    """The config's launcher keys (hostfile, include, exclude, num_nodes, num_gpus) with flags applied."""
    return neox_launcher(cfg.values, cfg.origin).overridden_by(overrides or LauncherSettings())


def _no_world(why: str) -> ConfigError:
    return ConfigError(f"train_batch_size: not set, so NeoX derives it as micro * grad_accum * dp, and {why}; give "
                       "the world: --hostfile FILE (or hostfile: in a config), --world-size N, or set "
                       "train_batch_size")


def neox_count(cfg: NeoxConfig, settings: LauncherSettings, world_size: int | None = None,
               environ: Mapping[str, str] | None = None) -> NeoxCount:
    """NeoX's ``global_num_gpus`` for this config: ``world_size`` (``--world-size``) when given, else the
    config's global_num_gpus, else :func:`~neox_epoch.batch.world.neox_gpu_count` (the hostfile, read
    without DeepSpeed or torch when no include/exclude is set; ``torch.cuda.device_count()`` without one)."""
    if world_size is not None:
        if world_size <= 0:
            raise ConfigError(f"--world-size: {world_size}; expected a positive number of GPUs")
        return NeoxCount(count=world_size, basis="from --world-size")
    given = get_int(cfg, "global_num_gpus")
    try:
        count = neox_gpu_count(settings, global_num_gpus=given, environ=environ)
    except ImportError as err:
        if settings.include or settings.exclude:
            raise ConfigError(f"include/exclude: applied with DeepSpeed's own launcher functions, which cannot be "
                              f"imported here ({err}); install deepspeed, or give the world with --world-size N") from None
        raise _no_world("there is no hostfile, so NeoX would count torch.cuda.device_count() GPUs, but torch is "
                        "not installed here") from None
    if count.count <= 0:
        raise _no_world(f"NeoX counts 0 GPUs {count.basis}{_ignored_without_hostfile(settings, environ)}")
    return count


def _ignored_without_hostfile(settings: LauncherSettings, environ: Mapping[str, str] | None) -> str:
    """`` (num_gpus 8 count only with a hostfile ...)`` when such keys are set and there is no hostfile."""
    ignored = [f"{k} {getattr(settings, k)}" for k in ("num_gpus", "num_nodes") if getattr(settings, k)]
    if not ignored or neox_hostfile_path(settings, environ) is not None:
        return ""
    return f" ({' and '.join(ignored)} count only with a hostfile, in NeoX as here)"


def world_needs_device_count(cfg: NeoxConfig, settings: LauncherSettings, world_size: int | None = None,
                             environ: Mapping[str, str] | None = None) -> bool:
    """True when NeoX's count would come from ``torch.cuda.device_count()`` (no explicit count, no hostfile
    file), i.e. when the world is a property of the machine the run starts on."""
    if world_size is not None or cfg.values.get("global_num_gpus") is not None:
        return False
    path = neox_hostfile_path(settings, environ)
    return path is None or not os.path.isfile(path)


def _neox_gas(cfg: NeoxConfig) -> int | None:
    """gradient_accumulation_steps as NeoX reads it: 1 when absent, None when written as null."""
    if "gradient_accumulation_steps" not in cfg.values:
        return 1
    return get_int(cfg, "gradient_accumulation_steps")


def _dp(cfg: NeoxConfig, count: NeoxCount) -> int:
    """NeoX's dp = (global_num_gpus / pp) / mp with pp, mp below 1 counted as 1; BatchError unless whole."""
    pp = max(get_int(cfg, "pipe_parallel_size", 1, positive=False) or 0, 1)
    mp = max(get_int(cfg, "model_parallel_size", 1, positive=False) or 0, 1)
    g = count.count
    if g % (pp * mp):
        raise BatchError(
            f"dp = global_num_gpus / (pipe_parallel_size * model_parallel_size) = {g} / ({pp} * {mp}) = "
            f"{g / (pp * mp):g} is not a whole number (NeoX counts {g} GPUs {count.basis}); NeoX stops: "
            f"'(global_num_gpus / pp_size) / mp_size must be a whole number': run on a multiple of {pp * mp} GPUs "
            "or change model_parallel_size / pipe_parallel_size"
        )
    return g // (pp * mp)


def neox_batch(cfg: NeoxConfig, world_size: int | None = None, launcher: LauncherSettings | None = None,
               environ: Mapping[str, str] | None = None) -> NeoxBatch:
    """NeoX's train_batch_size (and micro batch, grad accumulation, GPU count) for this config and world.

    The world is NeoX's own count (:func:`neox_count`): ``--world-size``, global_num_gpus, the hostfile
    of the config or of ``launcher`` (flags win), or ``$DLTS_HOSTFILE``; then dp, the derivation and the
    checks of NeoX's ``calculate_batch_parameters`` / ``check_batch_parameters``, with NeoX's defaults
    (gradient_accumulation_steps 1). When train_batch_size is written and the world would need this
    machine's GPU count, the world is not taken (the plan does not depend on it) and nothing is checked.
    """
    settings = _launcher(cfg, launcher)
    tbs = get_int(cfg, "train_batch_size")
    mbs = get_int(cfg, "train_micro_batch_size_per_gpu")
    gas = _neox_gas(cfg)
    if tbs is not None and world_needs_device_count(cfg, settings, world_size, environ):
        return NeoxBatch(train_batch_size=tbs, micro_batch_size=mbs, gradient_accumulation_steps=gas,
                         global_num_gpus=None, data_parallel_size=None,
                         basis="no world given: the GPU count is not needed for it")
    count = neox_count(cfg, settings, world_size, environ)
    dp = _dp(cfg, count)
    if tbs is None and mbs is None:
        files = ", ".join(cfg.files) or "the config"
        raise ConfigError(f"{files}: neither train_batch_size nor train_micro_batch_size_per_gpu is set; NeoX stops: "
                          "'Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided': set "
                          "train_micro_batch_size_per_gpu (and gradient_accumulation_steps) or train_batch_size")
    batch = derive_batch(tbs, mbs, gas, dp)
    errors = batch_errors(batch, who="NeoX")
    if errors:
        raise BatchError(f"with {count.count} GPUs (NeoX counts them {count.basis}) and dp {dp}: {errors[0]}; set "
                         "train_batch_size = micro * grad_accum * dp, or leave one of the three out for NeoX to derive")
    return NeoxBatch(train_batch_size=batch.train_batch_size, micro_batch_size=batch.train_micro_batch_size_per_gpu,
                     gradient_accumulation_steps=batch.gradient_accumulation_steps, global_num_gpus=count.count,
                     data_parallel_size=dp, basis=count.basis)


def global_batch_size(cfg: NeoxConfig, world_size: int | None = None) -> int:
    """NeoX's train_batch_size: given, or micro * grad_accum * dp with NeoX's GPU count (:func:`neox_batch`)."""
    return neox_batch(cfg, world_size).train_batch_size


def plan_input_from_neox(cfg: NeoxConfig, world_size: int | None = None, gbs_override: int | None = None,
                         launcher: LauncherSettings | None = None, batch: NeoxBatch | None = None) -> PlanInput:
    """Build a PlanInput from a merged NeoX config (NeoX semantics, its defaults where keys are absent).

    The batch comes first, as in NeoX (its ``calculate_derived`` runs before any other check): ``batch``
    when given, else :func:`neox_batch` for ``world_size`` / the launcher keys and ``launcher`` flags;
    ``gbs_override`` (``--global-batch-size``) replaces train_batch_size without a world.
    """
    if batch is None and not gbs_override:
        batch = neox_batch(cfg, world_size, launcher)
    check_attention_config(cfg)
    check_types(cfg)
    mbs = batch.micro_batch_size if batch else get_int(cfg, "train_micro_batch_size_per_gpu")
    gas = batch.gradient_accumulation_steps if batch else _neox_gas(cfg)
    seq = get_int(cfg, "seq_length")
    if seq is None:
        raise ConfigError("seq_length: not set in any config file; NeoX requires it")
    train, valid, test, per_split = _neox_sources(cfg)
    split = cfg.values.get("split", "969, 30, 1")
    if not isinstance(split, str):
        raise ConfigError(f"{cfg.origin.get('split')}: split: expected a string such as \"969,30,1\", found {split!r}")
    train_iters, warmup_iters = _neox_iters(cfg)
    pack = cfg.values.get("pack_impl", "packed")
    if pack != "packed":
        raise ConfigError(f"{cfg.origin.get('pack_impl')}: pack_impl: {pack!r} is not planned; only \"packed\" is supported")
    return PlanInput(
        framework="neox",
        framework_version="",
        seq_length=seq,
        global_batch_size=gbs_override or batch.train_batch_size,  # type: ignore[union-attr]
        train_sources=train,
        valid_sources=valid,
        test_sources=test,
        per_split_paths=per_split,
        split=split,
        train_iters=train_iters,
        eval_interval=get_int(cfg, "eval_interval", 1000) or 1000,
        eval_iters=get_int(cfg, "eval_iters", 100, positive=False) or 0,
        seed=get_int(cfg, "seed", 1234, positive=False) or 0,
        warmup_iters=warmup_iters,
        neox=_neox_options(cfg, mbs, gas),
    )


#: NeoX's ATTENTION_TYPE_CHOICES (megatron/neox_arguments/neox_args.py)
NEOX_ATTENTION_TYPES = ("global", "local", "sparse_fixed", "sparse_variable", "bigbird", "bslongformer", "gmlp",
                        "amlp", "flash", "rwkv", "mamba")


def _attention_layers(raw: Any, num_layers: int, where: str) -> list[Any]:
    """attention_config expanded to one entry per layer as NeoX's ``expand_attention_types`` expands it
    (``[[["flash"], 12]]`` -> 12 x "flash"; ``"all"`` repeats a pattern over every layer)."""
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: expected a list such as [[[\"flash\"], {num_layers}]], found {raw!r}")
    if all(isinstance(i, str) for i in raw):
        return list(raw)
    layers: list[Any] = []
    for item in raw:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], list)):
            raise ConfigError(f"{where}: {item!r}: expected [[types...], count], e.g. [[\"flash\"], {num_layers}]")
        if item[1] == "all":
            if num_layers % len(item[0]):
                raise ConfigError(f"{where}: num_layers {num_layers} is not divisible by the length of the pattern "
                                  f"{item[0]}; NeoX stops there: give a pattern that divides {num_layers}")
            return list(item[0]) * (num_layers // len(item[0]))
        if isinstance(item[1], bool) or not isinstance(item[1], int):
            raise ConfigError(f"{where}: {item!r}: expected a layer count or \"all\", found {item[1]!r}")
        layers += list(item[0]) * item[1]
    return layers


def check_attention_config(cfg: NeoxConfig) -> None:
    """NeoX's ``calculate_derived`` (after the batch): attention_config must cover exactly num_layers layers, each
    with a type NeoX knows."""
    num_layers = get_int(cfg, "num_layers")
    raw = cfg.values.get("attention_config")
    if num_layers is None or raw is None:
        return
    where = f"{cfg.origin.get('attention_config', '<config>')}: {cfg.written.get('attention_config', 'attention_config')}"
    layers = _attention_layers(raw, num_layers, where)
    if len(layers) != num_layers:
        raise ConfigError(f"{where}: covers {len(layers)} layers, num_layers is {num_layers} (in "
                          f"{cfg.origin.get('num_layers')}); NeoX stops: \"Length of attention config list must equal "
                          f"num_layers\": make the counts add up to {num_layers}, e.g. [[[\"flash\"], {num_layers}]]")
    unknown = [t for t in layers if t not in NEOX_ATTENTION_TYPES]
    if unknown:
        raise ConfigError(f"{where}: attention type {unknown[0]!r} is not one NeoX knows (\"Attention type "
                          f"{unknown[0]} not recognized\"); expected one of {list(NEOX_ATTENTION_TYPES)}")


_SIMPLE_TYPES: dict[str, type] = {"bool": bool, "int": int, "float": float, "str": str, "list": list, "dict": dict}


def neox_type_ok(value: Any, declared: str) -> bool | None:
    """Whether NeoX's ``validate_types`` accepts ``value`` for a key declared ``declared`` (neox_keys.json's
    spelling): the exact type (an int for a float too), a Literal's choices (strings case-insensitively), a
    Union's / Optional's member types. None where this mirror does not judge (List[...] members, Any)."""
    import ast

    if declared in _SIMPLE_TYPES:
        return type(value) is _SIMPLE_TYPES[declared] or (declared == "float" and type(value) is int)
    if declared.startswith("Literal["):
        choices = ast.literal_eval("[" + declared[len("Literal["):-1] + "]")
        lower = [c.lower() for c in choices if isinstance(c, str)]
        return value in choices or (isinstance(value, str) and value.lower() in lower)
    for prefix in ("Optional[", "Union["):
        if declared.startswith(prefix) and "[" not in declared[len(prefix):-1]:
            members = [m.strip() for m in declared[len(prefix):-1].split(",")]
            if all(m in _SIMPLE_TYPES for m in members):
                return type(value) in tuple(_SIMPLE_TYPES[m] for m in members)
    return None


def check_types(cfg: NeoxConfig, known: dict[str, str] | None = None) -> None:
    """NeoX's ``validate_types`` (after ``calculate_derived``) on the keys the files set: the first value whose type
    is not the declared one stops NeoX (a quoted number, ``6e-05`` that PyYAML reads as a string, a tokenizer
    name NeoX does not have)."""
    known = known if known is not None else known_neox_keys()
    auto = cfg.values.get("autotuning") is not None
    for key, value in cfg.values.items():
        declared = known.get(key)
        if value is None or declared is None or (auto and value == "auto") or neox_type_ok(value, declared) is not False:
            continue
        where = f"{cfg.origin.get(key, '<config>')}: {cfg.written.get(key, key)}"
        if declared.startswith("Literal["):
            raise ConfigError(f"{where}: {value!r}: NeoX stops in validate_types (\"Not in accepted values\": "
                              f"{declared[len('Literal['):-1]}); write one of those values")
        if isinstance(value, str) and declared == "list" and key.endswith("_paths"):
            continue  # _paths says it better: the list to write
        raise ConfigError(_type_message(where, value, declared))


def _type_message(where: str, value: Any, declared: str) -> str:
    """One line for a value NeoX's validate_types refuses: its type, the declared one, NeoX's words, the fix."""
    words = (f"; NeoX stops in validate_types (AttributeError: type object '{declared}' has no attribute "
             "'__origin__')" if declared in _SIMPLE_TYPES else "; NeoX stops in validate_types")
    if isinstance(value, str) and declared in ("float", "int"):
        try:
            float(value)
        except ValueError:
            pass
        else:
            kind = "an integer" if declared == "int" else "a number"
            mantissa, e, exponent = value.lower().partition("e")
            fix = (f"write {mantissa}.0e{exponent}: PyYAML reads {value} as a string, YAML 1.1 floats need a dot"
                   if e and "." not in mantissa else f"write {value} without quotes")
            return f"{where}: expected {kind}, found str {value!r} ({fix}){words}"
    if declared == "bool":
        return f"{where}: expected true or false, found {type(value).__name__} {value!r}{words}: write true or false"
    return f"{where}: {value!r} is a {type(value).__name__}, NeoX declares {declared}{words}: write a {declared}"


SPLIT_PATH_KEYS = ("train_data_paths", "valid_data_paths", "test_data_paths")


def check_data_keys(cfg: NeoxConfig) -> None:
    """NeoX's ``validate_values`` on the data keys (run by from_ymls): data_path or all three of
    train/valid/test_data_paths, never both; and a preference-pair config (``pos_train_data_paths``, for DPO,
    RM or KTO), which this tool does not plan, named by its ``train_impl``."""
    given = [k for k in SPLIT_PATH_KEYS if cfg.values.get(k) is not None]
    if len(given) == 3 and cfg.values.get("data_path") is not None:
        raise ConfigError(
            f"{cfg.origin.get('data_path')}: data_path: given with train_data_paths (in "
            f"{cfg.origin.get('train_data_paths')}); NeoX stops: \"Please provide *either* `data_path` or "
            "`train/valid/test_data_path`\": remove data_path, or the three *_data_paths keys")
    if given and len(given) < 3:
        missing = [k for k in SPLIT_PATH_KEYS if k not in given]
        raise ConfigError(
            f"{cfg.origin.get(given[0])}: {given[0]}: given without {' and '.join(missing)}; NeoX stops: \"One or more "
            f"of train/valid/test data_path are not provided\": set {' and '.join(missing)} too (the validation and "
            "test prefixes, e.g. the train prefixes again)")
    pairs = [k for k in ("pos_train_data_paths", "neg_train_data_paths") if cfg.values.get(k)]
    if pairs and not cfg.values.get("train_data_paths") and not cfg.values.get("data_path"):
        impl = cfg.values.get("train_impl", "normal")
        raise ConfigError(
            f"{cfg.origin.get(pairs[0])}: {pairs[0]}: this config trains with train_impl: {impl} on preference pairs "
            f"(pos_/neg_ paths, dataset_impl: {cfg.values.get('dataset_impl', 'gpt2')}), which neox-epoch does not "
            "plan; it plans pretraining data (data_path or train_data_paths)")


def _neox_sources(cfg: NeoxConfig) -> tuple[tuple[SourceSpec, ...], tuple[SourceSpec, ...],
                                            tuple[SourceSpec, ...], bool]:
    """The train, valid and test sources, and whether they come per split (train_data_paths) or from data_path."""
    check_data_keys(cfg)
    train_paths = _paths(cfg, "train_data_paths")
    if train_paths:
        tw = _weights(cfg, "train_data_weights", len(train_paths))
        vp, tp = _paths(cfg, "valid_data_paths"), _paths(cfg, "test_data_paths")
        vw, tsw = _weights(cfg, "valid_data_weights", len(vp)), _weights(cfg, "test_data_weights", len(tp))
        return (tuple(SourceSpec(p, w) for p, w in zip(train_paths, tw)),
                tuple(SourceSpec(p, w) for p, w in zip(vp, vw)), tuple(SourceSpec(p, w) for p, w in zip(tp, tsw)), True)
    dp = cfg.values.get("data_path")
    if not dp:
        raise ConfigError("data_path: none of data_path or train_data_paths is set; point data_path at a prefix")
    if not isinstance(dp, str):
        raise ConfigError(f"{cfg.origin.get('data_path')}: data_path: expected one path prefix string, found {dp!r}")
    return (SourceSpec(dp),), (), (), False


def _neox_iters(cfg: NeoxConfig) -> tuple[int | None, int | None]:
    """train_iters and the warmup iterations NeoX derives from it (None without train_iters)."""
    train_iters = get_int(cfg, "train_iters")
    if train_iters is not None and get_int(cfg, "train_epochs") is not None and cfg.block is None:
        # NeoX's validate_train_epochs (with the neox_epoch block the plugin clears train_epochs before it runs)
        raise ConfigError(f"{cfg.origin.get('train_epochs', '<config>')}: train_epochs: given with train_iters "
                          f"(in {cfg.origin.get('train_iters', '<config>')}); NeoX refuses both (\"Cannot specify both "
                          "train epochs and train iters simultaneously\"): keep one of them")
    warm = get_float(cfg, "warmup", 0.01)
    lr_decay = get_int(cfg, "lr_decay_iters") or train_iters
    warmup_iters = int(warm * lr_decay) if (warm is not None and lr_decay) else None
    return train_iters, warmup_iters if train_iters else None


def _neox_options(cfg: NeoxConfig, mbs: int | None, gas: int | None) -> NeoxOptions:
    """The NeoX-only plan options: blending, chopping, train_epochs, the batch split and the neox_epoch block."""
    bb = cfg.block.blend_buffer if cfg.block else None
    return NeoxOptions(
        weight_by_num_documents=get_bool(cfg, "weight_by_num_documents", False),
        weighted_sampler_alpha=get_float(cfg, "weighted_sampler_alpha", 1.0) or 1.0,
        blend_buffer=float(bb) if isinstance(bb, (int, float)) else None,
        allow_chopped=get_bool(cfg, "allow_chopped", True),
        train_epochs=get_int(cfg, "train_epochs"),
        micro_batch_size=mbs,
        gradient_accumulation_steps=gas or 1,
        separate_epochs=bool(cfg.block and cfg.block.separate_epochs),
    )


def schedule_keys(cfg: NeoxConfig) -> NeoxScheduleKeys:
    """The learning-rate, checkpoint, evaluation and exit keys a new train_iters touches (NeoX's defaults)."""

    def where(key: str) -> str:
        return f"{cfg.origin.get(key, '<config>')}: {key}"

    def choice(key: str, default: str, allowed: tuple[str, ...]) -> str:
        value = cfg.values.get(key)
        if value is None:
            return default
        if value not in allowed:
            raise ConfigError(f"{where(key)}: {value!r}; expected one of {list(allowed)}")
        return str(value)

    extra = cfg.values.get("extra_save_iters") or []
    if not isinstance(extra, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in extra):
        raise ConfigError(f"{where('extra_save_iters')}: {extra!r}; expected a list of iteration numbers, e.g. [0, 500]")
    factor = get_float(cfg, "checkpoint_factor")
    if factor is not None and factor <= 0:
        raise ConfigError(f"{where('checkpoint_factor')}: {factor}; expected a number > 0")
    if factor is not None and factor.is_integer():
        factor = int(factor)
    return NeoxScheduleKeys(
        lr_decay_iters=get_int(cfg, "lr_decay_iters"),
        lr_decay_fraction=get_float(cfg, "lr_decay_fraction"),
        lr_decay_style=choice("lr_decay_style", "linear", NEOX_DECAY_STYLES),
        warmup=get_float(cfg, "warmup", 0.01) or 0.0,
        saves=bool(cfg.values.get("save")),
        checkpoint_factor=factor,
        checkpoint_scale=choice("checkpoint_scale", "linear", ("linear", "log")),
        extra_save_iters=tuple(extra),
        eval_interval=get_int(cfg, "eval_interval", 1000),
        eval_iters=get_int(cfg, "eval_iters", 100, positive=False) or 0,
        exit_interval=get_int(cfg, "exit_interval"),
        loads=bool(cfg.values.get("load")),
        use_checkpoint_lr_scheduler=bool(cfg.values.get("use_checkpoint_lr_scheduler", False)),
        train_epochs=get_int(cfg, "train_epochs"),
    )
