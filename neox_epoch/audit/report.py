"""Output of ``neox-epoch audit``: a text table, JSON, a stderr progress line, ``--plot`` and ``--manifest``."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from typing import IO, Any

from neox_epoch.audit.audit import AuditResult
from neox_epoch.audit.blends import BlendReport
from neox_epoch.audit.exposure import ManifestChunk
from neox_epoch.audit.index_report import IndexReport
from neox_epoch.errors import AuditError
from neox_epoch.formats.npy import Progress
from neox_epoch.util.output import Input, Output, write_output
from neox_epoch.util.schema import stamped
from neox_epoch.util.svg import histogram_grid
from neox_epoch.util.text import fmt as _fmt
from neox_epoch.util.text import table

MANIFEST_COLUMNS = (
    "index",
    "split",
    "data_prefix",
    "document",
    "tokens",
    "min_exposure",
    "max_exposure",
    "token_exposures",
    "first_sample",
    "last_sample",
    "first_iteration",
    "last_iteration",
)


class TtyProgress(Progress):
    """One self-overwriting stderr line per pass, at most 5 updates a second, only when stderr is a TTY."""

    def __init__(self, stream: IO[str] | None = None, enabled: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.label, self.context, self.total, self.count, self.last, self.t0 = "", "", 0, 0, 0.0, 0.0

    def describe(self, what: str) -> None:
        self.context = what[-48:]

    def start(self, label: str, total: int) -> None:
        self.label, self.total, self.count, self.t0, self.last = label, max(total, 1), 0, time.monotonic(), 0.0

    def advance(self, units: int) -> None:
        self.count += units
        now = time.monotonic()
        if self.enabled and now - self.last >= 0.2:
            self.last = now
            pct = 100.0 * min(self.count, self.total) / self.total
            ctx = f"{self.context} " if self.context else ""
            self.stream.write(
                f"\raudit {ctx}{self.label}: {pct:5.1f}% ({self.count:,}/{self.total:,}) {now - self.t0:5.1f}s"
            )
            self.stream.flush()

    def done(self) -> None:
        if self.enabled and self.last:
            self.stream.write("\r\033[K")
            self.stream.flush()
        self.last = 0.0


def _hist_line(h: dict[int, int]) -> str:
    total = sum(h.values())
    return ", ".join(f"{k}x {v:,d} ({100.0 * v / total:.1f}%)" for k, v in sorted(h.items())) if total else "-"


def _tail(report: IndexReport | BlendReport, indent: str) -> list[str]:
    """A report's exposure, notes and findings, and a blank line."""
    e, lines = report.exposure, []
    if e is not None:
        docs = sum(e.documents.values())
        lines = [
            f"{indent}consumed samples: {e.consumed_samples:,d}",
            f"{indent}tokens seen:      {_hist_line(e.tokens)}",
            f"{indent}documents (whole): {_hist_line(e.documents)}",
            f"{indent}never seen:       {e.tokens_unseen:,d} tokens, {e.documents_unseen:,d} of {docs:,d} "
            f"documents; partly seen: {e.documents_partial:,d} documents",
        ]
        if e.second_pass_sample is not None:
            it = f" (iteration {e.second_pass_iteration:,d})" if e.second_pass_iteration is not None else ""
            lines.append(f"{indent}second pass from blend/global sample {e.second_pass_sample:,d}{it}")
        lines.extend(f"{indent}note: {n}" for n in e.notes)
    lines += [f"  note: {note}" for note in report.notes]
    return lines + [f"  FINDING {item}" for item in report.findings] + [""]


def _table(headers: tuple[str, ...], rows: list[tuple[Any, ...]], indent: str = "  ") -> list[str]:
    return table(headers, [[_fmt(v) for v in row] for row in rows], indent=indent)


def render_text(res: AuditResult) -> str:
    """The human-readable report."""
    out: list[str] = []
    columns = ("split", "epochs", "samples", "per_epoch", "len", "separate", "documents", "doc range", "tokens")
    for index in res.indexes:
        bounds = index.document_range
        span = f"[{bounds[0]:,d}, {bounds[1]:,d})" if bounds else None
        data = f"  data {index.data_prefix or '-'}   seq_length {_fmt(index.seq_length)}   seed {_fmt(index.seed)}"
        out += [f"{index.kind} index {index.path}", f"{data}   requested {_fmt(index.num_samples_requested)}"]
        out += _table(
            columns,
            [
                (
                    index.split,
                    index.epochs,
                    index.samples,
                    index.samples_per_epoch,
                    index.length,
                    index.separated_final_epoch,
                    index.documents,
                    span,
                    index.tokens,
                )
            ],
        )
        out += _tail(index, "    ")
    columns = ("source", "weight", "draws", "consumed", "len", "per_epoch", "passes", "2nd pass sample", "iteration")
    for blend in res.blends:
        out.append(
            f"{blend.kind} blend {blend.path} ({blend.split}, {_fmt(blend.size)} samples, "
            f"consumed {_fmt(blend.consumed_samples)})"
        )
        rows = [
            (
                f"{number}: {os.path.basename(source.dataset_path or '-')}",
                f"{source.weight:.6g}" if source.weight is not None else None,
                source.draws,
                source.draws_consumed,
                source.length,
                source.samples_per_epoch,
                source.passes,
                source.second_pass_sample,
                source.second_pass_iteration,
            )
            for number, source in enumerate(blend.sources)
        ]
        out += _table(columns, rows) + _tail(blend, "  ")
    out.extend(f"note: {note}" for note in res.notes)
    found = len(res.findings)
    out.append(
        f"{len(res.indexes)} index(es), {len(res.blends)} blend(s): "
        + (f"{found} finding(s)" if found else "no findings")
    )
    return "\n".join(out) + "\n"


def render_json(res: AuditResult) -> str:
    return json.dumps(stamped(res.to_json()), indent=1, sort_keys=False) + "\n"


class ManifestWriter:
    """CSV rows, one per document of every index with an exposure, written as the audit goes."""

    def __init__(self, f: IO[bytes], global_batch_size: int | None) -> None:
        self.f, self.gbs = f, global_batch_size
        self.f.write((",".join(MANIFEST_COLUMNS) + "\n").encode("utf-8"))

    def __call__(self, rep: IndexReport, chunk: ManifestChunk) -> None:
        head = f"{_csv(rep.path)},{_csv(rep.split)},{_csv(rep.data_prefix or '')}"
        lines, batch = [], self.gbs
        # the chunk's fields in order: document, tokens, min, max and summed exposure, first and last draw
        columns = (column.tolist() for column in vars(chunk).values())
        for document, tokens, low, high, total, first, last in zip(*columns):
            samples = ["" if sample < 0 else str(sample) for sample in (first, last)]
            iterations = ["" if sample < 0 or not batch else str(sample // batch + 1) for sample in (first, last)]
            lines.append(f"{head},{document},{tokens},{low},{high},{total},{','.join(samples + iterations)}\n")
        self.f.write("".join(lines).encode("utf-8"))


def _csv(s: str) -> str:
    return '"' + s.replace('"', '""') + '"' if any(c in s for c in ',"\n') else s


def check_plot_format(path: str) -> None:
    """Refuse a --plot name for another format than SVG (the plot is drawn as SVG, without a plotting library)."""
    ext = os.path.splitext(path)[1].lstrip(".").lower()
    if ext not in ("", "svg"):
        raise AuditError(
            f'--plot "{path}": the plot is an SVG image (drawn without a plotting library), not .{ext}; '
            "name it .svg, e.g. exposure.svg (a browser shows it; convert it with any SVG tool)"
        )


def plot(res: AuditResult, out: Output, inputs: Sequence[Input] = ()) -> None:
    """The token exposure histogram of each index (and blend) on one y-scale, as one SVG image written through
    the output policy."""
    series = [(os.path.basename(r.path), r.exposure) for r in res.indexes if r.exposure is not None]
    series += [(f"blend {os.path.basename(b.path)}", b.exposure) for b in res.blends if b.exposure is not None]
    if not series:
        raise AuditError(
            f"--plot {out.path}: no exposure to plot; give --consumed, --train-iters/--global-batch-size or --config"
        )
    hists = [(label, [(t, e.tokens.get(t, 0)) for t in range(max(e.tokens, default=0) + 1)]) for label, e in series]
    text = histogram_grid(hists, "Token exposure: % of the split's tokens seen 0, 1, 2, ... times as inputs")

    def write(f: IO[bytes]) -> None:
        f.write(text.encode("utf-8"))

    write_output(out, write, inputs)
