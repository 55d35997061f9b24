"""Megatron-LM's options, per version: the option tables in ``neox_epoch/data/megatron_flags/<version>.json``
(see scripts/megatron_flags.py), the argparse parser rebuilt from them, and the unknown-flag check.

Pure: stdlib and the JSON tables; no torch, no megatron import."""

from __future__ import annotations

import argparse
import functools
import json
import os
from collections.abc import Sequence
from typing import Any

from neox_epoch.errors import ConfigError, did_you_mean
from neox_epoch.formats import launch_line
from neox_epoch.semantics import megatron_lm as megatron_lm_sem
from neox_epoch.semantics.megatron_lm import MegatronRefusal

FLAGS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "megatron_flags")


DEFAULT_VERSION = megatron_lm_sem.MEGATRON_LM_VERSION


WORLD_FLAGS = ("--world-size", "--nproc-per-node", "--nproc_per_node", "--nnodes")


_TYPES: dict[str, Any] = {"int": int, "float": float, "str": str, "bool": bool}


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
def option_specs(version: str = DEFAULT_VERSION) -> dict[str, dict[str, Any]]:
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
    clash = [f for f in WORLD_FLAGS if f in option_specs(version)]
    if clash:
        raise ConfigError(
            f"megatron_flags/{version}.json: {clash[0]} is a Megatron-LM option now; the world flags need new names"
        )
    parser.add_argument("--world-size", dest="ne_world_size", type=int, default=None)
    parser.add_argument("--nproc-per-node", "--nproc_per_node", dest="ne_nproc_per_node", default=None)
    parser.add_argument("--nnodes", dest="ne_nnodes", default=None)
    return parser


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
    has = [v for v in table_versions() if v != version and name in option_specs(v)]
    if not has:
        return None
    later = [v for v in has if _version_key(v) > _version_key(version)]
    if later:
        return f"added after {version} (in Megatron-LM {', '.join(later)})"
    return f"removed after {', '.join(has)} (not in {version})"


def _version_key(version: str) -> tuple[int, ...]:
    """'0.19.2' -> (0, 19, 2)."""
    return tuple(int(p) for p in version.split(".")[:3] if p.isdigit())


def check_unknown(extras: list[str], version: str = DEFAULT_VERSION) -> None:
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
        choices = list(option_specs(version)) + list(WORLD_FLAGS)
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
