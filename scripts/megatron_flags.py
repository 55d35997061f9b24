"""Regenerate neox_epoch/data/megatron_flags/<version>.json: every option Megatron-LM's ``parse_args`` knows.

Runs Megatron-LM's own ``megatron.training.arguments.parse_args()`` and catches the
``argparse.ArgumentParser`` it builds at the moment it would parse ``sys.argv``, then writes each
action's facts: option strings, dest, nargs, the type's name, the default, choices and the action
kind (store, store_true, store_false, ...). Nothing of Megatron-LM's code is copied: the file is a table
of option names and defaults, with the version read from ``megatron/core/package_info.py``.

Run with the Megatron-LM tree first on PYTHONPATH (its megatron.core shadows the wheel's)::

    MEGATRON_LM_DIR=<Megatron-LM tree> python scripts/megatron_flags.py [OUT.json]

``python scripts/megatron_flags.py --modelopt TABLE.json TREE`` adds the ModelOpt options of the tree's
``megatron/post_training/arguments.py`` to a table (``modelopt_options``).

Without OUT.json the table goes to ``neox_epoch/data/megatron_flags/<version>.json``. On Python >= 3.12 the
megatron-core wheel carries ``megatron/training`` itself (0.19.2): run it there without MEGATRON_LM_DIR.

Importing megatron.training needs torch, megatron-core's dependencies and ``six regex triton pydantic``
(see shared/notes/megatron-core.md, "Megatron-LM's training side").
"""

from __future__ import annotations

import argparse
import enum
import json
import os
import re
import sys
from typing import Any

#: one table per Megatron-LM version, named after it (0.16.1.json, 0.19.2.json ...);
#: neox_epoch.formats.megatron_flags picks the one of the megatron-core version a plan mirrors
OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "neox_epoch", "data", "megatron_flags")

#: argparse action classes by the name a reader expects (the ``action=`` string that creates them)
ACTION_NAMES = {
    "_StoreAction": "store",
    "_StoreTrueAction": "store_true",
    "_StoreFalseAction": "store_false",
    "_StoreConstAction": "store_const",
    "_AppendAction": "append",
    "_AppendConstAction": "append_const",
    "_CountAction": "count",
    "_HelpAction": "help",
    "_VersionAction": "version",
    "BooleanOptionalAction": "boolean_optional",
}


class _Caught(Exception):
    """Raised instead of parsing, carrying the parser parse_args built."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__("parser caught")
        self.parser = parser


def megatron_parser() -> argparse.ArgumentParser:
    """The ArgumentParser built by Megatron-LM's ``parse_args()`` (caught before it parses)."""
    from megatron.training import arguments

    def catch(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        raise _Caught(self)

    methods = ("parse_args", "parse_known_args")
    saved = {name: getattr(argparse.ArgumentParser, name) for name in methods}
    for name in methods:  # patched on the class: Megatron-LM builds its own parser
        setattr(argparse.ArgumentParser, name, catch)
    try:
        arguments.parse_args()
    except _Caught as caught:
        return caught.parser
    finally:
        for name, method in saved.items():
            setattr(argparse.ArgumentParser, name, method)
    raise RuntimeError("megatron.training.arguments.parse_args() returned without parsing")


def type_name(kind: Any) -> str | None:
    """A JSON-able name for an action's ``type``: int, float, str, or the callable's name."""
    if kind is None:
        return None
    name = getattr(kind, "__name__", None) or type(kind).__name__
    if name == "enum_type_handler":  # ArgumentGroupFactory's enum parser: the value is a member name
        return "enum"
    return str(name)


def json_value(value: Any) -> Any:
    """Defaults and choices as JSON: enums by member name, other objects by str()."""
    if isinstance(value, enum.Enum):  # before int: IntEnum members (signal.Signals) are ints too
        return value.name
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    return str(value)


def action_record(action: argparse.Action) -> dict[str, Any]:
    """The facts of one argparse action."""
    kind = ACTION_NAMES.get(type(action).__name__, type(action).__name__)
    return {
        "options": list(action.option_strings),
        "dest": action.dest,
        "action": kind,
        "nargs": action.nargs,
        "type": type_name(action.type),
        "default": json_value(action.default),
        "choices": None if action.choices is None else [json_value(c) for c in action.choices],
        "required": bool(action.required),
    }


def package_version(tree: str) -> str:
    """MAJOR.MINOR.PATCH+PRE_RELEASE from megatron/core/package_info.py, read as text (not imported)."""
    text = open(os.path.join(tree, "megatron", "core", "package_info.py"), encoding="utf-8").read()
    parts = {k: v for k, v in re.findall(r'^(MAJOR|MINOR|PATCH|PRE_RELEASE)\s*=\s*["\']?([^"\'\n]*)', text, re.M)}
    return f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}{parts.get('PRE_RELEASE', '')}"


def modelopt_records(tree: str) -> list[dict[str, Any]]:
    """The options of ``megatron/post_training/arguments.py``'s ``add_modelopt_args`` in the Megatron-LM ``tree``
    (pretrain_gpt.py passes it to parse_args only when nvidia-modelopt imports): the module is plain argparse, run
    on a bare parser."""
    import importlib.util

    path = os.path.join(tree, "megatron", "post_training", "arguments.py")
    spec = importlib.util.spec_from_file_location("_modelopt_arguments", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    parser = argparse.ArgumentParser(add_help=False)
    module.add_modelopt_args(parser)
    return sorted((action_record(a) for a in parser._actions if a.option_strings), key=lambda a: a["options"][0])


def add_modelopt(table_path: str, tree: str) -> int:
    """Write ``modelopt_options`` (see :func:`modelopt_records`) of ``tree`` into the table at ``table_path``."""
    with open(table_path, encoding="utf-8") as f:
        table = json.load(f)
    table["modelopt_options"] = modelopt_records(tree)
    table["modelopt_source"] = (
        "megatron/post_training/arguments.py add_modelopt_args(): options pretrain_gpt.py "
        "adds when nvidia-modelopt is installed"
    )
    with open(table_path, "w", encoding="utf-8") as f:
        json.dump(table, f, indent=0, sort_keys=True)
        f.write("\n")
    return len(table["modelopt_options"])


def main(argv: list[str] | None = None) -> int:
    """Write the table; the Megatron-LM tree comes from MEGATRON_LM_DIR or the imported megatron package."""
    args = argv or sys.argv[1:]
    if args[:1] == ["--modelopt"]:  # --modelopt TABLE.json TREE: add the ModelOpt options of TREE to TABLE
        print(f"{add_modelopt(args[1], args[2])} ModelOpt options written to {args[1]}")
        return 0
    given = args[0] if args else None
    tree = os.environ.get("MEGATRON_LM_DIR")
    if tree and tree not in sys.path:
        sys.path.insert(0, tree)
    import megatron

    tree = os.path.dirname(os.path.dirname(os.path.abspath(megatron.__path__[0] + "/x")))
    parser = megatron_parser()
    actions = [action_record(a) for a in parser._actions if a.option_strings and a.dest != "help"]
    table = {
        "megatron_lm_version": package_version(tree),
        "source": "megatron/training/arguments.py parse_args(): the argparse parser it builds",
        "allow_abbrev": bool(parser.allow_abbrev),
        "num_options": len(actions),
        "options": sorted(actions, key=lambda a: a["options"][0]),
    }
    out = given or os.path.join(OUT_DIR, f"{table['megatron_lm_version']}.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(table, f, indent=0, sort_keys=True)
        f.write("\n")
    print(f"{len(actions)} options of Megatron-LM {table['megatron_lm_version']} written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
