"""One self-contained HTML page: inline CSS and SVG, no script, no font, no link to anything."""

from __future__ import annotations

from html import escape

from neox_epoch.run_report.exposure import AUDIT, ESTIMATED, Histogram
from neox_epoch.run_report.series import NumberRow, Series, short_path
from neox_epoch.run_report.svg import colour, histogram_plot, passes_plot, shared_top

CSS = """
body { font-family: sans-serif; margin: 24px; color: #222; max-width: 1100px; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; vertical-align: top; }
th { background: #f3f3f3; } td.l, th.l { text-align: left; }
.note { color: #555; font-size: 13px; } .warn { color: #a00000; font-size: 13px; }
.hists { display: flex; flex-wrap: wrap; gap: 12px; }
.badge { display: inline-block; padding: 1px 6px; border-radius: 3px; font-size: 12px; }
.est { background: #fff3cd; } .exact { background: #d4edda; }
code { font-size: 12px; }
"""


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def _launch_table(series: Series) -> str:
    rows = []
    for r in series.launches:
        end = "-" if r.end is None else f"{r.end:,d}"
        cls = "" if r.status == "complete" else ' class="warn"'
        rows.append(
            f"<tr><td>{r.number}</td><td class=l><code>{_e(short_path(r.file))}:{r.line}</code></td>"
            f"<td>{r.start:,d}</td><td>{end}</td><td>{r.train_iters:,d}</td><td>{r.train_batch_size:,d}</td>"
            f"<td>{'-' if r.seq_length is None else r.seq_length}</td><td class=l>{_e(r.mode or '-')}</td>"
            f"<td class=l{cls}>{_e(r.status)}</td></tr>"
        )
    head = (
        "<tr><th>launch</th><th class=l>plan event (file:line)</th><th>from iteration</th><th>to iteration</th>"
        "<th>train_iters</th><th>train_batch_size</th><th>seq_length</th><th class=l>mode</th>"
        "<th class=l>end</th></tr>"
    )
    return f"<table>{head}{''.join(rows)}</table>"


def _marks(series: Series) -> str:
    items = []
    for r in series.resumes:
        origin = (
            'the resume record\'s "changed"' if r.changes_from == "record" else "the two launches' plan events compared"
        )
        extra = "".join(f"<li class=warn>{_e(n)}</li>" for n in r.notes())
        consumed = "" if r.consumed_samples is None else f"; consumed_samples at the resume: {r.consumed_samples:,d}"
        items.append(
            f"<li><b>launch {r.launch}: {_e(r.label())}</b> <span class=note>(what changed: {origin}"
            f"{consumed})</span><ul>{extra}</ul></li>"
        )
    for s in series.stops:
        items.append(f"<li class=warn><b>launch {s.launch}: {_e(s.label())}</b></li>")
    if not items:
        return "<p class=note>One launch, no resume, trained to its end.</p>"
    return f"<ul>{''.join(items)}</ul>"


def _numbers_table(rows: list[NumberRow], series: Series) -> str:
    out = []
    for k, r in enumerate(rows):
        planned = "-" if r.planned_passes is None else f"{r.planned_passes:g}"
        bounds = r.boundary_text()
        if r.input_tokens is None:
            inputs = "-"
        else:
            inputs = f"{r.input_tokens:,d} = {r.samples:,d} &times; {series.seq_length}"
        out.append(
            f'<tr><td class=l><span style="color:{colour(k)}">&#9632;</span> {_e(r.source)}</td>'
            f"<td>{r.iteration:,d}</td><td>{r.samples:,d}</td><td>{r.samples_per_epoch:,d}</td>"
            f"<td>{r.passes:.6f}</td><td>{planned}</td><td>{'-' if r.tokens is None else f'{r.tokens:,d}'}</td>"
            f"<td>{inputs}</td><td class=l>{_e(bounds)}</td><td class=l><code>{_e(r.arithmetic())}</code></td></tr>"
        )
    head = (
        "<tr><th class=l>source</th><th>at iteration</th><th>samples drawn</th><th>samples_per_epoch</th>"
        "<th>passes</th><th>planned</th><th>tokens (one epoch)</th><th>input tokens trained</th>"
        "<th class=l>pass boundaries</th><th class=l>arithmetic</th></tr>"
    )
    return f"<table>{head}{''.join(out)}</table>"


def _histograms(hists: list[Histogram], names: list[str], notes: list[str]) -> str:
    if not hists:
        return "<p class=note>No histogram: the plan events carry no token counts.</p>"
    top = shared_top([list(h.tokens) for h in hists])  # one y-scale: the histograms are compared
    plots = "".join(f"<div>{histogram_plot(h, names.index(h.source), top)}</div>" for h in hists)
    rows = []
    for h in hists:
        badge = (
            '<span class="badge est">estimated from counters</span>'
            if h.method == ESTIMATED
            else '<span class="badge exact">exact: audit</span>'
        )
        counts = ", ".join(f"{t}&times;: {n:,d}" for t, n in h.tokens)
        rows.append(
            f"<tr><td class=l>{_e(h.source)}</td><td class=l>{badge}</td><td class=l>{counts}</td>"
            f"<td class=l>{_e(h.derivation)}</td></tr>"
        )
    table = (
        "<table><tr><th class=l>source</th><th class=l>method</th><th class=l>tokens seen n times</th>"
        f"<th class=l>how it is derived</th></tr>{''.join(rows)}</table>"
    )
    warn = "".join(f"<p class=warn>{_e(n)}</p>" for n in notes)
    how = ""
    if any(h.method == ESTIMATED for h in hists):
        how = (
            "<p class=note>Estimated from counters: the log records how many samples each source gave, not which; "
            "whole passes count every token once, a partial pass of an epoch shuffled on its own covers that "
            "fraction of the tokens, and epochs shuffled together are drawn from at random (Binomial). The tokens "
            "no sample covers (fewer than seq_length per epoch) are not modelled. The exact histogram, token by "
            "token: <code>neox-epoch audit CACHE_DIR --config ... --json &gt; AUDIT.json</code>, then "
            "<code>neox-epoch report RUN_LOG_DIR --audit AUDIT.json --html OUT.html</code>.</p>"
        )
    elif any(h.method == AUDIT for h in hists):
        how = "<p class=note>Counted token by token by <code>neox-epoch audit</code> from the index caches.</p>"
    scale = "<p class=note>One y-scale for all the histograms: % of each source's tokens.</p>" if len(hists) > 1 else ""
    return f"<div class=hists>{plots}</div>{scale}{table}{how}{warn}"


def _stages(series: Series) -> str:
    """A staged run: per stage its iterations, draws and cumulative passes per source, and where it started."""
    st = series.stages
    if not st and series.stage_starts:  # stage_start records without the plan's stages (megatron-core stages)
        rows = "".join(
            f"<tr><td>{k}</td><td class=l>{_e(n)}</td><td>{it:,d}</td></tr>" for it, k, n in series.stage_starts
        )
        return (
            "<h2>Stages</h2><p class=note>The stage_start records: the iteration whose samples begin each stage."
            f"</p><table><tr><th>stage</th><th class=l>name</th><th>started at iteration</th></tr>{rows}</table>"
        )
    if not st:
        return ""
    started = {k: it for it, k, _ in series.stage_starts}
    names = list(st.get("samples_per_pass") or {})
    head = (
        "<tr><th>stage</th><th class=l>name</th><th>iterations</th><th>started at</th>"
        + "".join(f"<th>{_e(n)} draws</th><th>{_e(n)} cumulative passes</th>" for n in names)
        + "</tr>"
    )
    lines = []
    for s in st.get("stages", []):
        cells = "".join(
            f"<td>{s['draws'].get(n, {}).get('draws', 0):,d}</td><td>{s['cumulative_passes'].get(n, 0):.4f}</td>"
            for n in names
        )
        at = started.get(s["index"], 1 if s["index"] == 1 else None)
        lines.append(
            f"<tr><td>{s['index']}</td><td class=l>{_e(s['name'])}</td><td>{s['first_iteration'] + 1:,d}.."
            f"{s['end_iteration']:,d}</td><td>{'-' if at is None else f'{at:,d}'}</td>{cells}</tr>"
        )
    return (
        "<h2>Stages</h2><p class=note>Each source continues where the earlier stages left it. Boundaries (first "
        f"iteration of each later stage, 0-based): {_e(st.get('boundaries'))}; started at: the stage_start records "
        "(1-based iteration).</p>"
        f"<table>{head}{''.join(lines)}</table>"
    )


def _missing(series: Series) -> str:
    """Where the run log lacks records: the sink's log_gap records and torn lines."""
    if not series.missing:
        return ""
    items = "".join(f"<li class=warn>launch {m.launch}: {_e(m.label())}</li>" for m in series.missing)
    return (
        "<h2>Missing records</h2><p class=note>The log could not be written for a while (a full or read-only "
        "disk, its directory removed) or a record was cut short by a crash; training went on. The curves join "
        "the records on either side; the counters records are cumulative, so the numbers after a gap are whole."
        f"</p><ul>{items}</ul>"
    )


def render(series: Series, hists: list[Histogram], notes: list[str], rows: list[NumberRow], title: str) -> str:
    names = [s.name for s in series.sources]
    status = "trained to its end" if series.complete else "<span class=warn>not trained to its end</span>"
    files = ", ".join(f"<code>{_e(short_path(f))}</code>" for f in series.files)
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
        f"<title>{_e(title)}</title><style>{CSS}</style></head><body>"
        f"<h1>{_e(title)}</h1>"
        f"<p>{len(series.launches)} launch{'es' if len(series.launches) > 1 else ''}, {len(names)} train "
        f"source{'s' if len(names) > 1 else ''}; last record at iteration {series.last_iteration:,d} of "
        f"{series.train_iters:,d}: {status}. Read from {files}.</p>"
        f"{_missing(series)}"
        "<h2>Passes over iterations</h2>"
        "<p class=note>Solid: passes drawn from each source as the counters logged them (one segment per launch). "
        "Thin dashes: the planned passes. Past 8 sources a curve also has its own dash pattern; curves that "
        "coincide are drawn in alternating dashes of their colours (the legend says which). Diamonds: where a "
        "source starts its next pass (pass_start). Vertical lines: resumes with what changed (dashed), early stops "
        "(red), the planned train_iters (dotted). Hover for the numbers.</p>"
        f"{passes_plot(series)}"
        f"{_stages(series)}"
        "<h2>Resumes and stops</h2>"
        f"{_marks(series)}"
        f"{_launch_table(series)}"
        "<h2>Token exposure at the last record</h2>"
        f"{_histograms(hists, names, notes)}"
        "<h2>The numbers</h2>"
        f"{_numbers_table(rows, series)}"
        "<p class=note>samples and passes: the last counters/final record of the last launch; samples_per_epoch and "
        "tokens: its plan event; input tokens = samples &times; seq_length.</p>"
        "</body></html>\n"
    )
