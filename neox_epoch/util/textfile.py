"""Read a user's config file as text, with one-line errors for what can go wrong (missing, a directory,
unreadable, not UTF-8)."""

from __future__ import annotations

from neox_epoch.errors import ConfigError
from neox_epoch.util.inputs import read_input_text


def read_config_text(path: str, what: str = "config file") -> str:
    """The UTF-8 text of ``path``; :class:`ConfigError` naming the file and the fix otherwise (a directory, a FIFO or
    a device refused without reading it: :mod:`neox_epoch.util.inputs`)."""
    return read_input_text(path, what, error=ConfigError)
