"""Read a run log: ``neox_epoch.jsonl`` (one JSON object per line) into launches.

Each launch of a run starts with a "plan" event (written when the data is built) and appends "resume"
(started from a checkpoint), "counters" (every log interval), "pass_start" and "final" events to the same
file. Any line that is not such an event is an error naming the file, the line number and what is wrong.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from neox_epoch.errors import NeoxEpochError
from neox_epoch.formats.runlog import JSONL_NAME, LOG_GAP, TORN_EVENT, read_jsonl
from neox_epoch.util.inputs import RUN_LOG_BYTES, open_input
from neox_epoch.util.schema import UNSTAMPED, read_stamp
from neox_epoch.util.values import is_whole

#: events the report reads; others (future writers) are skipped
EVENTS = ("plan", "counters", "pass_start", "stage_start", "resume", "final")


class RunLogError(NeoxEpochError):
    """A run log is missing, unreadable or holds a line the plugin could not have written."""


@dataclass(frozen=True)
class SourceState:
    """One source in a counters/resume/final event."""

    samples: int
    """Samples drawn from the source so far (exact)."""
    passes: float
    """``samples / samples_per_epoch`` as the writer rounded it (6 digits)."""
    pass_number: int
    """The pass in progress (1-based)."""
    planned_passes: float | None = None
    """Only in "final": the passes planned."""


@dataclass(frozen=True)
class Snapshot:
    """A counters, resume or final event."""

    line: int
    iteration: int
    sources: tuple[tuple[str, SourceState], ...]
    consumed_samples: int | None = None

    def get(self, name: str) -> SourceState | None:
        return dict(self.sources).get(name)


@dataclass(frozen=True)
class PlanSource:
    """One train source of a "plan" event."""

    name: str
    samples_per_epoch: int
    prefix: str | None = None
    dataset: str | None = None
    tokens: int | None = None
    epochs_built: int | None = None
    samples_built: int | None = None
    samples_drawn: int | None = None
    passes: float | None = None
    target_passes: float | None = None
    separate_epochs: bool | None = None


@dataclass(frozen=True)
class PassStart:
    line: int
    iteration: int
    source: str
    pass_number: int
    sample: int


@dataclass(frozen=True)
class Resume:
    line: int
    iteration: int
    state: Snapshot
    changed: tuple[tuple[str, Any, Any], ...] | None
    """``(key, old, new)`` from the event's "changed" object; None when the writer gave none."""
    consumed_samples: int | None
    train_iters: int | None = None
    """Where the launch ends when the resume moved it (megatron-core: another global batch), else None."""


@dataclass(frozen=True)
class Final:
    line: int
    iteration: int
    train_iters: int
    complete: bool
    state: Snapshot


@dataclass(frozen=True)
class Launch:
    """One launch: its plan and the events after it (up to the next plan)."""

    file: str
    line: int
    """Line of the "plan" event (1-based)."""
    iteration: int
    """The plan event's iteration (NeoX's iteration when the data was built)."""
    train_iters: int
    train_batch_size: int
    seq_length: int | None
    mode: str | None
    separate_epochs: bool | None
    weights: tuple[float, ...] | None
    sources: tuple[PlanSource, ...]
    counters: tuple[Snapshot, ...]
    pass_starts: tuple[PassStart, ...]
    resume: Resume | None
    final: Final | None
    stages: dict[str, Any] | None = None
    """A staged run: the plan record's ``stages`` (the keys of ``plan --json``), else None."""
    stage_starts: tuple[tuple[int, int, str], ...] = ()
    """A staged run: (iteration, stage number, name) of each ``stage_start`` record of this launch."""
    stamp: tuple[int, str | None] = (UNSTAMPED, None)
    """(schema, neox-epoch version) of the plan record (neox_epoch.util.schema); UNSTAMPED: an older writer's."""

    def source(self, name: str) -> PlanSource | None:
        return next((s for s in self.sources if s.name == name), None)


@dataclass(frozen=True)
class Missing:
    """Where the log lacks records: a ``log_gap`` record of the sink (the log could not be written for a while) or
    a torn line (a record cut short by a crash)."""

    file: str
    line: int
    launch: int
    """1-based launch whose records precede it (1 when it comes before the first plan)."""
    kind: str
    """``log_gap`` or ``torn_line``."""
    records: int
    """Records missing here (a torn line: 1; a gap: those dropped from the full queue)."""
    events: tuple[tuple[str, int, int | None, int | None], ...] = ()
    """(event, records, first iteration, last iteration) of the missing records, when known."""
    lost: int = 0
    """A gap: records written earlier into a file that was removed or replaced (not in this file)."""
    error: str = ""
    seconds: float | None = None
    """A gap: how long the log could not be written."""

    def label(self) -> str:
        where = f"{os.path.basename(self.file)}:{self.line}"
        what = "; ".join(f"{n} {e} record{'s' if n != 1 else ''}" + _iterations(a, b) for e, n, a, b in self.events)
        if self.kind == TORN_EVENT:
            return f"{where}: a record cut short by a crash or a full disk ({what or 'event unknown'})"
        parts = []
        if self.records:
            parts.append(f"{self.records} records missing ({what})")
        if self.lost:
            parts.append(
                f"the {self.lost} records written before it are not in this file (it was removed or "
                "replaced during the run)"
            )
        if not parts:
            parts.append("no record missing (written late)")
        took = "" if self.seconds is None else f" for {self.seconds:.0f} s"
        return f"{where}: {'; '.join(parts)}; the log could not be written{took} ({self.error}); training went on"


def _iterations(first: int | None, last: int | None) -> str:
    if first is None:
        return ""
    return f" at iteration {first}" if first == last else f" at iterations {first}..{last}"


@dataclass(frozen=True)
class RunLog:
    files: tuple[str, ...]
    launches: tuple[Launch, ...]
    missing: tuple[Missing, ...] = ()
    """Where records are missing (log_gap records, torn lines), in file order."""


# ---------------------------------------------------------------------------------------------------------


def find_logs(path: str) -> list[str]:
    """The JSONL files of ``path``: the file itself, ``path/neox_epoch.jsonl``, or (a directory of launch
    directories) every ``neox_epoch.jsonl`` under it, ordered by the time of their first line."""
    if os.path.isfile(path):
        return [path]
    if not os.path.exists(path):
        raise RunLogError(
            f"{path}: no such file or directory; give the run's log_dir (the neox_epoch block's "
            f"log_dir, holding {JSONL_NAME}) or the .jsonl file"
        )
    direct = os.path.join(path, JSONL_NAME)
    if os.path.lexists(direct):  # (read_jsonl refuses a directory, pipe or device by that name)
        return [direct]
    found = sorted(os.path.join(root, JSONL_NAME) for root, _, files in os.walk(path) if JSONL_NAME in files)
    if not found:
        raise RunLogError(
            f"{path}: no {JSONL_NAME} in this directory or below it; the plugin writes it into the "
            'neox_epoch block\'s log_dir (set "log_dir" in the block) - give that directory'
        )
    return sorted(found, key=lambda f: (_first_time(f), f))


def _first_time(path: str) -> float:
    try:
        with open_input(path, "run log (JSONL)", RUN_LOG_BYTES, RunLogError, encoding="utf-8") as f:
            for raw in f:
                if raw.strip():
                    t = json.loads(raw).get("time")
                    return float(t) if isinstance(t, (int, float)) else 0.0
    except (OSError, ValueError, AttributeError, RunLogError):
        pass  # read_log names the problem
    return 0.0


def read_run(path: str) -> RunLog:
    """Every launch in the run log(s) at ``path``."""
    files = find_logs(path)
    launches: list[Launch] = []
    missing: list[Missing] = []
    for f in files:
        found: list[Missing] = []
        more = read_log(f, found)
        missing += [Missing(**{**m.__dict__, "launch": m.launch + len(launches)}) for m in found]
        launches.extend(more)
    return RunLog(tuple(files), tuple(launches), tuple(missing))


def read_log(path: str, missing: list[Missing] | None = None) -> list[Launch]:
    """The launches of one JSONL file; where records are missing is added to ``missing``."""
    builders: list[_Builder] = []
    for number, obj in read_jsonl(path, RunLogError):
        where = f"{path}:{number}"
        if not isinstance(obj, dict) or not isinstance(obj.get("event"), str):
            raise RunLogError(f'{where}: expected a JSON object with an "event" name, found {_short(obj)}')
        event = obj["event"]
        if event in (LOG_GAP, TORN_EVENT):
            if missing is not None:
                missing.append(_missing(obj, path, number, max(1, len(builders))))
            continue
        if event not in EVENTS:
            continue
        if event == "plan":
            builders.append(_Builder(path, number, _plan(obj, where)))
            continue
        if not builders:
            raise RunLogError(
                f'{where}: a "{event}" event before any "plan" event; each launch writes its plan '
                "first: is this the start of the file, or were lines removed?"
            )
        builders[-1].add(event, obj, number, where)
    if not builders:
        raise RunLogError(
            f'{path}: no "plan" event; the plugin writes one when NeoX builds the data (a file '
            "without it is not a run log of neox-epoch, or the run stopped before building its data)"
        )
    return [b.build() for b in builders]


# ---------------------------------------------------------------------------------------------------------
# field readers: each names the line and the field


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _int(obj: Mapping[str, Any], key: str, where: str, optional: bool = False) -> Any:
    v = obj.get(key)
    if v is None and optional:
        return None
    if not is_whole(v, 0):
        raise RunLogError(f'{where}: "{key}": expected an integer >= 0, found {_short(v)}')
    return v


def _num(obj: Mapping[str, Any], key: str, where: str, optional: bool = False) -> Any:
    v = obj.get(key)
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise RunLogError(f'{where}: "{key}": expected a number, found {_short(v)}')
    return float(v)


def _map(obj: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    v = obj.get(key)
    if not isinstance(v, dict):
        raise RunLogError(f'{where}: "{key}": expected an object, found {_short(v)}')
    return v


def _plan(obj: Mapping[str, Any], where: str) -> dict[str, Any]:
    raw = obj.get("sources")
    if not isinstance(raw, list) or not raw:
        raise RunLogError(
            f'{where}: plan: "sources": expected a non-empty list of the train sources, found {_short(raw)}'
        )
    sources = []
    for k, s in enumerate(raw):
        at = f"{where}: plan: sources[{k}]"
        if not isinstance(s, dict) or not isinstance(s.get("name"), str):
            raise RunLogError(f'{at}: expected an object with a "name", found {_short(s)}')
        spe = _int(s, "samples_per_epoch", at)
        sources.append(
            PlanSource(
                name=s["name"],
                samples_per_epoch=spe,
                prefix=s.get("prefix"),
                dataset=s.get("dataset"),
                tokens=_int(s, "tokens", at, True),
                epochs_built=_int(s, "epochs_built", at, True),
                samples_built=_int(s, "samples_built", at, True),
                samples_drawn=_int(s, "samples_drawn", at, True),
                passes=_num(s, "passes", at, True),
                target_passes=_num(s, "target_passes", at, True),
                separate_epochs=bool(s["separate_epochs"]) if "separate_epochs" in s else None,
            )
        )
    settings = obj.get("settings") if isinstance(obj.get("settings"), dict) else {}
    w = settings.get("weights") if settings else None
    weights = tuple(float(x) for x in w) if isinstance(w, list) and w else None
    tbs = _int(obj, "train_batch_size", f"{where}: plan")
    if tbs == 0:
        raise RunLogError(f'{where}: plan: "train_batch_size": 0; expected samples per iteration > 0')
    return {
        "iteration": _int(obj, "iteration", f"{where}: plan", True) or 0,
        "train_iters": _int(obj, "train_iters", f"{where}: plan"),
        "train_batch_size": tbs,
        "seq_length": _int(obj, "seq_length", f"{where}: plan", True),
        "mode": obj.get("mode"),
        "separate_epochs": obj.get("separate_epochs"),
        "weights": weights,
        "sources": tuple(sources),
        "stages": obj["stages"] if isinstance(obj.get("stages"), dict) else None,
        "stamp": read_stamp(obj, f"{where}: plan", RunLogError),
    }


def _snapshot(obj: Mapping[str, Any], number: int, where: str, names: set[str], final: bool = False) -> Snapshot:
    event = obj["event"]
    raw = _map(obj, "sources", f"{where}: {event}")
    out = []
    for name, v in raw.items():
        at = f"{where}: {event}: sources.{name}"
        if name not in names:
            raise RunLogError(
                f"{at}: not a train source of this launch's plan ({sorted(names)}); the lines of "
                "two runs mixed in one file?"
            )
        if not isinstance(v, dict):
            raise RunLogError(f'{at}: expected {{"samples", "passes", "pass"}}, found {_short(v)}')
        planned = _num(v, "planned_passes", at, True) if final else None
        out.append((name, SourceState(_int(v, "samples", at), _num(v, "passes", at), _int(v, "pass", at), planned)))
    return Snapshot(
        number,
        _int(obj, "iteration", f"{where}: {event}"),
        tuple(out),
        _int(obj, "consumed_samples", f"{where}: {event}", True),
    )


def _missing(obj: Mapping[str, Any], path: str, number: int, launch: int) -> Missing:
    """A log_gap record or a torn line (its event and iteration read from its start when they are there)."""
    if obj["event"] == TORN_EVENT:
        text = str(obj.get("text", ""))
        ev, it = re.search(r'"event": "(\w+)"', text), re.search(r'"iteration": (\d+)[,}]', text)
        at = int(it.group(1)) if ev and it else None
        torn: tuple[tuple[str, int, int | None, int | None], ...] = ((ev.group(1), 1, at, at),) if ev else ()
        return Missing(path, number, launch, TORN_EVENT, 1, torn)
    raw = obj.get("missing_events")
    events = []
    for name, v in raw.items() if isinstance(raw, dict) else ():
        its = v.get("iterations") if isinstance(v, dict) else None
        first, last = (its + [None, None])[:2] if isinstance(its, list) else (None, None)
        events.append(
            (
                str(name),
                _int(v, "records", f"{path}:{number}: {LOG_GAP}: {name}"),
                first if is_whole(first, 0) else None,
                last if is_whole(last, 0) else None,
            )
        )
    since, until, seconds = obj.get("since"), obj.get("until"), None
    if isinstance(since, (int, float)) and isinstance(until, (int, float)):
        seconds = float(until) - float(since)
    return Missing(
        path,
        number,
        launch,
        LOG_GAP,
        _int(obj, "missing", f"{path}:{number}: {LOG_GAP}", True) or 0,
        tuple(events),
        _int(obj, "lost", f"{path}:{number}: {LOG_GAP}", True) or 0,
        str(obj.get("error", "")),
        seconds,
    )


class _Builder:
    """Collects one launch's events."""

    def __init__(self, path: str, line: int, plan: dict[str, Any]) -> None:
        self.path, self.line, self.plan = path, line, plan
        self.names = {s.name for s in plan["sources"]}
        self.counters: list[Snapshot] = []
        self.pass_starts: list[PassStart] = []
        self.resume: Resume | None = None
        self.final: Final | None = None
        self.stage_starts: list[tuple[int, int, str]] = []

    def add(self, event: str, obj: Mapping[str, Any], number: int, where: str) -> None:
        if self.final is not None:
            raise RunLogError(
                f'{where}: a "{event}" event after this launch\'s "final" (line {self.final.line}) '
                'and no new "plan" between them; lines of two runs mixed in one file?'
            )
        if event == "counters":
            self.counters.append(_snapshot(obj, number, where, self.names))
        elif event == "stage_start":
            at = f"{where}: stage_start"
            self.stage_starts.append((_int(obj, "iteration", at), _int(obj, "stage", at), str(obj.get("name", ""))))
        elif event == "pass_start":
            at = f"{where}: pass_start"
            src = obj.get("source")
            if src not in self.names:
                raise RunLogError(
                    f'{at}: "source": {_short(src)} is not a train source of this launch\'s plan ({sorted(self.names)})'
                )
            self.pass_starts.append(
                PassStart(number, _int(obj, "iteration", at), str(src), _int(obj, "pass", at), _int(obj, "sample", at))
            )
        elif event == "resume":
            if self.resume is not None or self.counters:
                raise RunLogError(
                    f'{where}: a second "resume" or one after counters in the same launch (plan at '
                    f"line {self.line}); each launch resumes once, before training"
                )
            changed = obj.get("changed")
            pairs = None
            if changed is not None:
                if not isinstance(changed, dict) or not all(
                    isinstance(v, list) and len(v) == 2 for v in changed.values()
                ):
                    raise RunLogError(
                        f'{where}: resume: "changed": expected {{key: [old, new]}}, found {_short(changed)}'
                    )
                pairs = tuple((str(k), v[0], v[1]) for k, v in changed.items())
            snap = _snapshot(obj, number, where, self.names)
            self.resume = Resume(
                number,
                snap.iteration,
                snap,
                pairs,
                _int(obj, "consumed_samples", f"{where}: resume", True),
                _int(obj, "train_iters", f"{where}: resume", True),
            )
        elif event == "final":
            snap = _snapshot(obj, number, where, self.names, final=True)
            complete = obj.get("complete")
            if not isinstance(complete, bool):
                raise RunLogError(f'{where}: final: "complete": expected true or false, found {_short(complete)}')
            self.final = Final(number, snap.iteration, _int(obj, "train_iters", f"{where}: final"), complete, snap)

    def build(self) -> Launch:
        p, r = self.plan, self.resume
        batch = dict((key, new) for key, _, new in (r.changed or ())).get("train_batch_size") if r else None
        iters = r.train_iters if r is not None and r.train_iters is not None else p["train_iters"]
        return Launch(
            self.path,
            self.line,
            p["iteration"],
            iters,
            batch or p["train_batch_size"],
            p["seq_length"],
            p["mode"],
            p["separate_epochs"],
            p["weights"],
            p["sources"],
            tuple(self.counters),
            tuple(self.pass_starts),
            self.resume,
            self.final,
            p.get("stages"),
            tuple(self.stage_starts),
            p["stamp"],
        )
