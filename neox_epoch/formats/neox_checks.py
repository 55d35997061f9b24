"""The checks NeoX makes on a merged config before it builds data, mirrored: the attention config, each key's
declared type, the data keys."""

from __future__ import annotations

from typing import Any

from neox_epoch.errors import ConfigError
from neox_epoch.formats.neox_config import NeoxConfig, get_int, known_neox_keys
from neox_epoch.util.values import is_whole

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
