"""Writing a config file a command was asked for (``check-batch --fix``, ``plan --write-config``).

One writer for both: the output path is checked before anything is written (never one of the input
files, never a directory; optionally never an input's file name, which NeoX refuses, and never into a
directory that does not exist), and the text is written atomically (``neox_epoch.util.atomic``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from neox_epoch.errors import ConfigError
from neox_epoch.util.atomic import write_text_atomic


def _same_file(a: str, b: str) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    return os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b)


def suggested_name(out_path: str, suffix: str = "_exact") -> str:
    """``dir/name<suffix>.ext`` next to ``out_path``: a name that differs from it."""
    stem, ext = os.path.splitext(out_path)
    return f"{stem}{suffix}{ext or '.yml'}"


def check_output_path(out_path: str, inputs: Sequence[str], label: str, *, extensions: Sequence[str] = (),
                      kind: str = "", unique_name: bool = False, existing_dir: bool = False) -> None:
    """Raise :class:`ConfigError` (one line: the path, why, the fix) when ``out_path`` cannot be written.

    Always refused: a directory, and one of ``inputs`` (same real path or same file). ``extensions``: the
    name must end in one of them (read back as ``kind``). ``unique_name``: refuse an input's file name (NeoX
    refuses two config files with the same name). ``existing_dir``: refuse a directory that does not exist.
    """
    if os.path.isdir(out_path):
        raise ConfigError(f"{label} is a directory; expected a file path, e.g. {os.path.join(out_path, 'exact.yml')}")
    for path in inputs:
        if _same_file(out_path, path):
            raise ConfigError(f"{label} is the input config {path}; writing it would overwrite that file; expected a "
                              f"new path: write to another file, e.g. {suggested_name(out_path)}")
    if unique_name:
        for path in inputs:
            if os.path.basename(path) == os.path.basename(out_path):
                raise ConfigError(
                    f"{label} has the same file name as the input config {path}; NeoX refuses two config files with "
                    "the same name (it saves them side by side with the checkpoint); choose another name, e.g. "
                    f"{suggested_name(out_path)}")
    if existing_dir:
        parent = os.path.dirname(os.path.abspath(out_path))
        if not os.path.isdir(parent):
            raise ConfigError(f"{label}: its directory {os.path.dirname(out_path) or parent} does not exist; "
                              "create it first or write to an existing directory")
    if extensions and not out_path.lower().endswith(tuple(extensions)):
        raise ConfigError(f"{label} must end in {' or '.join(extensions)} to be read back as a {kind} config; "
                          "rename it")


def yaml_config_text(header: Sequence[str], data: Mapping[str, Any]) -> str:
    """``# header`` lines, then ``data`` as block-style YAML in its own key order."""
    import yaml

    lines = [h if h.startswith("#") else f"# {h}" for h in header]
    return "\n".join(lines) + "\n" + yaml.safe_dump(dict(data), sort_keys=False, default_flow_style=False)


def write_config_text(out_path: str, text: str, label: str) -> None:
    """Write ``text`` to ``out_path`` atomically; an OS error becomes a one-line :class:`ConfigError`."""
    try:
        write_text_atomic(out_path, text)
    except OSError as err:
        raise ConfigError(f"{label} cannot be written ({err.strerror}); choose a writable path") from None
