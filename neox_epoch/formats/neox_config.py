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
from dataclasses import dataclass, field
from typing import Any

import yaml

from neox_epoch.errors import ConfigError, did_you_mean
from neox_epoch.formats.stage_config import StagesConfig, per_source
from neox_epoch.formats.stage_config import number as stage_number
from neox_epoch.util.textfile import read_config_text
from neox_epoch.util.values import is_number, is_whole

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
    stages: list[dict[str, Any]] | None = None
    """Data stages, in order: ``{"name", "passes": {source: passes}}`` or ``{"name", "weights", "iterations" |
    "samples"}`` (neox_epoch.plan.stages); each source continues where the earlier stages left it."""
    max_passes: float | dict[str, float] | None = None
    """Cap on a source's passes over the whole run (one number, or per source): a plan above it is refused."""
    allow_data_change: bool = False
    """Resume although the data fingerprint saved with the checkpoint differs (the change is intended)."""
    decay: dict[str, str] | None = None
    """With stages: where the learning-rate decay ends (``until_stage``) or starts (``from_stage``, WSD: not in
    NeoX's scheduler), by stage name (neox_epoch.formats.stage_config.StageDecay)."""

    @staticmethod
    def from_mapping(raw: Any, where: str) -> EpochBlock:
        if not isinstance(raw, dict):
            raise ConfigError(f'{where}: {BLOCK}: expected a mapping such as {{"epochs": 1}}, found {raw!r}')
        fields = {k.replace("-", "_"): v for k, v in raw.items()}
        known = set(EpochBlock.__dataclass_fields__)
        for k in fields:
            if k not in known:
                raise ConfigError(
                    f"{where}: {BLOCK}.{k}: unknown key{did_you_mean(k, known)}; known keys: {sorted(known)}"
                )
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
                raise ConfigError(f'{where}: {BLOCK}.blend_buffer: {bb} is below 1.0; expected >= 1.0 or "exact"')
        for key in ("separate_epochs", "enforce", "allow_data_change"):
            if key in fields and not isinstance(fields[key], bool):
                raise ConfigError(f"{where}: {BLOCK}.{key}: expected true or false, found {fields[key]!r}")
        tg, wt = fields.get("targets"), fields.get("weights")
        if tg is not None and (not isinstance(tg, dict) or not all(is_whole(v, 1) for v in tg.values())):
            raise ConfigError(
                f"{where}: {BLOCK}.targets: expected a map of source -> positive integer samples, "
                f"found {tg!r}; rewrite it with neox-epoch plan --write-config"
            )
        if wt is not None and (not isinstance(wt, list) or not all(is_number(v) and v > 0 for v in wt)):
            raise ConfigError(
                f"{where}: {BLOCK}.weights: expected a list of positive numbers, found {wt!r}; "
                "rewrite it with neox-epoch plan --write-config"
            )
        if (tg is None) != (wt is None) or (tg is not None and len(wt) != len(tg)):
            raise ConfigError(
                f"{where}: {BLOCK}.weights: expected {len(tg or ())} numbers (one per target), found "
                f"{wt!r}; rewrite the overlay with neox-epoch plan --write-config"
            )
        if fields.get("log_dir") is not None and not isinstance(fields["log_dir"], str):
            raise ConfigError(
                f"{where}: {BLOCK}.log_dir: expected a directory path string, found {fields['log_dir']!r}"
            )
        _check_stages(fields, where)
        return EpochBlock(**fields)

    def stages_config(self) -> Any:
        """The validated :class:`~neox_epoch.formats.stage_config.StagesConfig` of ``stages`` (None without stages)."""
        if self.stages is None:
            return None
        return StagesConfig.from_mapping({"stages": self.stages, "max_passes": self.max_passes, "decay": self.decay})

    def to_mapping(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None and v is not False}


def _check_stages(fields: dict[str, Any], where: str) -> None:
    """``stages`` and ``max_passes``: validated here, once, by the stage planner's own types."""
    stages, cap, decay = fields.get("stages"), fields.get("max_passes"), fields.get("decay")
    try:
        if decay is not None and stages is None:
            raise ConfigError(
                "decay: places the learning-rate decay on stage boundaries; it needs stages (add them, "
                "or remove decay and set lr_decay_iters)"
            )
        if stages is not None:
            if fields.get("epochs") is not None:
                raise ConfigError(
                    "epochs and stages: give one of them; with stages, each stage's passes are the "
                    "targets (remove epochs)"
                )
            StagesConfig.from_mapping({"stages": stages, "max_passes": cap, "decay": decay})
        elif isinstance(cap, dict):
            per_source("max_passes", cap, positive=True)
        elif cap is not None:
            stage_number("max_passes", cap, positive=True)
    except ConfigError as err:
        raise ConfigError(f"{where}: {BLOCK}.{err}") from None


#: NeoX config keys removed or renamed upstream: key -> (replacement, what happened and what to write)
RENAMED_KEYS: dict[str, tuple[str, str]] = {
    "gas": (
        "gradient_accumulation_steps",
        "removed in NeoX PR #1144 (2024); it never changed the batch, which always used "
        "gradient_accumulation_steps (default 1): remove it to keep the batch you had, or write "
        "gradient_accumulation_steps: N for N accumulation steps",
    ),
    "save_interval": (
        "checkpoint_factor",
        "replaced by checkpoint_factor in NeoX PR #737 (2022): write checkpoint_factor: N to save every N iterations",
    ),
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
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "neox_keys.json")
    if os.path.isfile(path):  # an unpacked install: read the file (importlib.resources costs ~20 ms of imports)
        with open(path, encoding="utf-8") as f:
            text = f.read()
    else:  # pragma: no cover - a zipped install
        from importlib import resources

        text = resources.files("neox_epoch").joinpath("data/neox_keys.json").read_text(encoding="utf-8")
    return dict(json.loads(text)["keys"])


def _safe_load(text: str) -> Any:
    """``yaml.safe_load`` through libyaml's parser when PyYAML has it (the same SafeConstructor: the same values; 7x
    faster on a 10k-source blend, bench/sources_bench.py); an error is raised by the pure-Python parser, so its message
    and line are PyYAML's whatever the build."""
    loader = getattr(yaml, "CSafeLoader", None)
    if loader is not None:
        try:
            return yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
        except yaml.YAMLError:
            pass
    return yaml.safe_load(text)


def _read_yaml(path: str) -> dict[str, Any]:
    """One config file's top-level mapping; ConfigError for a missing, empty, invalid or non-mapping file."""
    text = read_config_text(path, "NeoX YAML config file")
    try:
        raw = _safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(
            f"{path}: is not valid YAML{at} ({getattr(err, 'problem', err)}); expected a NeoX YAML config"
        ) from None
    if raw is None:
        raise ConfigError(
            f"{path}: is empty; NeoX stops on an empty config file (AttributeError: 'NoneType' object "
            "has no attribute 'items'): add config keys to it or leave it out"
        )
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{path}: holds a {type(raw).__name__}, not a mapping of config keys; expected a NeoX YAML config"
        )
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
                f'("duplicate keys with previously loaded file: {written}"): keep it in one file'
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
            raise ConfigError(
                f"{where}: NeoX no longer accepts this key (TypeError: unexpected keyword argument "
                f"'{k}'); {what}: use {new}"
            )
        raise ConfigError(
            f"{where}: unknown NeoX config key{did_you_mean(k, known)}; NeoX stops with TypeError: "
            f"unexpected keyword argument '{k}': remove it or correct its name"
        )


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
    return NeoxConfig(
        values=merge.values,
        origin=merge.origin,
        block=merge.block,
        files=tuple(paths),
        written=merge.written,
        notes=tuple(merge.notes),
        block_origin=merge.block_origin,
    )


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
        raise ConfigError(
            f"{cfg.origin.get(key, '<config>')}: {key}: expected true or false, found "
            f"{type(v).__name__} {v!r}; NeoX refuses it (validate_types): write true or false"
        )
    return v


def get_paths(cfg: NeoxConfig, key: str) -> list[str]:
    v = cfg.values.get(key)
    if v is None:
        return []
    if isinstance(v, str):
        raise ConfigError(
            f"{cfg.origin.get(key)}: {key}: expected a list of path prefixes, found the string {v!r}; "
            f"NeoX refuses it (validate_types: a str, not a list): write [{json.dumps(v)}]"
        )
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise ConfigError(f"{cfg.origin.get(key)}: {key}: expected a list of path prefixes, found {v!r}")
    return list(v)


def get_weights(cfg: NeoxConfig, key: str, n: int) -> list[float | None]:
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
        raise ConfigError(
            f"{cfg.origin.get(key)}: {key}: {v!r}; expected weights >= 0 with a sum > 0 (NeoX stops "
            'on a sum of 0: "assert sum_weights > 0.0"); give each source a weight, 0 to leave it out'
        )
    return weights


#: NeoX's ATTENTION_TYPE_CHOICES (megatron/neox_arguments/neox_args.py)
NEOX_ATTENTION_TYPES = (
    "global",
    "local",
    "sparse_fixed",
    "sparse_variable",
    "bigbird",
    "bslongformer",
    "gmlp",
    "amlp",
    "flash",
    "rwkv",
    "mamba",
)


def _attention_layers(raw: Any, num_layers: int, where: str) -> list[Any]:
    """attention_config expanded to one entry per layer as NeoX's ``expand_attention_types`` expands it
    (``[[["flash"], 12]]`` -> 12 x "flash"; ``"all"`` repeats a pattern over every layer)."""
    if not isinstance(raw, list):
        raise ConfigError(f'{where}: expected a list such as [[["flash"], {num_layers}]], found {raw!r}')
    if all(isinstance(i, str) for i in raw):
        return list(raw)
    layers: list[Any] = []
    for item in raw:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], list)):
            raise ConfigError(f'{where}: {item!r}: expected [[types...], count], e.g. [["flash"], {num_layers}]')
        if item[1] == "all":
            if num_layers % len(item[0]):
                raise ConfigError(
                    f"{where}: num_layers {num_layers} is not divisible by the length of the pattern "
                    f"{item[0]}; NeoX stops there: give a pattern that divides {num_layers}"
                )
            return list(item[0]) * (num_layers // len(item[0]))
        if not is_whole(item[1]):
            raise ConfigError(f'{where}: {item!r}: expected a layer count or "all", found {item[1]!r}')
        layers += list(item[0]) * item[1]
    return layers


def check_attention_config(cfg: NeoxConfig) -> None:
    """NeoX's ``calculate_derived`` (after the batch): attention_config must cover exactly num_layers layers, each
    with a type NeoX knows."""
    num_layers = get_int(cfg, "num_layers")
    raw = cfg.values.get("attention_config")
    if num_layers is None or raw is None:
        return
    where = (
        f"{cfg.origin.get('attention_config', '<config>')}: {cfg.written.get('attention_config', 'attention_config')}"
    )
    layers = _attention_layers(raw, num_layers, where)
    if len(layers) != num_layers:
        raise ConfigError(
            f"{where}: covers {len(layers)} layers, num_layers is {num_layers} (in "
            f'{cfg.origin.get("num_layers")}); NeoX stops: "Length of attention config list must equal '
            f'num_layers": make the counts add up to {num_layers}, e.g. [[["flash"], {num_layers}]]'
        )
    unknown = [t for t in layers if t not in NEOX_ATTENTION_TYPES]
    if unknown:
        raise ConfigError(
            f'{where}: attention type {unknown[0]!r} is not one NeoX knows ("Attention type '
            f'{unknown[0]} not recognized"); expected one of {list(NEOX_ATTENTION_TYPES)}'
        )


_SIMPLE_TYPES: dict[str, type] = {"bool": bool, "int": int, "float": float, "str": str, "list": list, "dict": dict}


def neox_type_ok(value: Any, declared: str) -> bool | None:
    """Whether NeoX's ``validate_types`` accepts ``value`` for a key declared ``declared`` (neox_keys.json's
    spelling): the exact type (an int for a float too), a Literal's choices (strings case-insensitively), a
    Union's / Optional's member types. None where this mirror does not judge (List[...] members, Any)."""
    import ast

    if declared in _SIMPLE_TYPES:
        return type(value) is _SIMPLE_TYPES[declared] or (declared == "float" and type(value) is int)
    if declared.startswith("Literal["):
        choices = ast.literal_eval("[" + declared[len("Literal[") : -1] + "]")
        lower = [c.lower() for c in choices if isinstance(c, str)]
        return value in choices or (isinstance(value, str) and value.lower() in lower)
    for prefix in ("Optional[", "Union["):
        if declared.startswith(prefix) and "[" not in declared[len(prefix) : -1]:
            members = [m.strip() for m in declared[len(prefix) : -1].split(",")]
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
        if (
            value is None
            or declared is None
            or (auto and value == "auto")
            or neox_type_ok(value, declared) is not False
        ):
            continue
        where = f"{cfg.origin.get(key, '<config>')}: {cfg.written.get(key, key)}"
        if declared.startswith("Literal["):
            raise ConfigError(
                f'{where}: {value!r}: NeoX stops in validate_types ("Not in accepted values": '
                f"{declared[len('Literal[') : -1]}); write one of those values"
            )
        if isinstance(value, str) and declared == "list" and key.endswith("_paths"):
            continue  # _paths says it better: the list to write
        raise ConfigError(_type_message(where, value, declared))


def _type_message(where: str, value: Any, declared: str) -> str:
    """One line for a value NeoX's validate_types refuses: its type, the declared one, NeoX's words, the fix."""
    words = (
        f"; NeoX stops in validate_types (AttributeError: type object '{declared}' has no attribute '__origin__')"
        if declared in _SIMPLE_TYPES
        else "; NeoX stops in validate_types"
    )
    if isinstance(value, str) and declared in ("float", "int"):
        try:
            float(value)
        except ValueError:
            pass
        else:
            kind = "an integer" if declared == "int" else "a number"
            mantissa, e, exponent = value.lower().partition("e")
            fix = (
                f"write {mantissa}.0e{exponent}: PyYAML reads {value} as a string, YAML 1.1 floats need a dot"
                if e and "." not in mantissa
                else f"write {value} without quotes"
            )
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
            f'{cfg.origin.get("train_data_paths")}); NeoX stops: "Please provide *either* `data_path` or '
            '`train/valid/test_data_path`": remove data_path, or the three *_data_paths keys'
        )
    if given and len(given) < 3:
        missing = [k for k in SPLIT_PATH_KEYS if k not in given]
        raise ConfigError(
            f'{cfg.origin.get(given[0])}: {given[0]}: given without {" and ".join(missing)}; NeoX stops: "One or more '
            f'of train/valid/test data_path are not provided": set {" and ".join(missing)} too (the validation and '
            "test prefixes, e.g. the train prefixes again)"
        )
    pairs = [k for k in ("pos_train_data_paths", "neg_train_data_paths") if cfg.values.get(k)]
    if pairs and not cfg.values.get("train_data_paths") and not cfg.values.get("data_path"):
        impl = cfg.values.get("train_impl", "normal")
        raise ConfigError(
            f"{cfg.origin.get(pairs[0])}: {pairs[0]}: this config trains with train_impl: {impl} on preference pairs "
            f"(pos_/neg_ paths, dataset_impl: {cfg.values.get('dataset_impl', 'gpt2')}), which neox-epoch does not "
            "plan; it plans pretraining data (data_path or train_data_paths)"
        )
