"""Atomic file writes: the new content appears under its name complete, or not at all.

The content goes to an unnamed file in the target's directory (Linux ``O_TMPFILE``), which is given a name
(``linkat``) only once it is complete and synced, and renamed over the target right away: a writer killed
at any moment (even ``kill -9``) leaves either the old file or the new one, and nothing else but, in the
microseconds between the link and the rename, a temporary name that carries the writer's pid and host.
Every write first removes such names whose writer is gone. Where ``O_TMPFILE`` is not supported (some
network filesystems) the temporary file is named from the start, with the same self-healing name.

A new file gets the mode a file created normally gets (``0o666`` less the umask); an existing file keeps
its mode (and, when allowed, its owner). Failures of the output itself (the temporary file, its writes,
the sync, the rename) raise :class:`WriteFailed`, an ``OSError``; any other exception of the ``write``
callback passes through unchanged. The policy on top (which paths may be written, the messages):
:mod:`neox_epoch.util.output`.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import socket
import stat
import threading
from collections.abc import Callable, Iterator
from typing import IO, Any

_HOST = hashlib.sha1(socket.gethostname().encode("utf-8", "replace")).hexdigest()[:8]
#: the temporary names: ``.NAME.neox-epoch-PID-HOST.tmp``
_TEMP = re.compile(r"^\.(?P<name>.+)\.neox-epoch-(?P<pid>\d+)-(?P<host>[0-9a-f]{8})\.tmp$")
_UMASK_LOCK = threading.Lock()
#: errors of os.open(O_TMPFILE) that mean "not supported here": fall back to a named temporary file
_NO_TMPFILE = {errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOTSUP}


class WriteFailed(OSError):
    """Writing the output itself failed (disk full, read-only, permissions, ...): ``errno`` and ``strerror`` of
    the underlying error."""


def current_umask() -> int:
    """The process's umask, read without changing it (``/proc/self/status``), else set and restored under a lock."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def temp_name(path: str, pid: int | None = None) -> str:
    """The temporary name beside ``path`` this process uses while renaming onto it (a long name is cut: the
    temporary name stays within the 255 bytes a file name may have)."""
    directory, base = os.path.split(path)
    return os.path.join(directory, f".{base[:180]}.neox-epoch-{os.getpid() if pid is None else pid}-{_HOST}.tmp")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: another user's live process
        return True
    return True


def remove_stale_temps(directory: str) -> list[str]:
    """Remove the temporary files of writers on this host that are gone (killed between link and rename, or
    before a named temporary file was renamed); return their paths."""
    removed: list[str] = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        m = _TEMP.match(entry.name)
        if m is None or m["host"] != _HOST or _alive(int(m["pid"])):
            continue
        with contextlib.suppress(OSError):
            os.unlink(entry.path)
            removed.append(entry.path)
    return removed


class _Output:
    """The file object the ``write`` callback gets: a buffered binary file whose write errors are
    :class:`WriteFailed` (so that errors of the output are told from the callback's other errors)."""

    def __init__(self, f: IO[bytes]) -> None:
        self._f = f

    def write(self, data: Any) -> int:
        try:
            return self._f.write(data)
        except OSError as err:
            raise WriteFailed(err.errno, err.strerror) from err

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


@contextlib.contextmanager
def _failures() -> Iterator[None]:
    """OSErrors of the mechanics (not of the callback) become :class:`WriteFailed`."""
    try:
        yield
    except WriteFailed:
        raise
    except OSError as err:
        raise WriteFailed(err.errno, err.strerror, err.filename) from err


def _open_temp(directory: str, named: str) -> tuple[int, bool]:
    """(fd, whether the file is unnamed): an ``O_TMPFILE`` file in ``directory``, else ``named`` created."""
    flag = getattr(os, "O_TMPFILE", 0)
    if flag and os.path.isdir("/proc/self/fd"):
        try:
            return os.open(directory, flag | os.O_WRONLY | getattr(os, "O_CLOEXEC", 0), 0o600), True
        except OSError as err:
            if err.errno not in _NO_TMPFILE:
                raise
    with contextlib.suppress(FileNotFoundError):
        os.unlink(named)  # our own pid's name: a leftover of an earlier process with this pid
    return os.open(named, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600), False


def _link(fd: int, named: str) -> None:
    """Give the unnamed file ``fd`` the name ``named`` (linkat with AT_SYMLINK_FOLLOW on /proc/self/fd: Python
    calls plain link(), which does not follow the magic link, unless a directory fd is given)."""
    dfd = os.open(os.path.dirname(named) or ".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.link(f"/proc/self/fd/{fd}", os.path.basename(named), dst_dir_fd=dfd, follow_symlinks=True)
    finally:
        os.close(dfd)


def _keep_owner(fd: int, old: os.stat_result | None) -> None:
    if old is not None and hasattr(os, "fchown"):
        with contextlib.suppress(OSError):  # allowed for root (or the same owner and one of its groups) only
            os.fchown(fd, old.st_uid, old.st_gid)


def write_atomic(path: str, write: Callable[[IO[bytes]], object], mode: int | None = None) -> None:
    """Call ``write(f)`` on a temporary file in ``path``'s directory and rename it to ``path``.

    ``mode``: the new file's permission bits; default: an existing ``path``'s, else ``0o666`` less the umask.
    """
    directory = os.path.dirname(os.path.abspath(path)) or "."
    with _failures():
        os.makedirs(directory, exist_ok=True)
    remove_stale_temps(directory)
    try:
        old: os.stat_result | None = os.stat(path)
    except OSError:
        old = None
    if mode is None:
        mode = stat.S_IMODE(old.st_mode) if old is not None else 0o666 & ~current_umask()
    named = temp_name(os.path.join(directory, os.path.basename(path)))
    with _failures():
        fd, unnamed = _open_temp(directory, named)
    linked = not unnamed
    try:
        f = os.fdopen(fd, "wb", closefd=False)
        try:
            write(_Output(f))  # type: ignore[arg-type]
            with _failures():
                f.flush()
        finally:
            with contextlib.suppress(OSError):  # after a failed write: the buffer's flush fails again
                f.close()
        with _failures():
            _keep_owner(fd, old)
            os.fchmod(fd, mode)
            os.fsync(fd)
            if unnamed:
                _link(fd, named)
                linked = True
            _still_regular(path)
            os.replace(named, path)
            linked = False
    finally:
        os.close(fd)
        if linked:
            with contextlib.suppress(OSError):
                os.unlink(named)
    _sync_directory(directory)


def _still_regular(path: str) -> None:
    """Refuse (at the last moment) to rename over a directory or special file that appeared at ``path``."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise WriteFailed(errno.EEXIST, "a directory or special file is there now, and neox-epoch never replaces one")


def _sync_directory(directory: str) -> None:
    """Make the rename durable (best effort: not every filesystem lets a directory be opened and synced)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_text_atomic(path: str, text: str, mode: int | None = None) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    write_atomic(path, lambda f: f.write(text.encode("utf-8")), mode)
