"""Live per-source pass counters, framework-neutral part: record shapes, scalar keys, sinks and writers.

GPT-NeoX (:mod:`neox_epoch.neox.counters`, driven by the hooks) and megatron-core
(:mod:`neox_epoch.mcore.counters`, driven by the user's training loop) count differently (NeoX replays its
greedy blend by iteration; megatron-core reads the built blend's ``dataset_index`` by consumed samples) but
write the same things, so one reader handles both:

JSONL, one object per line in ``<log_dir>/neox_epoch.jsonl`` (every record also has ``"time"``):

* ``{"event": "plan", "iteration", "train_iters", "train_batch_size", "sources": [...], ...}``
* ``{"event": "resume", "iteration", "sources": {name: {"samples", "passes", "pass"}}, ...}``
* ``{"event": "counters", "iteration", "consumed_samples", "sources": {name: {"samples", "passes", "pass"}}}``
* ``{"event": "pass_start", "iteration", "source", "pass", "sample"}`` (``sample``: the blend position of
  the source's first sample of that pass)
* ``{"event": "final", "iteration", "train_iters", "complete", "sources": {name: {..., "planned_passes"}}}``
* ``{"event": "checkpoint", "iteration", "tag", "state": {...}}`` (GPT-NeoX: the data position the hooks saved
  into the checkpoint, ``neox_epoch_state.json``; ``neox-epoch resume-check`` reads it from the log)
* ``{"event": "checkpoint", "iteration", "counters": {...}}`` (megatron-core: what ``LiveCounters.state_dict()``
  returned for the checkpoint being saved; ``resume-check`` reads it from the log as from the checkpoint)
* ``{"event": "log_gap", "file", "error", "since", "until", "missing", "missing_events": {event: {"records",
  "iterations": [first, last]}}, "lost"}``: the log could not be written for a while (full, read-only, removed);
  written where the records are missing (``missing`` 0: none, they were written late). Training went on.

Scalars (TensorBoard tag / W&B key), logged at the record's iteration:
``neox_epoch/passes/<source>`` (fractional passes), ``neox_epoch/samples/<source>`` (samples drawn),
``neox_epoch/pass/<source>`` (the pass in progress, 1-based), ``neox_epoch/pass_start/<source>`` (the pass
number, at the iteration where it starts).
"""

from __future__ import annotations

import bisect
import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from neox_epoch.errors import ConfigError, NeoxEpochError
from neox_epoch.util.inputs import RUN_LOG_BYTES, open_input
from neox_epoch.util.sink import GAP_EVENT, LineSink, guarded

#: JSONL file name inside ``log_dir``
JSONL_NAME = "neox_epoch.jsonl"


#: how every record the sink writes starts (``"time"`` first)
RECORD_START = '{"time": '
#: the sink's record of what is missing (see :mod:`neox_epoch.util.sink`)
LOG_GAP = GAP_EVENT
#: the event :func:`read_jsonl` gives a torn line (a record cut short by a crash or a full disk)
TORN_EVENT = "torn_line"


def read_jsonl(path: str, error: type[NeoxEpochError] = ConfigError) -> list[tuple[int, Any]]:
    """Every non-empty line of a run's JSONL parsed, with its line number; a file that cannot be read, or a line
    that is not JSON, raises ``error`` naming it. A torn record (a line the sink began, ``{"time": ...``, cut
    short by a crash) is ``{"event": "torn_line", "text": its start}`` (readers say a record is missing there),
    and a record an older writer appended to it, on the same line, is read as its own."""
    try:
        with open_input(path, "run log (JSONL)", RUN_LOG_BYTES, error, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise error(f"{path}: cannot read it ({err})") from None
    found = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            found.append((number, json.loads(line)))
        except ValueError as err:
            if not line.startswith(RECORD_START):
                last = " (the last line: cut short by a crash while writing? delete it)" if number == len(lines) else ""
                raise error(
                    f"{path}:{number}: not JSON ({err}){last}; every line of {JSONL_NAME} is one JSON object "
                    "written by the plugin"
                ) from None
            found.extend((number, r) for r in _torn(line))
    return found


def _torn(line: str) -> list[dict[str, Any]]:
    """A torn record, and the record appended to it on the same line if there is one."""
    k = line.find(RECORD_START, 1)
    while k > 0:
        try:
            tail = json.loads(line[k:])
        except ValueError:
            k = line.find(RECORD_START, k + 1)
            continue
        return [{"event": TORN_EVENT, "text": line[: min(k, 120)]}, tail]
    return [{"event": TORN_EVENT, "text": line[:120]}]


def checkpoint_records(path: str) -> list[tuple[int, dict[str, Any]]]:
    """The ``checkpoint`` records of a run's JSONL, with their line numbers."""
    return [
        (number, record)
        for number, record in read_jsonl(path)
        if isinstance(record, dict) and record.get("event") == "checkpoint"
    ]


def log_file(path: str) -> str:
    """A run's JSONL, given it or the directory holding it."""
    return os.path.join(path, JSONL_NAME) if os.path.isdir(path) else path


def recorded_at(path: str, records: dict[int, Any], iteration: int | None) -> tuple[int, Any]:
    """The checkpoint record of ``iteration`` (default the last recorded) among ``records`` (by iteration) of the
    JSONL ``path``: ``(iteration, record)``."""
    at = max(records) if iteration is None else iteration
    if at not in records:
        raise ConfigError(
            f"{path}: no checkpoint record for iteration {at}; recorded: {sorted(records)} (give "
            "--iteration with the iteration of the checkpoint the resume loads)"
        )
    return at, records[at]


#: scalar tag prefixes; the tag is ``<prefix>/<source name>``
SCALAR_PASSES = "neox_epoch/passes"
SCALAR_SAMPLES = "neox_epoch/samples"
SCALAR_PASS = "neox_epoch/pass"
SCALAR_PASS_START = "neox_epoch/pass_start"

SourceState = dict[str, float | int]
"""``{"samples": drawn, "passes": drawn / samples_per_epoch (6 decimals), "pass": pass in progress}``"""


@dataclass(frozen=True)
class SourceCounter:
    """What the counters need to know about one train source."""

    name: str
    samples_per_epoch: int
    """Samples of one pass (the unit of ``passes``)."""
    boundaries: tuple[int, ...]
    """Draw counts after which the source starts pass 2, 3, ..."""
    planned_passes: float


@dataclass(frozen=True)
class Marker:
    """'source X starts pass p at iteration k'."""

    iteration: int
    source: str
    pass_number: int
    sample: int
    """Blend position (0-based) of the pass's first sample."""


class JsonlSink(LineSink):
    """Appends one JSON object per line to ``log_dir/neox_epoch.jsonl`` (None: nowhere). Never stops training: a
    write that fails is logged once, the records wait in memory and are written when writing works again, a
    ``log_gap`` record says what is missing (:mod:`neox_epoch.util.sink`). ``write(record)``; ``close()`` at the
    end of a launch says what could not be written."""

    def __init__(self, log_dir: str | None, **kwargs: Any) -> None:
        super().__init__(os.path.join(log_dir, JSONL_NAME) if log_dir else None, **kwargs)


# ----------------------------------------------------------------------------------------------------------
# per-source state and records


def source_state(source: SourceCounter, samples: int) -> SourceState:
    """Samples drawn, fractional passes and the pass in progress (1-based) of one source."""
    c = int(samples)
    return {
        "samples": c,
        "passes": round(c / source.samples_per_epoch, 6) if source.samples_per_epoch else 0.0,
        "pass": 1 + bisect.bisect_right(source.boundaries, c - 1) if c else 1,
    }


def sources_state(sources: Sequence[SourceCounter], counts: Sequence[int]) -> dict[str, SourceState]:
    return {s.name: source_state(s, c) for s, c in zip(sources, counts)}


def counters_record(iteration: int, consumed_samples: int, state: Mapping[str, SourceState]) -> dict[str, Any]:
    return {
        "event": "counters",
        "iteration": int(iteration),
        "consumed_samples": int(consumed_samples),
        "sources": dict(state),
    }


def pass_start_record(m: Marker) -> dict[str, Any]:
    return {
        "event": "pass_start",
        "iteration": int(m.iteration),
        "source": m.source,
        "pass": int(m.pass_number),
        "sample": int(m.sample),
    }


def final_record(
    iteration: int, train_iters: int, complete: bool, sources: Sequence[SourceCounter], state: Mapping[str, SourceState]
) -> dict[str, Any]:
    return {
        "event": "final",
        "iteration": int(iteration),
        "train_iters": int(train_iters),
        "complete": complete,
        "sources": {s.name: {**state[s.name], "planned_passes": s.planned_passes} for s in sources},
    }


def counter_scalars(state: Mapping[str, SourceState]) -> dict[str, float]:
    """The per-source scalars of a counters record (passes, samples, pass), by tag."""
    out: dict[str, float] = {}
    for name, v in state.items():
        out[f"{SCALAR_PASSES}/{name}"] = float(v["passes"])
        out[f"{SCALAR_SAMPLES}/{name}"] = float(v["samples"])
        out[f"{SCALAR_PASS}/{name}"] = float(v["pass"])
    return out


def pass_start_scalar(m: Marker) -> tuple[str, float]:
    return f"{SCALAR_PASS_START}/{m.source}", float(m.pass_number)


def log_pass_start(log: logging.Logger, m: Marker) -> None:
    log.info(
        "neox_epoch: source %s starts pass %d at iteration %d (blend sample %d)",
        m.source,
        m.pass_number,
        m.iteration,
        m.sample,
    )


def log_final(log: logging.Logger, report: Mapping[str, Any]) -> None:
    log.info(
        "neox_epoch: final report at iteration %d of %d%s",
        report["iteration"],
        report["train_iters"],
        "" if report["complete"] else " (stopped early)",
    )
    for name, v in report["sources"].items():
        log.info(
            "neox_epoch:   %-24s %12d samples  %10.6f passes (planned %.6f)",
            name,
            v["samples"],
            v["passes"],
            v["planned_passes"],
        )


def fmt(state: Mapping[str, SourceState]) -> str:
    return ", ".join(f"{k} {v['passes']:.4f} passes" for k, v in state.items())


# ----------------------------------------------------------------------------------------------------------
# writers and ranks

ScalarsWriter = Callable[[dict[str, float], int], None]
"""Writes several scalars (tag -> value) at one step."""


def scalars_writer(writer: Any) -> ScalarsWriter | None:
    """Adapt a TensorBoard ``SummaryWriter`` (anything with ``add_scalar(tag, value, step)``) or a W&B run
    (anything with ``log(dict, step=...)``, e.g. ``wandb.init()``'s run or the ``wandb`` module) to one
    function ``write({tag: value}, step)``; None stays None. ``add_scalar`` wins when both exist."""
    if writer is None:
        return None
    add_scalar = getattr(writer, "add_scalar", None)
    if callable(add_scalar):

        def write_tb(scalars: dict[str, float], step: int) -> None:
            for tag, value in scalars.items():
                add_scalar(tag, value, step)

        return guarded(write_tb, "TensorBoard")
    log_fn = getattr(writer, "log", None)
    if callable(log_fn):

        def write_wandb(scalars: dict[str, float], step: int) -> None:
            log_fn(dict(scalars), step=step)

        return guarded(write_wandb, "W&B")
    raise ConfigError(
        f"writer: {type(writer).__name__} has neither add_scalar(tag, value, step) (TensorBoard) nor "
        "log(dict, step=) (W&B); pass a torch.utils.tensorboard.SummaryWriter, a wandb run or None"
    )
