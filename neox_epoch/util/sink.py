"""An append-only JSON-lines sink that never stops the program writing it (the hooks' run log).

Training must go on when its log cannot be written (disk full, read-only, the directory removed): a failed write
is logged once per process and file, naming the file, the error and that training goes on; the records wait in a
bounded queue in memory and are written, in order, as soon as a write succeeds again. Past the bound the oldest
records that are not headers are dropped and a ``log_gap`` record, written where they were, says how many of which
event and which iterations are missing. Every outage leaves a ``log_gap`` record (``missing`` 0 when nothing was
lost: the records were only written late). A file replaced or removed under the sink (its inode changed, or it
shrank) gets the header records again (``plan``, ``resume``: what a reader needs to read what follows, each with
the ``version`` and ``schema`` of :mod:`neox_epoch.util.schema`) and a
``log_gap`` saying how many records the earlier file held.

Each record is one ``write`` of its complete line; a short write (the disk filled within it) is cut back to the
line's start, and a file left ending inside a line (a crash of an older writer) gets a newline first, so a torn
line never runs into the next record (readers skip a torn line and report it: :func:`neox_epoch.formats.runlog.
read_jsonl`).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from neox_epoch.util.schema import stamp

log = logging.getLogger("neox_epoch.sink")

#: records kept in memory while the file cannot be written (about 1 kB each for a few sources); the environment
#: variable sets another bound for a run
MAX_PENDING = 4096
QUEUE_VAR = "NEOX_EPOCH_LOG_QUEUE"
#: events a reader needs first: kept when the queue is full, and written again into a file that was replaced
HEADER_EVENTS = ("plan", "resume")
#: the record that says what is missing
GAP_EVENT = "log_gap"

_reported: set[tuple[str, str]] = set()
"""(what, path) pairs already reported by this process: a failure is logged once per process and file."""


@dataclass
class _Line:
    data: bytes
    event: str | None
    iteration: int | None


@dataclass
class _Gap:
    """Where records are missing (dropped from the full queue, or lost with a replaced file)."""

    since: float
    error: str
    until: float | None = None
    missing: dict[str, list[int | None]] = field(default_factory=dict)
    """event -> [records, first iteration, last iteration]"""
    lost: int = 0
    """Records written earlier into a file that is no longer at the path (removed or replaced)."""

    def drop(self, line: _Line) -> None:
        entry = self.missing.setdefault(str(line.event), [0, None, None])
        entry[0] = int(entry[0] or 0) + 1
        if line.iteration is not None:
            entry[1] = line.iteration if entry[1] is None else min(int(entry[1]), line.iteration)
            entry[2] = line.iteration if entry[2] is None else max(int(entry[2]), line.iteration)

    def record(self, path: str) -> dict[str, Any]:
        return {
            "event": GAP_EVENT,
            "file": path,
            "error": self.error,
            "since": round(self.since, 3),
            "until": round(self.until or time.time(), 3),
            "missing": sum(int(v[0] or 0) for v in self.missing.values()),
            "missing_events": {k: {"records": v[0], "iterations": [v[1], v[2]]} for k, v in self.missing.items()},
            "lost": self.lost,
        }


class LineSink:
    """Appends one JSON object per line to ``path`` (None: writes nothing); never raises for an OSError."""

    def __init__(
        self, path: str | None, *, max_pending: int | None = None, header_events: tuple[str, ...] = HEADER_EVENTS
    ) -> None:
        self.path = path
        self.max_pending = max(1, int(max_pending or _queue_bound()))
        self.header_events = header_events
        self.pending: deque[_Line | _Gap] = deque()
        self.headers: list[_Line] = []
        self.written = 0
        """Records this sink wrote into the file now at ``path``."""
        self.dropped = 0
        """Records dropped from the full queue (each counted in a ``log_gap`` record)."""
        self.error: str | None = None
        """The error of the write that failed last, while the log cannot be written (None: writing works)."""
        self._identity: tuple[int, int, int] | None = None  # (device, inode, size after our last write)

    def write(self, record: dict[str, Any]) -> bool:
        """Queue ``record`` (with ``"time"`` first) and write what is queued; True when all of it is in the file."""
        if self.path is None:
            return True
        if record.get("event") in self.header_events:  # what a reader meets first says who wrote the log
            record = {**record, **stamp()}
        data = (json.dumps({"time": round(time.time(), 3), **record}, sort_keys=False) + "\n").encode("utf-8")
        iteration = record.get("iteration")
        line = _Line(data, record.get("event"), int(iteration) if isinstance(iteration, int) else None)
        self.pending.append(line)
        if line.event in self.header_events:
            self.headers.append(line)
        self._bound()
        return self.flush()

    def flush(self) -> bool:
        """Write what is queued; True when nothing waits."""
        if self.path is None or not self.pending:
            return True
        try:
            self._append(self.path)
        except OSError as err:
            self._failed(self.path, err)
            return False
        if self.error is not None:
            self.error = None
            log.info(
                "neox_epoch: the run log %s can be written again; the records kept meanwhile are written (a %s "
                "record says what is missing, if anything)",
                self.path,
                GAP_EVENT,
            )
        return True

    def close(self) -> None:
        """A last try; records that still cannot be written are lost with the process: say which."""
        if self.flush() or self.path is None:
            return
        lines = [e for e in self.pending if isinstance(e, _Line)]
        gap = _Gap(time.time(), self.error or "")
        for line in lines:
            gap.drop(line)
        log.warning(
            "neox_epoch: the run log %s still cannot be written (%s): %d records are lost with this process "
            "(%s); training itself was not affected",
            self.path,
            self.error,
            len(lines),
            json.dumps(gap.record(self.path)["missing_events"]),
        )

    # ------------------------------------------------------------------------------------------------------
    def _append(self, path: str) -> None:
        folder = os.path.dirname(path)
        if folder:
            os.makedirs(folder, exist_ok=True)  # made again when it was removed mid-run
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
        try:
            st = os.fstat(fd)
            regular = stat.S_ISREG(st.st_mode)
            size = st.st_size if regular else 0
            if (
                self._identity is not None
                and regular
                and ((st.st_dev, st.st_ino) != self._identity[:2] or size < self._identity[2])
            ):
                self._replaced(path)
            lead = b"\n" if regular and size and os.pread(fd, 1, size - 1) != b"\n" else b""
            while self.pending:
                entry = self.pending[0]
                if isinstance(entry, _Gap):
                    entry.until = time.time()
                data = entry.data if isinstance(entry, _Line) else _line(entry.record(path))
                size = _write_whole(fd, lead + data, size, regular)
                lead = b""
                self.pending.popleft()
                self.written += 1
            self._identity = (st.st_dev, st.st_ino, size)
        finally:
            os.close(fd)

    def _replaced(self, path: str) -> None:
        """The file at ``path`` is not the one written (removed, replaced or cut): the headers again, then a gap."""
        gap = _Gap(
            time.time(),
            f"{path} was removed or replaced after {self.written} records were written to it",
            lost=self.written,
        )
        _report_once(
            "replaced",
            path,
            "neox_epoch: the run log %s was removed or replaced during the run (%d records "
            "written to it are not in it); writing goes on into the new file, with the plan again and a %s "
            "record",
            path,
            self.written,
            GAP_EVENT,
        )
        queued = {id(e) for e in self.pending}
        self.pending.extendleft(reversed([*[h for h in self.headers if id(h) not in queued], gap]))
        self.written = 0
        self._identity = None

    def _failed(self, path: str, err: OSError) -> None:
        text = f"{err.strerror or err}" + (f" [errno {err.errno}]" if err.errno else "")
        if self.error is None and not isinstance(self.pending[0], _Gap):
            self.pending.appendleft(_Gap(time.time(), text))
        self.error = text
        _report_once(
            "failed",
            path,
            "neox_epoch: cannot write the run log %s: %s; training goes on: the counters keep "
            "counting, up to %d records wait in memory and are written when the file can be written again "
            "(past that a %s record says which are missing)",
            path,
            text,
            self.max_pending,
            GAP_EVENT,
        )

    def _bound(self) -> None:
        """Past ``max_pending`` records, drop the oldest that is not a header into the gap where it was."""
        lines = sum(1 for e in self.pending if isinstance(e, _Line))
        while lines > self.max_pending:
            entries = list(self.pending)
            k = next(
                (i for i, e in enumerate(entries) if isinstance(e, _Line) and e.event not in self.header_events),
                next(i for i, e in enumerate(entries) if isinstance(e, _Line)),
            )
            line = entries[k]
            assert isinstance(line, _Line)
            before = entries[k - 1] if k else None
            after = entries[k + 1] if k + 1 < len(entries) else None
            gap = before if isinstance(before, _Gap) else after if isinstance(after, _Gap) else None
            if gap is None:
                gap = _Gap(time.time(), self.error or "")
                entries.insert(k + 1, gap)
            gap.drop(line)
            del entries[k]
            self.pending = deque(entries)
            self.dropped += 1
            lines -= 1


def _queue_bound() -> int:
    """``$NEOX_EPOCH_LOG_QUEUE`` (records kept in memory while the log cannot be written), else MAX_PENDING."""
    raw = os.environ.get(QUEUE_VAR, "")
    return int(raw) if raw.strip().isdigit() and int(raw) > 0 else MAX_PENDING


def _line(record: dict[str, Any]) -> bytes:
    return (json.dumps({"time": round(time.time(), 3), **record}, sort_keys=False) + "\n").encode("utf-8")


def _write_whole(fd: int, data: bytes, size: int, regular: bool) -> int:
    """One write of ``data`` at the end of the file of ``size`` bytes; a short write is cut back (no half line).
    Returns the size after it."""
    written = os.write(fd, data)
    if written == len(data):
        return size + written
    if regular:
        try:
            os.ftruncate(fd, size)
        except OSError:  # pragma: no cover - the line's start is kept as it is; readers skip a torn line
            pass
    raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (a short write: {written} of {len(data)} bytes)")


def _report_once(what: str, path: str, message: str, *args: Any) -> None:
    if (what, path) in _reported:
        return
    _reported.add((what, path))
    log.warning(message, *args)


def guarded(write: Callable[..., None], what: str) -> Callable[..., None]:
    """``write`` (a TensorBoard/W&B scalar writer) that logs its first failure (any exception: those writers
    raise their own kinds) once and goes on: a metrics writer never stops training."""

    def call(*args: Any, **kwargs: Any) -> None:
        try:
            write(*args, **kwargs)
        except Exception as err:  # noqa: BLE001 - the metrics writer's failure must not stop training
            _report_once(
                "scalars",
                what,
                "neox_epoch: cannot write the %s scalars (%s: %s); training goes on, the "
                "counters keep counting and the run log (neox_epoch.jsonl) has the same numbers",
                what,
                type(err).__name__,
                err,
            )

    return call
