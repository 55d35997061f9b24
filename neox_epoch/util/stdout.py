"""Standard output as an environment problem: closed, full or failing is one line and exit 2, never exit 3.

:func:`guarded` wraps ``sys.stdout`` for one command: an ``OSError`` while writing or flushing it (``> /dev/full``,
a full disk, an I/O error) becomes an :class:`~neox_epoch.errors.OutputError` naming standard output and the fix;
a pipe closed by its reader (``| head``) stays a ``BrokenPipeError`` (the CLI exits 0 on it).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from neox_epoch.errors import OutputError


def closed_error() -> OutputError:
    return OutputError(
        "standard output is closed (the command was started with fd 1 closed, e.g. '>&-'): expected "
        "an open stdout for its result; redirect it to a file or to /dev/null instead of closing it"
    )


def _failed(err: OSError) -> OutputError:
    return OutputError(
        f"standard output: cannot write the result ({err.strerror or err}): expected a writable "
        "stdout; free space on the device it goes to, or redirect it to another file"
    )


class GuardedStdout:
    """A proxy of a text stream whose write/flush failures (other than a closed pipe) raise OutputError."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as err:
            raise _failed(err) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as err:
            raise _failed(err) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def discard() -> None:
    """Point fd 1 at /dev/null so the interpreter's own flush at exit cannot fail again (after the one line)."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):
        pass
