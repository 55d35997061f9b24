"""Read the batch, parallelism and launcher keys from NeoX YAML files or one DeepSpeed JSON config.

Two flavors, decided by the file extension:

* ``neox``: one or more ``.yml``/``.yaml`` files merged like NeoX's ``NeoXArgs.from_ymls`` (keys with
  ``-`` and ``_`` are the same key; a key given again is an error when written with ``_``, and replaces the
  earlier value when written with ``-``, as in NeoX). ``gradient_accumulation_steps``
  defaults to 1, as in NeoX. Launcher keys (hostfile, include, exclude, num_nodes, num_gpus, launcher,
  ...) are read too, because ``deepy.py`` turns them into ``deepspeed`` flags.
* ``deepspeed``: exactly one ``.json`` file read as DeepSpeed reads it (JSON, or hjson when installed;
  duplicate keys rejected). Keys are taken literally. Parallel sizes come from ``pipeline.stages``,
  ``tensor_parallel.autotp_size`` and ``sequence_parallel_size``, or from the NeoX names
  ``pipe_parallel_size``/``model_parallel_size`` when a script's mpu uses them.

Values must be integers: a string such as ``"16"`` is rejected with the key named (DeepSpeed raises a
TypeError deep inside ``deepspeed.initialize`` for it). This module imports only pyyaml.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from neox_epoch.errors import ConfigError, did_you_mean
from neox_epoch.util.textfile import read_config_text
from neox_epoch.util.values import is_whole

Flavor = Literal["neox", "deepspeed"]

#: the three DeepSpeed batch keys, in the order DeepSpeed's derivation table uses
BATCH_KEYS: tuple[str, ...] = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")

#: NeoX runner keys that ``deepy.py`` passes to the deepspeed launcher when they differ from NeoX's defaults
NEOX_RUNNER_DEFAULTS: dict[str, Any] = {
    "hostfile": None,
    "include": None,
    "exclude": None,
    "num_nodes": -1,
    "num_gpus": None,
    "master_port": 29500,
    "master_addr": None,
    "launcher": "pdsh",
    "force_multi": False,
    "no_ssh_check": False,
}

#: NeoX flags that imply --force_multi in deepy.py
NEOX_FORCE_MULTI_KEYS: tuple[str, ...] = ("deepspeed_slurm", "deepspeed_mpi")

_YAML_EXTENSIONS = (".yml", ".yaml")
_JSON_EXTENSIONS = (".json",)


@dataclass(frozen=True, kw_only=True, slots=True)
class LauncherSettings:
    """The launcher flags as the user (config or command line) gave them; ``None`` means not given."""

    hostfile: str | None = None
    """Path of the hostfile (``-H/--hostfile``); None leaves DeepSpeed's default (/job/hostfile)."""
    include: str | None = None
    """``-i/--include`` filter, e.g. ``node1:0,1@node2``."""
    exclude: str | None = None
    """``-e/--exclude`` filter."""
    num_nodes: int | None = None
    """``--num_nodes``: keep the first N hosts of the hostfile."""
    num_gpus: int | None = None
    """``--num_gpus``: processes per host (slots 0..N-1, regardless of the hostfile's slots)."""
    launcher: str | None = None
    """``--launcher`` backend for multi-node runs (pdsh, openmpi, mpich, impi, mvapich, slurm)."""
    master_port: int | None = None
    """``--master_port`` (does not change the world; kept so a fixed NeoX config keeps it)."""
    master_addr: str | None = None
    """``--master_addr`` (does not change the world)."""
    force_multi: bool = False
    """``--force_multi``: use the multi-node backend even for one host."""
    no_ssh_check: bool = False
    """``--no_ssh_check`` (does not change the world)."""

    def overridden_by(self, other: LauncherSettings) -> LauncherSettings:
        """Return these settings with every value ``other`` gives (not None / True) replacing ours."""
        values: dict[str, Any] = {}
        for name in (f.name for f in fields(self)):
            mine, theirs = getattr(self, name), getattr(other, name)
            if isinstance(mine, bool):
                values[name] = mine or bool(theirs)
            else:
                values[name] = theirs if theirs is not None else mine
        return LauncherSettings(**values)

    def given(self) -> dict[str, Any]:
        """The settings that were given, as ``{name: value}`` (None and False left out)."""
        out: dict[str, Any] = {}
        for name in (f.name for f in fields(self)):
            value = getattr(self, name)
            if value is not None and value is not False:
                out[name] = value
        return out


@dataclass(frozen=True, kw_only=True)
class BatchConfig:
    """The batch-relevant content of a NeoX or DeepSpeed config."""

    flavor: Flavor
    """``neox`` for YAML files (NeoX semantics), ``deepspeed`` for one JSON file (DeepSpeed semantics)."""
    paths: tuple[str, ...]
    """The config files, in the order given."""
    data: dict[str, Any]
    """The merged config (NeoX: keys normalized to ``_``); the base a ``--fix`` output is written from."""
    origin: dict[str, str]
    """Which file each top-level key came from (for messages)."""
    train_batch_size: int | None
    """``train_batch_size`` as written, None when absent."""
    train_micro_batch_size_per_gpu: int | None
    """``train_micro_batch_size_per_gpu`` as written, None when absent."""
    gradient_accumulation_steps: int | None
    """``gradient_accumulation_steps``; NeoX's default 1 when absent from a NeoX config, None for DeepSpeed."""
    gradient_accumulation_steps_given: bool
    """Whether ``gradient_accumulation_steps`` was written in the config."""
    pipe_parallel_size: int
    """Pipeline stages, at least 1 (NeoX's 0 = no pipeline counts as 1, as in NeoX's dp formula)."""
    model_parallel_size: int
    """Tensor (model) parallel size, at least 1."""
    sequence_parallel_size: int = 1
    """DeepSpeed's Ulysses ``sequence_parallel_size`` (divides the data-parallel size), 1 when absent."""
    global_num_gpus: int | None = None
    """NeoX's ``global_num_gpus`` when written in the config (NeoX then skips its own GPU count)."""
    launcher: LauncherSettings = field(default_factory=LauncherSettings)
    """Launcher keys found in a NeoX config (empty for DeepSpeed JSON, which has none)."""

    def where(self, key: str) -> str:
        """``'in a.yml'`` for a key of this config (or the list of files when the key is absent)."""
        return f"in {self.origin.get(key) or ', '.join(self.paths)}"


def _no_duplicates(path: str) -> Any:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise ConfigError(
                    f'config file "{path}" has the key "{key}" twice; DeepSpeed rejects duplicate keys; keep one'
                )
            out[key] = value
        return out

    return hook


def _load_json(path: str) -> Any:
    text = read_config_text(path, "DeepSpeed JSON config")
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates(path))
    except json.JSONDecodeError as err:
        try:  # DeepSpeed reads config files with hjson (comments, unquoted keys)
            import hjson
        except ImportError:
            hjson = None
        if hjson is not None:
            try:
                return hjson.loads(text, object_pairs_hook=_no_duplicates(path))
            except hjson.HjsonDecodeError:
                pass
        raise ConfigError(
            f'config file "{path}" is not valid JSON at line {err.lineno}, column {err.colno} ({err.msg}); '
            "expected a DeepSpeed JSON config"
        ) from None


def _flavor_of(paths: Sequence[str]) -> Flavor:
    kinds = set()
    for path in paths:
        ext = os.path.splitext(path)[1].lower()
        if ext in _YAML_EXTENSIONS:
            kinds.add("neox")
        elif ext in _JSON_EXTENSIONS:
            kinds.add("deepspeed")
        else:
            raise ConfigError(
                f'config file "{path}" has the extension "{ext or "(none)"}"; expected .yml/.yaml (NeoX) or '
                ".json (DeepSpeed); rename the file"
            )
    if len(kinds) > 1:
        raise ConfigError(
            f"config files {', '.join(paths)} mix NeoX YAML and DeepSpeed JSON; expected NeoX .yml files "
            "or one DeepSpeed .json; check them separately"
        )
    flavor: Flavor = "neox" if "neox" in kinds else "deepspeed"
    if flavor == "deepspeed" and len(paths) > 1:
        raise ConfigError(
            f"{len(paths)} DeepSpeed JSON files given ({', '.join(paths)}); expected one "
            "(deepspeed takes one --deepspeed_config); merge them into one file"
        )
    return flavor


def _read_files(paths: Sequence[str], flavor: Flavor) -> tuple[dict[str, Any], dict[str, str]]:
    if flavor == "neox":  # one NeoX loader for the project: NeoX's merge and duplicate-key rules
        from neox_epoch.formats.neox_config import load_neox_configs

        cfg = load_neox_configs(list(paths), check_keys=False)
        return dict(cfg.values), dict(cfg.origin)
    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for path in paths:
        if not os.path.exists(path):
            raise ConfigError(f'config file "{path}" not found; expected a NeoX YAML or DeepSpeed JSON path')
        if os.path.isdir(path):
            raise ConfigError(f'config path "{path}" is a directory; expected a NeoX YAML or DeepSpeed JSON file')
        content = _load_json(path)
        if content is None:
            content = {}
        if not isinstance(content, Mapping):
            raise ConfigError(
                f'config file "{path}" holds a {type(content).__name__}, not a mapping of keys; '
                "expected a NeoX YAML or DeepSpeed JSON object"
            )
        for raw_key, value in content.items():
            key = str(raw_key)
            if key in merged:
                raise ConfigError(
                    f'config key "{key}" is set in both {origin[key]} and {path}; NeoX rejects a key given in '
                    "two config files; keep one"
                )
            merged[key] = value
            origin[key] = path
    return merged, origin


def _type_name(value: Any) -> str:
    if isinstance(value, str):
        return f'the string "{value}"'
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    return f"{type(value).__name__} {value!r}"


def integer_value(value: Any, key: str, where: str, *, minimum: int | None = 1) -> int:
    """Return ``value`` when it is a real integer >= ``minimum``, else raise ConfigError naming ``key``."""
    if not is_whole(value):
        hint = ""
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            hint = f"; write {key}: {value.strip()} without quotes"
        elif isinstance(value, float) and value.is_integer():
            hint = f"; write {key}: {int(value)}"
        raise ConfigError(
            f'config key "{key}" {where} is {_type_name(value)}; expected an integer{hint or "; set a whole number"}'
        )
    if minimum is not None and value < minimum:
        raise ConfigError(
            f'config key "{key}" {where} is {value}; expected an integer >= {minimum}; set a positive value'
        )
    return value


def _optional_int(data: Mapping[str, Any], key: str, where: str, *, minimum: int | None = 1) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    return integer_value(value, key, where, minimum=minimum)


def _optional_str(data: Mapping[str, Any], key: str, where: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(f'config key "{key}" {where} is {_type_name(value)}; expected a string')
    return value


def _optional_bool(data: Mapping[str, Any], key: str, where: str) -> bool:
    value = data.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ConfigError(f'config key "{key}" {where} is {_type_name(value)}; expected true or false')
    return value


def neox_launcher(data: Mapping[str, Any], origin: Mapping[str, str]) -> LauncherSettings:
    """The launcher keys of a merged NeoX config (hostfile, include, exclude, num_nodes, num_gpus, ...).

    ``num_nodes: -1`` (NeoX's default, "all hosts") counts as not given. Raises :class:`ConfigError` for
    a value of the wrong type, naming the file from ``origin``.
    """

    def where(key: str) -> str:
        return f"in {origin.get(key, 'the config')}"

    force_multi = _optional_bool(data, "force_multi", where("force_multi"))
    for key in NEOX_FORCE_MULTI_KEYS:
        force_multi = force_multi or _optional_bool(data, key, where(key))
    num_nodes = _optional_int(data, "num_nodes", where("num_nodes"), minimum=None)
    return LauncherSettings(
        hostfile=_optional_str(data, "hostfile", where("hostfile")),
        include=_optional_str(data, "include", where("include")),
        exclude=_optional_str(data, "exclude", where("exclude")),
        num_nodes=None if num_nodes == NEOX_RUNNER_DEFAULTS["num_nodes"] else num_nodes,
        num_gpus=_optional_int(data, "num_gpus", where("num_gpus"), minimum=None),
        launcher=_optional_str(data, "launcher", where("launcher")),
        master_port=_optional_int(data, "master_port", where("master_port")),
        master_addr=_optional_str(data, "master_addr", where("master_addr")),
        force_multi=force_multi,
        no_ssh_check=_optional_bool(data, "no_ssh_check", where("no_ssh_check")),
    )


def _deepspeed_parallel(data: Mapping[str, Any], where: str) -> tuple[int | None, int | None]:
    """``pipeline.stages`` and ``tensor_parallel.autotp_size`` of a DeepSpeed config (None when absent)."""
    pp: int | None = None
    pipeline = data.get("pipeline")
    if isinstance(pipeline, Mapping) and pipeline.get("stages") not in (None, "auto"):
        pp = integer_value(pipeline["stages"], "pipeline.stages", where)
    mp: int | None = None
    tp = data.get("tensor_parallel")
    if isinstance(tp, Mapping) and tp.get("autotp_size") not in (None, 0):
        mp = integer_value(tp["autotp_size"], "tensor_parallel.autotp_size", where)
    return pp, mp


def _one_of(a: int | None, a_name: str, b: int | None, b_name: str, where: str) -> int | None:
    if a is not None and b is not None and a != b:
        raise ConfigError(
            f'config keys "{a_name}" ({a}) and "{b_name}" ({b}) {where} disagree; expected one value; keep one of them'
        )
    return a if a is not None else b


def read_config(paths: Sequence[str]) -> BatchConfig:
    """Read ``paths`` (NeoX YAML files, or one DeepSpeed JSON) into a :class:`BatchConfig`.

    Raises :class:`ConfigError` for a missing/unreadable file, a key set twice, or a batch, parallelism
    or launcher key of the wrong type (``"16"``, ``16.0``, ``true``) or below 1.
    """
    if not paths:
        raise ConfigError("no config file given; expected one or more NeoX .yml files or one DeepSpeed .json")
    flavor = _flavor_of(paths)
    data, origin = _read_files(paths, flavor)

    def where(key: str) -> str:
        return f"in {origin.get(key, ', '.join(paths))}"

    tbs = _optional_int(data, "train_batch_size", where("train_batch_size"))
    mbs = _optional_int(data, "train_micro_batch_size_per_gpu", where("train_micro_batch_size_per_gpu"))
    gas = _optional_int(data, "gradient_accumulation_steps", where("gradient_accumulation_steps"))
    gas_given = gas is not None
    if flavor == "neox" and gas is None:
        gas = 1  # NeoX's default (not None): NeoX then treats all three as given
    if tbs is None and mbs is None:
        near = [k for k in data if did_you_mean(k, list(BATCH_KEYS))]
        hint = f' (found "{near[0]}"{did_you_mean(near[0], list(BATCH_KEYS))})' if near else ""
        raise ConfigError(
            f"config {', '.join(paths)} sets neither train_batch_size nor train_micro_batch_size_per_gpu{hint}; "
            "DeepSpeed needs at least one of them; set train_batch_size"
        )

    neox_pp = _optional_int(data, "pipe_parallel_size", where("pipe_parallel_size"), minimum=0)
    neox_mp = _optional_int(data, "model_parallel_size", where("model_parallel_size"), minimum=0)
    sp = _optional_int(data, "sequence_parallel_size", where("sequence_parallel_size"))
    if flavor == "deepspeed":
        ds_pp, ds_mp = _deepspeed_parallel(data, where("pipeline"))
        pp = _one_of(neox_pp, "pipe_parallel_size", ds_pp, "pipeline.stages", f"in {paths[0]}")
        mp = _one_of(neox_mp, "model_parallel_size", ds_mp, "tensor_parallel.autotp_size", f"in {paths[0]}")
        launcher = LauncherSettings()
        global_num_gpus = None
    else:
        pp, mp = neox_pp, neox_mp
        launcher = neox_launcher(data, origin)
        global_num_gpus = _optional_int(data, "global_num_gpus", where("global_num_gpus"))
        sp = None  # NeoX's sequence_parallel is a bool inside the model-parallel group; dp is unchanged
    return BatchConfig(
        flavor=flavor,
        paths=tuple(paths),
        data=data,
        origin=origin,
        train_batch_size=tbs,
        train_micro_batch_size_per_gpu=mbs,
        gradient_accumulation_steps=gas,
        gradient_accumulation_steps_given=gas_given,
        pipe_parallel_size=max(pp or 1, 1),
        model_parallel_size=max(mp or 1, 1),
        sequence_parallel_size=sp or 1,
        global_num_gpus=global_num_gpus,
        launcher=launcher,
    )


def deepspeed_keys_sent(config: BatchConfig) -> dict[str, Any]:
    """The top-level keys DeepSpeed will see from this config.

    For a DeepSpeed JSON that is the whole file. For NeoX, ``deepy.py`` sends only DeepSpeed-config fields
    that differ from NeoX's defaults, merged with ``deepspeed_extra_args``; a key at NeoX's default
    (``sparse_gradients: false``, ``amp: null``) never reaches DeepSpeed.
    """
    if config.flavor == "deepspeed":
        return dict(config.data)
    neox_defaults_false = {"sparse_gradients"}
    sent = {k: v for k, v in config.data.items() if v is not None and not (k in neox_defaults_false and v is False)}
    extra = config.data.get("deepspeed_extra_args")
    if isinstance(extra, Mapping):
        sent.update({str(k): v for k, v in extra.items()})
    return sent
