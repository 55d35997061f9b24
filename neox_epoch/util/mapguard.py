"""Mapped reads that survive a file shrinking under them: :func:`guarded` (the compiled ``neox_epoch._mapguard``).

While a guard is on, a read of a mapped page past the file's new end reads zeros instead of ending the process with
SIGBUS, and is counted; the caller reports its files as changed while being read. Without the compiled module (no C
compiler at install time, or NEOX_EPOCH_NO_EXTENSIONS) :data:`AVAILABLE` is False and readers copy instead of
mapping (:mod:`neox_epoch.formats.npy`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType

from neox_epoch.util import extensions

_guard: ModuleType | None = extensions.load("_mapguard")  # None: not built, or NEOX_EPOCH_NO_EXTENSIONS

AVAILABLE = _guard is not None


@contextmanager
def guarded() -> Iterator[Callable[[], int]]:
    """The guard on for the block; yields a function giving the faults turned into zero pages so far (0 without the
    compiled module, whose readers do not map)."""
    if _guard is None:
        yield lambda: 0
        return
    _guard.guard(True)
    try:
        yield _guard.faults
    finally:
        _guard.guard(False)
