"""Read a user's config file as text, with one-line errors for what can go wrong (missing, a directory,
unreadable, not UTF-8)."""

from __future__ import annotations

import os

from neox_epoch.errors import ConfigError


def read_config_text(path: str, what: str = "config file") -> str:
    """The UTF-8 text of ``path``; :class:`ConfigError` naming the file and the fix otherwise."""
    if os.path.isdir(path):
        raise ConfigError(f"{path}: is a directory; expected a {what}")
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        raise ConfigError(f"{path}: {what} not found; check the path") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: is not UTF-8 text (byte 0x{err.object[err.start]:02x} at offset {err.start}); "
                          f"expected a {what}: save it as UTF-8") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot be read ({err.strerror}); expected a readable {what}") from None
