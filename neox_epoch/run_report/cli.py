"""``neox-epoch report RUN_LOG_DIR [--html OUT.html] [--audit AUDIT.json] [--json]``.

Reads the run's ``neox_epoch.jsonl`` (a log directory, a directory of launch directories, or the file) and
writes one self-contained HTML page (atomically) and/or prints the parsed series as JSON (keys in
docs/report.md). Exit 0, or 2 naming the file and line of a bad record.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from neox_epoch.run_report import exposure, log, page, series
from neox_epoch.util.helptext import examples
from neox_epoch.util.output import Output, check_output, write_output_text
from neox_epoch.util.schema import describe, stamped


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "report",
        help="a run's passes, pass boundaries, resumes and token exposure as one HTML page (or JSON)",
        description="Read the run log the plugin writes (neox_epoch.jsonl in the neox_epoch block's log_dir) and "
        "draw per-source passes over iterations with the pass boundaries, resumes with what changed, early stops "
        "and the token exposure histogram, with every number's arithmetic.",
        **examples(
            "neox-epoch report logs/ --html run.html                       # one self-contained page",
            "neox-epoch report logs/ --audit audit.json --html run.html    # exact histograms from audit --json",
            "neox-epoch report logs/neox_epoch.jsonl --json",
        ),
    )
    p.add_argument(
        "run", metavar="RUN_LOG_DIR", help="the run's log_dir, a directory of launch log dirs, or the .jsonl file"
    )
    p.add_argument("--html", metavar="OUT.html", help="write the page here (one file: inline SVG, no scripts)")
    p.add_argument(
        "--audit",
        metavar="AUDIT.json",
        help="neox-epoch audit --json output: draw its exact per-index "
        "token histograms instead of the estimate from the counters",
    )
    p.add_argument("--json", action="store_true", help="print the parsed series as one JSON object")
    p.add_argument("--title", help="the page's title (default: neox-epoch run report)")
    p.set_defaults(func=run)


def build(
    path: str, audit_path: str | None = None
) -> tuple[series.Series, list[exposure.Histogram], list[str], list[series.NumberRow]]:
    """Everything the page and the JSON show."""
    rl = log.read_run(path)
    s = series.compute(rl)
    audit = exposure.read_audit(audit_path) if audit_path else None
    hists, notes = exposure.histograms(s, rl.launches[-1], audit, audit_path or "")
    return s, hists, notes, series.numbers(s)


def to_json(
    s: series.Series, hists: list[exposure.Histogram], notes: list[str], rows: list[series.NumberRow]
) -> dict[str, Any]:
    """The parsed series with stable keys (docs/report.md)."""
    return {
        "files": list(s.files),
        "complete": s.complete,
        "last_iteration": s.last_iteration,
        "train_iters": s.train_iters,
        "seq_length": s.seq_length,
        "launches": [_launch_json(r) for r in s.launches],
        "sources": [_source_json(x) for x in s.sources],
        "resumes": [_resume_json(r) for r in s.resumes],
        "stops": [
            {
                "launch": x.launch,
                "iteration": x.iteration,
                "train_iters": x.train_iters,
                "kind": x.kind,
                "label": x.label(),
            }
            for x in s.stops
        ],
        "numbers": [_number_json(r) for r in rows],
        "exposure": {"sources": {h.source: h.to_json() for h in hists}, "notes": list(notes)},
        "missing": [_missing_json(m) for m in s.missing],
        **(
            {
                "stages": {
                    **(s.stages or {}),
                    "started": [{"iteration": it, "stage": k, "name": n} for it, k, n in s.stage_starts],
                }
            }
            if s.stages or s.stage_starts
            else {}
        ),
    }


def _launch_json(r: series.LaunchRow) -> dict[str, Any]:
    """One launch of :func:`to_json`'s ``launches``."""
    return {
        "launch": r.number,
        "file": r.file,
        "line": r.line,
        "from_iteration": r.start,
        "to_iteration": r.end,
        "train_iters": r.train_iters,
        "train_batch_size": r.train_batch_size,
        "seq_length": r.seq_length,
        "mode": r.mode,
        "status": r.status,
        "schema": r.stamp[0],
        "version": r.stamp[1],
    }


def _source_json(x: series.SourceSeries) -> dict[str, Any]:
    """One source of :func:`to_json`'s ``sources``: its points and pass starts."""
    return {
        "name": x.name,
        "prefix": x.prefix,
        "samples_per_epoch": x.samples_per_epoch,
        "tokens": x.tokens,
        "planned_passes": x.planned_passes,
        "points": [
            {
                "launch": p.launch,
                "iteration": p.iteration,
                "samples": p.samples,
                "passes": p.passes,
                "pass": p.pass_number,
            }
            for p in x.points
        ],
        "pass_starts": [
            {"launch": b.launch, "iteration": b.iteration, "pass": b.pass_number, "sample": b.sample}
            for b in x.boundaries
        ],
    }


def _resume_json(r: series.ResumeMark) -> dict[str, Any]:
    """One resume of :func:`to_json`'s ``resumes``."""
    return {
        "launch": r.launch,
        "iteration": r.iteration,
        "label": r.label(),
        "changed": {c.key: [c.old, c.new] for c in r.changes},
        "changed_from": r.changes_from,
        "previous_iteration": r.previous_iteration,
        "jumps": {j.source: [j.before, j.after] for j in r.jumps},
        "consumed_samples": r.consumed_samples,
        "notes": r.notes(),
    }


def _number_json(r: series.NumberRow) -> dict[str, Any]:
    """One row of :func:`to_json`'s ``numbers``, with its arithmetic."""
    return {
        "source": r.source,
        "iteration": r.iteration,
        "samples": r.samples,
        "samples_per_epoch": r.samples_per_epoch,
        "passes": round(r.passes, 6),
        "planned_passes": r.planned_passes,
        "tokens": r.tokens,
        "input_tokens": r.input_tokens,
        "arithmetic": r.arithmetic(),
    }


def _missing_json(m: log.Missing) -> dict[str, Any]:
    """One gap of :func:`to_json`'s ``missing`` (records the log could not hold)."""
    return {
        "file": m.file,
        "line": m.line,
        "launch": m.launch,
        "kind": m.kind,
        "records": m.records,
        "events": {e: {"records": n, "iterations": [a, b]} for e, n, a, b in m.events},
        "lost": m.lost,
        "error": m.error,
        "seconds": m.seconds,
        "label": m.label(),
    }


def read_schemas(s: series.Series) -> str:
    """Which run-log schema(s) the report read: ``run log schema 1 (neox-epoch 0.1.0)``, per launch when they
    differ (a run resumed with another neox-epoch)."""
    found: dict[tuple[int, str | None], list[int]] = {}
    for r in s.launches:
        found.setdefault(r.stamp, []).append(r.number)
    if len(found) == 1:
        return f"run log {describe(*next(iter(found)))}"
    return "run log " + "; ".join(
        f"launch{'es' if len(n) > 1 else ''} {','.join(map(str, n))}: {describe(*st)}" for st, n in found.items()
    )


def run(args: argparse.Namespace) -> int:
    if not args.html and not args.json:
        raise log.RunLogError("report: nothing to write; give --html OUT.html and/or --json")
    out = Output(args.html, "--html", example="report.html") if args.html else None
    inputs = [(args.run, "the run log"), (args.audit or "", "the --audit input")]
    if out is not None:
        check_output(out, inputs)  # before reading: a refused path costs nothing
    s, hists, notes, rows = build(args.run, args.audit)
    if out is not None:
        text = page.render(s, hists, notes, rows, args.title or "neox-epoch run report")
        write_output_text(out, text, inputs + [(path, "the run log") for path in s.files])
        if not args.json:
            print(
                f"neox-epoch report: wrote {args.html} ({len(s.launches)} launches, {len(s.sources)} sources, "
                f"last iteration {s.last_iteration} of {s.train_iters}); read {read_schemas(s)}"
            )
    if s.missing and not args.json:
        print(
            f"neox-epoch report: the run log lacks records in {len(s.missing)} place"
            f"{'s' if len(s.missing) > 1 else ''} (the curves join the records around them):"
        )
        for m in s.missing:
            print(f"  launch {m.launch}: {m.label()}")
    if args.json:
        json.dump(stamped(to_json(s, hists, notes, rows)), sys.stdout, indent=1)
        sys.stdout.write("\n")
    return 0
