"""NeoX YAML configs: load and merge several files as NeoX does, validate keys and types, and turn them
into a :class:`~neox_epoch.plan.PlanInput`. Also the ``neox_epoch`` block (the plugin's flag).

NeoX merges the YAML files in order, later files overriding earlier ones, and treats ``-`` and ``_`` in
key names alike. Unknown keys make NeoX fail with a bare ``TypeError``; here they get a did-you-mean.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

from neox_epoch.errors import ConfigError, did_you_mean
from neox_epoch.plan_input import NeoxOptions, PlanInput, SourceSpec
from neox_epoch.schedule import NEOX_DECAY_STYLES, NeoxScheduleKeys
from neox_epoch.textfile import read_config_text

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


def known_neox_keys() -> dict[str, str]:
    """NeoX's config key names and declared types (from neox_epoch/data/neox_keys.json)."""
    text = resources.files("neox_epoch").joinpath("data/neox_keys.json").read_text(encoding="utf-8")
    return dict(json.loads(text)["keys"])


def load_neox_configs(paths: list[str], check_keys: bool = True) -> NeoxConfig:
    """Load and merge NeoX YAML files in order, as ``NeoXArgs.from_ymls`` does.

    Like NeoX, a key given in two files is an error, and so are two files with the same basename. (NeoX
    compares the key as written with the keys already loaded after their ``-`` -> ``_`` conversion, so
    ``train-iters`` in one file and ``train_iters`` in the next silently keeps the later value; that is
    reported as an error here too.)
    """
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    block: EpochBlock | None = None
    block_origin = ""
    basenames: dict[str, str] = {}
    known = known_neox_keys() if check_keys else {}
    for path in paths:
        if os.path.isdir(path):
            raise ConfigError(f"{path}: is a directory; expected a NeoX YAML config file")
        if not os.path.isfile(path):
            raise ConfigError(f"{path}: config file not found")
        base = os.path.basename(path)
        if base in basenames:
            raise ConfigError(
                f"{path}: same file name as {basenames[base]}; NeoX refuses two config files with the same name "
                "(it saves them side by side with the checkpoint): rename one"
            )
        basenames[base] = path
        try:
            raw = yaml.safe_load(read_config_text(path, "NeoX YAML config"))
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            at = f" at line {mark.line + 1}" if mark is not None else ""
            raise ConfigError(f"{path}: is not valid YAML{at} ({getattr(err, 'problem', err)}); expected a NeoX "
                              "YAML config") from None
        if raw is None:
            continue
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: holds a {type(raw).__name__}, not a mapping of config keys; expected a NeoX "
                              "YAML config")
        for key, value in raw.items():
            k = str(key).replace("-", "_")
            if k == BLOCK:
                if block is not None:
                    raise ConfigError(f"{path}: {BLOCK}: already given in {block_origin}; keep one {BLOCK} block")
                block = EpochBlock.from_mapping(value, path)
                block_origin = path
                continue
            if k in values:
                # NeoX raises when the key is written the same way in both files, and silently keeps the later
                # value when one file writes '-' and the other '_'; both are reported here
                raise ConfigError(
                    f"{path}: {key}: already set in {origin[k]} (config key \"{k}\" is set in both files); NeoX "
                    "rejects a key given in two config files (or, spelled with '-' in one and '_' in the other, "
                    "silently keeps the later value): keep it in one"
                )
            if check_keys and k not in known:
                raise ConfigError(f"{path}: {key}: unknown NeoX config key{did_you_mean(k, known)}")
            values[k] = value
            origin[k] = path
    return NeoxConfig(values=values, origin=origin, block=block, files=tuple(paths))


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


def _paths(cfg: NeoxConfig, key: str) -> list[str]:
    v = cfg.values.get(key)
    if v is None:
        return []
    if isinstance(v, str):
        return [v]
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
    return [_number(x, f"{cfg.origin.get(key)}: {key}[{i}]", positive=True) for i, x in enumerate(v)]


def global_batch_size(cfg: NeoxConfig, world_size: int | None = None) -> int:
    """NeoX's train_batch_size: given, or micro * grad_accum * dp with dp = world / (pp * mp)."""
    tbs = get_int(cfg, "train_batch_size")
    if tbs is not None:
        return tbs
    mbs = get_int(cfg, "train_micro_batch_size_per_gpu")
    gas = get_int(cfg, "gradient_accumulation_steps", 1)
    if mbs is None:
        raise ConfigError("train_batch_size: not set and no train_micro_batch_size_per_gpu either; set train_batch_size")
    world = world_size or get_int(cfg, "global_num_gpus")
    if world is None:
        gpus, nodes = get_int(cfg, "num_gpus"), get_int(cfg, "num_nodes", 1)
        world = gpus * nodes if gpus is not None else None  # type: ignore[operator]
    if world is None:
        raise ConfigError(
            "train_batch_size: not set, and the world size is unknown; set train_batch_size, or pass --world-size"
        )
    pp = max(get_int(cfg, "pipe_parallel_size", 1, positive=False) or 1, 1)
    mp = max(get_int(cfg, "model_parallel_size", 1, positive=False) or 1, 1)
    if world % (pp * mp):
        raise ConfigError(f"world size {world} is not divisible by pipe_parallel_size * model_parallel_size = {pp * mp}: dp must be whole")
    return int(mbs) * int(gas) * (world // (pp * mp))  # type: ignore[operator]


def plan_input_from_neox(cfg: NeoxConfig, world_size: int | None = None, gbs_override: int | None = None) -> PlanInput:
    """Build a PlanInput from a merged NeoX config (NeoX semantics, its defaults where keys are absent)."""
    seq = get_int(cfg, "seq_length")
    if seq is None:
        raise ConfigError("seq_length: not set in any config file; NeoX requires it")
    train_paths = _paths(cfg, "train_data_paths")
    if train_paths:
        tw = _weights(cfg, "train_data_weights", len(train_paths))
        vp, tp = _paths(cfg, "valid_data_paths"), _paths(cfg, "test_data_paths")
        vw, tsw = _weights(cfg, "valid_data_weights", len(vp)), _weights(cfg, "test_data_weights", len(tp))
        train = tuple(SourceSpec(p, w) for p, w in zip(train_paths, tw))
        valid = tuple(SourceSpec(p, w) for p, w in zip(vp, vw))
        test = tuple(SourceSpec(p, w) for p, w in zip(tp, tsw))
        per_split = True
    else:
        dp = cfg.values.get("data_path")
        if not dp:
            raise ConfigError("data_path: none of data_path or train_data_paths is set; point data_path at a prefix")
        if not isinstance(dp, str):
            raise ConfigError(f"{cfg.origin.get('data_path')}: data_path: expected one path prefix string, found {dp!r}")
        train, valid, test, per_split = (SourceSpec(dp),), (), (), False
    split = cfg.values.get("split", "969, 30, 1")
    if not isinstance(split, str):
        raise ConfigError(f"{cfg.origin.get('split')}: split: expected a string such as \"969,30,1\", found {split!r}")
    train_iters = get_int(cfg, "train_iters")
    if train_iters is not None and get_int(cfg, "train_epochs") is not None and cfg.block is None:
        # NeoX's validate_train_epochs (with the neox_epoch block the plugin clears train_epochs before it runs)
        raise ConfigError(f"{cfg.origin.get('train_epochs', '<config>')}: train_epochs: given with train_iters "
                          f"(in {cfg.origin.get('train_iters', '<config>')}); NeoX refuses both (\"Cannot specify both "
                          "train epochs and train iters simultaneously\"): keep one of them")
    warm = get_float(cfg, "warmup", 0.01)
    lr_decay = get_int(cfg, "lr_decay_iters") or train_iters
    warmup_iters = int(warm * lr_decay) if (warm is not None and lr_decay) else None
    pack = cfg.values.get("pack_impl", "packed")
    if pack != "packed":
        raise ConfigError(f"{cfg.origin.get('pack_impl')}: pack_impl: {pack!r} is not planned; only \"packed\" is supported")
    bb = cfg.block.blend_buffer if cfg.block else None
    return PlanInput(
        framework="neox",
        framework_version="",
        seq_length=seq,
        global_batch_size=gbs_override or global_batch_size(cfg, world_size),
        train_sources=train,
        valid_sources=valid,
        test_sources=test,
        per_split_paths=per_split,
        split=split,
        train_iters=train_iters,
        eval_interval=get_int(cfg, "eval_interval", 1000) or 1000,
        eval_iters=get_int(cfg, "eval_iters", 100, positive=False) or 0,
        seed=get_int(cfg, "seed", 1234, positive=False) or 0,
        warmup_iters=warmup_iters if train_iters else None,
        neox=NeoxOptions(
            weight_by_num_documents=bool(cfg.values.get("weight_by_num_documents", False)),
            weighted_sampler_alpha=get_float(cfg, "weighted_sampler_alpha", 1.0) or 1.0,
            blend_buffer=float(bb) if isinstance(bb, (int, float)) else None,
            allow_chopped=bool(cfg.values.get("allow_chopped", True)),
            train_epochs=get_int(cfg, "train_epochs"),
            micro_batch_size=get_int(cfg, "train_micro_batch_size_per_gpu"),
            gradient_accumulation_steps=get_int(cfg, "gradient_accumulation_steps", 1) or 1,
            separate_epochs=bool(cfg.block and cfg.block.separate_epochs),
        ),
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
