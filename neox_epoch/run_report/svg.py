"""The two plots as inline SVG strings (drawn with :mod:`neox_epoch.util.svg`: no plotting library, no script).

Hovering any mark shows its numbers (an SVG ``<title>``). The legend sits under the plot and grows with the
sources (1 to 64 and more); each source has its own colour (and past 8 its own dash pattern). Curves that
coincide (two sources with equal passes at every record) are drawn in alternating dashes of their colours, so
each stays visible, and the legend says "= same as" the first of them.
"""

from __future__ import annotations

import numpy as np

from neox_epoch.run_report.exposure import ESTIMATED, Histogram
from neox_epoch.run_report.series import Series, SourceSeries
from neox_epoch.util.svg import (
    FONT,
    HALO,
    ROW_H,
    Frame,
    colour,
    dash,
    esc,
    histogram,
    label_x,
    legend,
    legend_shape,
    nice_ticks,
    shared_top,
    svg,
    thin,
)

__all__ = ["MAX_DOTS", "MAX_LABELS", "MAX_POINTS", "colour", "histogram_plot", "passes_plot", "shared_top", "thin"]

#: at most this many vertices per curve segment (a long run logs every few iterations: the page stays small;
#: passes grow linearly between records, so evenly spaced records draw the same line)
MAX_POINTS = 1500
#: pass boundaries labelled in the plot up to this many (more: diamonds only, numbers on hover and in the table)
MAX_LABELS = 12
#: a dot per record (with its numbers on hover) up to this many records per source
MAX_DOTS = 400
#: the length of one colour's dash where coinciding curves alternate
SHARE = 8
#: curves at most this many pixels apart at every vertex are drawn as coinciding (one would hide the other)
NEAR = 1.5


def _drawn(fr: Frame, s: SourceSeries) -> tuple[tuple[tuple[int, float], ...], np.ndarray]:
    """The curve as drawn: (launch, x pixel) of its vertices, and their y pixels."""
    pts = thin(list(s.points), MAX_POINTS)
    return tuple((p.launch, round(fr.px(p.iteration), 1)) for p in pts), np.array([fr.py(p.passes) for p in pts])


def coinciding(fr: Frame, sources: tuple[SourceSeries, ...]) -> list[tuple[int, int, int]]:
    """Per source ``(first, position, size)`` of its group of coinciding curves (the same vertices across, at
    most ``NEAR`` pixels apart up or down): the index of the group's first source, this source's place in the
    group and the group's size (1: a curve of its own)."""
    leaders: dict[tuple[tuple[int, float], ...], list[tuple[np.ndarray, list[int]]]] = {}
    for k, s in enumerate(sources):
        xs, ys = _drawn(fr, s)
        same = leaders.setdefault(xs, []) if xs else []
        group = next((g for y0, g in same if np.abs(y0 - ys).max() <= NEAR), None)
        if group is None:
            same.append((ys, [k]))
        else:
            group.append(k)
    out = [(k, 0, 1) for k in range(len(sources))]
    for group in (g for same in leaders.values() for _, g in same):
        for j, k in enumerate(group):
            out[k] = (group[0], j, len(group))
    return out


def _stroke(k: int, share: tuple[int, int, int]) -> str:
    """The dash of source ``k``'s curve: its own, or its turn in the alternating dashes of coinciding curves."""
    _, j, m = share
    if m > 1:
        return f' stroke-dasharray="{SHARE} {SHARE * (m - 1)}" stroke-dashoffset="{-SHARE * j}"'
    return f' stroke-dasharray="{dash(k)}"' if dash(k) else ""


def _curve(fr: Frame, s: SourceSeries, k: int, share: tuple[int, int, int]) -> list[str]:
    """A source's curve: a segment per launch, joined by dots at a resume; a dot per record (first of a group)."""
    body: list[str] = []
    c = colour(k)
    for a, b in zip(s.points, s.points[1:]):
        if a.launch != b.launch:  # a resume: what the counters say before and after it, joined by dots
            body.append(
                f'<line x1="{fr.px(a.iteration)}" y1="{fr.py(a.passes)}" x2="{fr.px(b.iteration)}" '
                f'y2="{fr.py(b.passes)}" stroke="{c}" stroke-width="1.5" stroke-dasharray="1 3">'
                f"<title>{esc(s.name)}: {a.samples:,d} samples at iteration {a.iteration:,d} (launch "
                f"{a.launch}), {b.samples:,d} at iteration {b.iteration:,d} (launch {b.launch})</title>"
                "</line>"
            )
    dots = len(s.points) <= MAX_DOTS and share[1] == 0
    for launch in sorted({p.launch for p in s.points}):
        pts = thin([p for p in s.points if p.launch == launch], MAX_POINTS)
        path = " ".join(f"{fr.px(p.iteration)},{fr.py(p.passes)}" for p in pts)
        body.append(
            f'<polyline class="curve" data-source="{esc(s.name)}" points="{path}" fill="none" stroke="{c}" '
            f'stroke-width="2.2" stroke-linejoin="round"{_stroke(k, share)}><title>{esc(s.name)}, launch {launch}'
            "</title></polyline>"
        )
        for p in pts if dots else ():
            body.append(
                f'<circle cx="{fr.px(p.iteration)}" cy="{fr.py(p.passes)}" r="2.2" fill="{c}">'
                f"<title>{esc(s.name)} @ iteration {p.iteration:,d}: {p.samples:,d} samples = "
                f"{p.passes:.6f} passes (pass {p.pass_number})</title></circle>"
            )
    return body


def _source_marks(fr: Frame, s: SourceSeries, k: int, n_bounds: int, share: tuple[int, int, int]) -> list[str]:
    """One source: its planned passes (thin dashes), its curve, a diamond where each pass starts."""
    body: list[str] = []
    c = colour(k)
    if s.planned_passes is not None:
        y = fr.py(s.planned_passes)
        body.append(
            f'<line x1="{fr.x0}" y1="{y}" x2="{fr.x1}" y2="{y}" stroke="{c}" stroke-width="1" '
            f'stroke-dasharray="6 4" opacity="0.7"><title>{esc(s.name)}: planned '
            f"{s.planned_passes:g} passes</title></line>"
        )
    body += _curve(fr, s, k, share)
    r = 6 if n_bounds <= MAX_LABELS else 4
    for b in s.boundaries:
        x, y = fr.px(b.iteration), fr.py(b.pass_number - 1)
        body.append(
            f'<path d="M{x},{y - r} L{x + r},{y} L{x},{y + r} L{x - r},{y} Z" fill="#fff" stroke="{c}" '
            f'stroke-width="2"><title>{esc(s.name)} starts pass {b.pass_number} at iteration '
            f"{b.iteration:,d} (blend sample {b.sample:,d})</title></path>"
        )
        if n_bounds <= MAX_LABELS:
            text = f"pass {b.pass_number} @ {b.iteration:,d}"
            tx, anchor = label_x(x + 4, text, 10, int(fr.x1))
            body.append(
                f'<text x="{tx}" y="{y - 7}" text-anchor="{anchor}" font-size="10" fill="{c}" {HALO} '
                f"{FONT}>{esc(text)}</text>"
            )
    return body


def _event_marks(fr: Frame, series: Series, width: int) -> list[str]:
    """Resumes and early stops as vertical lines with their label."""
    body: list[str] = []
    marks = [(r.iteration, r.label(), "#333", "5 4") for r in series.resumes]
    marks += [(st.iteration, st.label(), "#C00000", "") for st in series.stops]
    for j, (it, label, c, dash_) in enumerate(marks):
        x = fr.px(it)
        ty = 16 + 16 * j
        tx, anchor = label_x(x, label, 11, width)
        dash_attr = f' stroke-dasharray="{dash_}"' if dash_ else ""
        body.append(
            f'<line x1="{x}" y1="{ty + 3}" x2="{x}" y2="{fr.y0}" stroke="{c}" stroke-width="1.5"{dash_attr}>'
            f"<title>{esc(label)}</title></line>"
        )
        body.append(
            f'<text x="{tx}" y="{ty}" text-anchor="{anchor}" font-size="11" fill="{c}" {HALO} {FONT}>'
            f"{esc(label)}</text>"
        )
    return body


def legend_texts(series: Series, shares: list[tuple[int, int, int]]) -> list[str]:
    """Each source's legend text: its name, its planned passes, the source whose curve it coincides with."""
    out = []
    for s, (first, j, _) in zip(series.sources, shares):
        text = s.name if s.planned_passes is None else f"{s.name} (planned {s.planned_passes:g})"
        out.append(text + (f" = same as {series.sources[first].name}" if j else ""))
    return out


def passes_plot(series: Series, width: int = 960) -> str:
    """Passes over iterations: one curve per source (a segment per launch), its planned passes as a thin dashed
    line, a diamond where each pass starts, resumes and early stops as vertical lines with their label, and the
    legend under the plot."""
    n_marks = len(series.resumes) + len(series.stops)
    x_hi = max([series.train_iters, series.last_iteration, 1] + [p.iteration for s in series.sources for p in s.points])
    y_hi = max(
        [1.0] + [p.passes for s in series.sources for p in s.points] + [s.planned_passes or 0.0 for s in series.sources]
    )
    yt = nice_ticks(0, y_hi * 1.05, 6)
    y_dom = (0, max(yt[-1], y_hi * 1.05))
    plot_h = 340
    # the coinciding curves depend on the plot area only: its height does not change with the legend below it
    probe = Frame(width, plot_h + 30 + 16 * n_marks + 44, (64, 24, 30 + 16 * n_marks, 44), (0, x_hi), y_dom)
    shares = coinciding(probe, series.sources)
    texts = legend_texts(series, shares)
    _, rows = legend_shape(texts, width)
    legend_h = ROW_H * rows + 8 if texts else 0
    top = 30 + 16 * n_marks
    height = top + plot_h + 44 + legend_h
    fr = Frame(width, height, (64, 24, top, 44 + legend_h), (0, x_hi), y_dom)
    body = fr.axes(nice_ticks(0, x_hi, 8), yt, "iteration", "passes over the source (samples / samples_per_epoch)")
    xe = fr.px(series.train_iters)  # the planned end
    body.append(
        f'<line x1="{xe}" y1="{fr.y1}" x2="{xe}" y2="{fr.y0}" stroke="#999" stroke-dasharray="2 3">'
        f"<title>train_iters {series.train_iters:,d} (the last launch's plan)</title></line>"
    )
    body.append(
        f'<text x="{xe - 4}" y="{fr.y0 - 6}" text-anchor="end" font-size="10" fill="#777" {HALO} {FONT}>'
        f"train_iters {series.train_iters:,d}</text>"
    )
    n_bounds = sum(len(s.boundaries) for s in series.sources)
    for k, s in enumerate(series.sources):
        body += _source_marks(fr, s, k, n_bounds, shares[k])
    body += _event_marks(fr, series, width)
    entries = [
        (s.name, text, colour(k), _legend_dash(k, shares[k])) for k, (s, text) in enumerate(zip(series.sources, texts))
    ]
    body += legend(entries, width, fr.y0 + 44 + ROW_H / 2)
    return svg(width, height, body, "passes over iterations per source")


def _legend_dash(k: int, share: tuple[int, int, int]) -> str:
    return "4 3" if share[2] > 1 else dash(k)


def histogram_plot(h: Histogram, k: int, y_top: float | None = None) -> str:
    """Tokens seen 0, 1, 2, ... times (one source); ``y_top``: the y-axis top (%) shared by the page's
    histograms (None: this one's own)."""
    top = shared_top([list(h.tokens)]) if y_top is None else y_top
    what = "estimated from counters" if h.method == ESTIMATED else "exact (audit)"
    style = "estimated" if h.method == ESTIMATED else ""
    return histogram(h.source, list(h.tokens), k, top, (f"{h.total:,d} tokens, {what}", style))
