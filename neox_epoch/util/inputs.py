"""Opening what a user gives to read: a regular file of plausible size, or one line saying what it is instead.

Every reader opens its files through :func:`open_input` (or checks a file it maps with :func:`check_input`): a FIFO
is opened without blocking and refused, a device (``/dev/zero``), a directory or a socket is refused before it is
read, a file larger than its kind can be is refused before it is read into memory, and the operating system's
refusals (permission denied, a name too long, a loop of symlinks) become the project's errors, naming the file and
the fix. Nothing here reads the content.
"""

from __future__ import annotations

import os
import stat
from typing import IO

from neox_epoch.errors import ConfigError, NeoxEpochError

#: Size bounds of the text inputs read whole (configs, JSON files, run logs, checkpoints' small files).
CONFIG_BYTES = 64 << 20
JSON_BYTES = 256 << 20
RUN_LOG_BYTES = 4 << 30

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def kind_of(mode: int) -> str:
    """What a file of ``mode`` is, for a message (``"a regular file"``, ``"a FIFO (named pipe)"``, ...)."""
    return next(
        (name for test, name in _KINDS if test(mode)), "a regular file" if stat.S_ISREG(mode) else "a special file"
    )


def _refuse(path: str, what: str, found: str, error: type[NeoxEpochError]) -> NeoxEpochError:
    return error(f"{path}: {found}; expected a {what} as a regular file: give the path of the file itself")


def _os_error(path: str, what: str, err: OSError, error: type[NeoxEpochError]) -> NeoxEpochError:
    try:  # (a socket cannot be opened at all: ENXIO; say what it is)
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode) and not isinstance(err, PermissionError):
            return _refuse(path, what, f"is {kind_of(mode)}", error)
    except OSError:
        pass
    if isinstance(err, FileNotFoundError):
        return error(f"{path}: {what} not found; check the path")
    if isinstance(err, PermissionError):
        return error(
            f"{path}: permission denied reading the {what}; make it readable for this user (chmod/chown) "
            "or run as a user who can read it"
        )
    return error(f"{path}: the {what} cannot be read ({err.strerror or err}); check the file and its directory")


def _check(path: str, st: os.stat_result, what: str, max_bytes: int | None, error: type[NeoxEpochError]) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(path, what, f"is {kind_of(st.st_mode)}", error)
    if max_bytes is not None and st.st_size > max_bytes:
        raise error(
            f"{path}: {st.st_size} bytes, more than a {what} can be ({max_bytes} bytes at most); "
            "check that the path names the right file"
        )


def check_input(
    path: str, what: str, max_bytes: int | None = None, error: type[NeoxEpochError] = ConfigError
) -> os.stat_result:
    """``path``'s stat when it is a regular file of at most ``max_bytes`` (symlinks followed); else ``error``."""
    try:
        st = os.stat(path)
    except OSError as err:
        raise _os_error(path, what, err, error) from None
    _check(path, st, what, max_bytes, error)
    return st


def open_input(
    path: str,
    what: str,
    max_bytes: int | None = None,
    error: type[NeoxEpochError] = ConfigError,
    encoding: str | None = None,
) -> IO:
    """``path`` open for reading (binary, or text in ``encoding``) when it is a regular file of at most ``max_bytes``;
    ``error`` naming the file, what it is and the fix otherwise. A FIFO never blocks: it is opened non-blocking
    and refused."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise _os_error(path, what, err, error) from None
    try:
        _check(path, os.fstat(fd), what, max_bytes, error)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb") if encoding is None else os.fdopen(fd, encoding=encoding)
    except BaseException:
        os.close(fd)
        raise


def read_input_text(
    path: str, what: str, max_bytes: int = CONFIG_BYTES, error: type[NeoxEpochError] = ConfigError
) -> str:
    """The UTF-8 text of ``path`` (see :func:`open_input`); ``error`` on anything else, undecodable bytes included."""
    with open_input(path, what, max_bytes, error) as f:
        data = f.read()
    try:
        return str(data.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise error(
            f"{path}: is not UTF-8 text (byte 0x{data[err.start]:02x} at offset {err.start}); expected a "
            f"{what}: save it as UTF-8"
        ) from None


def file_states(paths: list[str]) -> dict[str, tuple[int, int, int, int] | None]:
    """Each path's (device, inode, size, mtime in ns), None when it cannot be stat'ed: :func:`changed_files`."""
    states: dict[str, tuple[int, int, int, int] | None] = {}
    for path in paths:
        try:
            st = os.stat(path)
            states[path] = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        except OSError:
            states[path] = None
    return states


def changed_files(before: dict[str, tuple[int, int, int, int] | None]) -> list[str]:
    """The paths of ``before`` (:func:`file_states`) that were replaced, resized, written or removed since."""
    now = file_states(list(before))
    return [path for path, state in before.items() if now[path] != state]
