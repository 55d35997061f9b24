"""Writing a config file a command was asked for (``check-batch --fix``, ``plan --write-config``).

One writer for both, through the one output policy (:mod:`neox_epoch.util.output`: never an input, a data or
index file, a directory or a special file; atomic, with the umask's mode), plus what config files need: the
suffix they are read back by, optionally never an input's file name (which NeoX refuses), and never into a
directory that does not exist.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from neox_epoch.errors import ConfigError
from neox_epoch.util.output import Input, Output, check_output, write_output_text


def suggested_name(out_path: str, suffix: str = "_exact") -> str:
    """``dir/name<suffix>.ext`` next to ``out_path``: a name that differs from it."""
    stem, ext = os.path.splitext(out_path)
    return f"{stem}{suffix}{ext or '.yml'}"


def config_output(out_path: str, option: str, suffix: str = "_exact") -> Output:
    """The :class:`Output` of a config writer: ``option`` (``--write-config``) names ``out_path``; the name
    suggested instead carries ``suffix``."""
    return Output(out_path, option, example=os.path.basename(suggested_name(out_path, suffix)))


def config_inputs(paths: Sequence[str], others: Sequence[Input] = ()) -> list[Input]:
    """The input configs (named so in messages) and the other files the command read."""
    return [(path, "the input config") for path in paths] + list(others)


def check_output_path(
    out: Output,
    inputs: Sequence[Input],
    *,
    extensions: Sequence[str] = (),
    kind: str = "",
    unique_name: bool = False,
    existing_dir: bool = False,
) -> None:
    """Raise a one-line error (the path, why, the fix) when ``out`` cannot be written.

    Always refused: what the output policy refuses (:func:`neox_epoch.util.output.check_output`). ``extensions``:
    the name must end in one of them (read back as ``kind``). ``unique_name``: refuse an input's file name (NeoX
    refuses two config files with the same name). ``existing_dir``: refuse a directory that does not exist.
    """
    check_output(out, inputs, existing_dir=existing_dir)
    label = out.label
    if unique_name:
        for path in (item if isinstance(item, str) else item[0] for item in inputs):
            if os.path.basename(path) == os.path.basename(out.path):
                raise ConfigError(
                    f"{label} has the same file name as the input config {path}; NeoX refuses two config files with "
                    "the same name (it saves them side by side with the checkpoint); choose another name, e.g. "
                    f"{suggested_name(out.path)}"
                )
    if extensions and not out.path.lower().endswith(tuple(extensions)):
        raise ConfigError(
            f"{label} must end in {' or '.join(extensions)} to be read back as a {kind} config; rename it"
        )


def yaml_config_text(header: Sequence[str], data: Mapping[str, Any]) -> str:
    """``# header`` lines, then ``data`` as block-style YAML in its own key order."""
    import yaml

    lines = [h if h.startswith("#") else f"# {h}" for h in header]
    return "\n".join(lines) + "\n" + yaml.safe_dump(dict(data), sort_keys=False, default_flow_style=False)


def write_config_text(out: Output, text: str, inputs: Sequence[Input] = ()) -> None:
    """Write ``text`` to ``out`` through the output policy (atomic, umask's mode; errors in one line)."""
    write_output_text(out, text, inputs)
