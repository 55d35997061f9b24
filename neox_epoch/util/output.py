"""The one output policy: which paths a command may write, and how it writes them.

Every file neox-epoch writes (``plan --write-config``, ``check-batch --fix``, ``audit --manifest``/``--plot``,
``report --html``, the demo corpus, the hooks' resume state and index caches, launch's config copies) goes
through :func:`write_output`. Refused, in one line (:class:`~neox_epoch.errors.OutputError`, exit 2), before
anything is written:

- an input of the command: the same file (device and inode) as a file it reads, through symlinks, ``./`` and
  hard links; for an input directory (a run log directory, a cache directory) the files in it count;
- a name with a data or index suffix (:data:`DATA_SUFFIXES`: tokenized data, index caches, checkpoints, run logs)
  unless that is the writer's own kind of output;
- anything but a regular file or nothing: a directory, a device node, a FIFO, a socket (symlinks are followed
  to what would be replaced: the file a symlink names is written, the link stays).

The write itself is atomic (:mod:`neox_epoch.util.atomic`: the old content or the complete new one, even after
``kill -9``; no temporary file left); a new file gets the umask's mode, an existing file keeps its mode; disk
full, read-only and permission errors are one line naming the option, the file and the fix.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import IO

from neox_epoch.errors import OutputError
from neox_epoch.util.atomic import WriteFailed, write_atomic

#: suffix -> what such a file is: never written over or named so, unless it is the writer's own output kind
DATA_SUFFIXES = {
    ".bin": "tokenized data",
    ".idx": "a tokenized dataset's index",
    ".npy": "an index cache",
    ".pt": "a checkpoint",
    ".pth": "a checkpoint",
    ".safetensors": "a checkpoint",
    ".jsonl": "a run log",
}
#: how deep an input directory's files count as inputs (a run log directory holds launch directories)
_INPUT_DEPTH = 3
_KIND = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


@dataclass(frozen=True)
class Output:
    """One file a command writes: ``path`` as the user gave it, the ``option`` that named it (``--html``), a file
    name to suggest instead (``example``) and the data suffixes that are this writer's own output (``own``)."""

    path: str
    option: str
    example: str = "out.txt"
    own: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return f'{self.option} "{self.path}"'

    def elsewhere(self) -> str:
        """``dir/example``: a path beside this one to suggest (never this one)."""
        name = self.example
        if name == os.path.basename(self.path):
            stem, ext = os.path.splitext(name)
            name = f"{stem}_new{ext}"
        return os.path.join(os.path.dirname(self.path), name)


Input = str | tuple[str, str]


def _input_ids(inputs: Iterable[Input]) -> dict[tuple[int, int], str]:
    """(device, inode) of each input file and of the files in each input directory -> how to name it."""
    ids: dict[tuple[int, int], str] = {}
    for item in inputs:
        path, what = (item, "an input of this command") if isinstance(item, str) else item
        if not path:
            continue
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            continue
        ids.setdefault((st.st_dev, st.st_ino), f"{what} {path}")
        if stat.S_ISDIR(st.st_mode):
            _directory_ids(path, f"read from {what} {path}", ids, _INPUT_DEPTH)
    return ids


def _directory_ids(directory: str, what: str, ids: dict[tuple[int, int], str], depth: int) -> None:
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        try:
            st = entry.stat()
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            ids.setdefault((st.st_dev, st.st_ino), f"the file {entry.path} {what}")
        elif stat.S_ISDIR(st.st_mode) and depth > 1:
            _directory_ids(entry.path, what, ids, depth - 1)


def _kind(mode: int) -> str | None:
    return next((name for test, name in _KIND if test(mode)), None)


def target(out: Output) -> str:
    """The file a write of ``out`` replaces: its path with every symlink followed."""
    return os.path.realpath(out.path)


def check_output(out: Output, inputs: Iterable[Input] = (), *, existing_dir: bool = False) -> str:
    """Raise :class:`OutputError` when ``out`` may not be written (see the module docstring); return the path
    that will be written (symlinks followed). ``existing_dir``: refuse a directory that does not exist (else
    it is created)."""
    final = target(out)
    for name in {out.path, final}:
        suffix = os.path.splitext(name)[1].lower()
        if suffix in DATA_SUFFIXES and suffix not in out.own:
            raise OutputError(
                f"{out.label}: a {suffix} file is {DATA_SUFFIXES[suffix]}, which neox-epoch never "
                f"writes over or names so; write to another file, e.g. {out.elsewhere()}"
            )
    try:
        st: os.stat_result | None = os.stat(final)
    except FileNotFoundError:
        st = None
    except OSError as err:
        raise OutputError(
            f"{out.label}: cannot be checked ({err.strerror}); write to another path, e.g. {out.elsewhere()}"
        ) from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise OutputError(
            f"{out.label} is a directory; expected a file path, e.g. {os.path.join(out.path, out.example)}"
        )
    if st is not None:
        found = _input_ids(inputs).get((st.st_dev, st.st_ino))
        if found is not None:
            raise OutputError(
                f"{out.label} is {found}; writing it would overwrite that file; expected a new "
                f"path: write to another file, e.g. {out.elsewhere()}"
            )
        kind = _kind(st.st_mode)
        if kind is not None or not stat.S_ISREG(st.st_mode):
            raise OutputError(
                f"{out.label}{' (' + final + ')' if final != os.path.abspath(out.path) else ''} is "
                f"{kind or 'not a regular file'}; neox-epoch only writes regular files and never "
                f"replaces special files: write to a regular file, e.g. {out.elsewhere()}"
            )
    if existing_dir and not os.path.isdir(os.path.dirname(final)):
        raise OutputError(
            f"{out.label}: its directory {os.path.dirname(out.path) or os.path.dirname(final)} does "
            "not exist; create it first or write to an existing directory"
        )
    return final


_FIX = {
    errno.ENOSPC: "free space on its filesystem or write elsewhere",
    errno.EDQUOT: "free space within the quota or write elsewhere",
    errno.EROFS: "the filesystem is mounted read-only: write to a writable one",
    errno.EACCES: "write to a directory you may write to, or fix its permissions",
    errno.EPERM: "write to a directory you may write to, or fix its permissions",
    errno.ENOTDIR: "a part of the path is a file, not a directory: fix the path",
    errno.ENAMETOOLONG: "use a shorter name",
}


def failed(out: Output, err: OSError) -> OutputError:
    """The one-line error for an OS error while writing ``out``."""
    fix = _FIX.get(err.errno or 0, f"write to another path, e.g. {out.elsewhere()}")
    return OutputError(f"{out.label}: cannot be written ({err.strerror or err}); {fix}")


def write_output(
    out: Output, write: Callable[[IO[bytes]], object], inputs: Iterable[Input] = (), *, existing_dir: bool = False
) -> None:
    """Check ``out`` (:func:`check_output`), then call ``write(f)`` on its atomic temporary file and rename it."""
    final = check_output(out, inputs, existing_dir=existing_dir)
    try:
        write_atomic(final, write)
    except WriteFailed as err:
        raise failed(out, err) from None


def write_output_text(out: Output, text: str, inputs: Iterable[Input] = (), *, existing_dir: bool = False) -> None:
    """:func:`write_output` of ``text`` (UTF-8)."""
    data = text.encode("utf-8")
    write_output(out, lambda f: f.write(data), inputs, existing_dir=existing_dir)
