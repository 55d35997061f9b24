"""Atomic file writes: write to a temporary file beside the target, fsync, then rename over it."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import IO


def write_atomic(path: str, write: Callable[[IO[bytes]], None]) -> None:
    """Call ``write(f)`` on a temporary file in ``path``'s directory and rename it to ``path``."""
    directory = os.path.dirname(os.path.abspath(path)) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_text_atomic(path: str, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    write_atomic(path, lambda f: f.write(text.encode("utf-8")))
