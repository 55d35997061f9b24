"""A Megatron-LM command line's data: the blends of --data-path and the per-split paths, and the files its
flags name (--data-args-path, --per-split-data-args-path, --per-dataset-sequences-path), read as Megatron-LM
reads them.

Pure: stdlib only."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from neox_epoch.errors import ConfigError
from neox_epoch.semantics import megatron_lm as megatron_lm_sem
from neox_epoch.util.inputs import JSON_BYTES, open_input

Blend = tuple[tuple[str, ...], tuple[float, ...] | None]


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


def sequences_per_dataset(path: str | None) -> tuple[tuple[str, tuple[int, ...]], ...] | None:
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


def data_blends(ns: argparse.Namespace) -> tuple[Blend | None, tuple[Blend | None, Blend | None, Blend | None] | None]:
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
