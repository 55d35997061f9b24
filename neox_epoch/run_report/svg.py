"""The two plots as inline SVG strings (drawn here: no plotting library, no script, no external font).

Hovering any mark shows its numbers (an SVG ``<title>``).
"""

from __future__ import annotations

import math
from html import escape
from typing import TypeVar

from neox_epoch.run_report.exposure import ESTIMATED, Histogram
from neox_epoch.run_report.series import Series, SourceSeries

#: Okabe-Ito colours (distinguishable with colour-vision deficiencies)
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
T = TypeVar("T")
FONT = 'font-family="sans-serif"'
#: a white outline under text drawn over lines
HALO = 'paint-order="stroke" stroke="#fff" stroke-width="3"'


#: at most this many vertices per curve segment (a long run logs every few iterations: the page stays small;
#: passes grow linearly between records, so evenly spaced records draw the same line)
MAX_POINTS = 1500
#: pass boundaries labelled in the plot up to this many (more: diamonds only, numbers on hover and in the table)
MAX_LABELS = 12
#: a dot per record (with its numbers on hover) up to this many records per source
MAX_DOTS = 400


def thin(points: list[T], limit: int) -> list[T]:
    """At most ``limit`` of ``points``, evenly spaced, the first and the last always kept."""
    if len(points) <= limit:
        return points
    step = (len(points) - 1) / (limit - 1)
    return [points[round(k * step)] for k in range(limit)]


def colour(k: int) -> str:
    return PALETTE[k % len(PALETTE)]


def nice_ticks(lo: float, hi: float, n: int = 6) -> list[float]:
    """About ``n`` round tick values covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / max(1, n)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    out, v = [], first
    while v <= hi + step * 1e-9:
        out.append(round(v, 10))
        v += step
    return out


def _num(v: float) -> str:
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:g}"


def _t(text: str) -> str:
    return escape(text, quote=True)


class Frame:
    """A plot area inside an SVG: data coordinates to pixels."""

    def __init__(
        self,
        width: int,
        height: int,
        left: int,
        right: int,
        top: int,
        bottom: int,
        x: tuple[float, float],
        y: tuple[float, float],
    ) -> None:
        self.width, self.height = width, height
        self.x0, self.x1 = left, width - right
        self.y0, self.y1 = height - bottom, top
        self.xd, self.yd = x, y

    def px(self, x: float) -> float:
        lo, hi = self.xd
        return round(self.x0 + (x - lo) / ((hi - lo) or 1) * (self.x1 - self.x0), 2)

    def py(self, y: float) -> float:
        lo, hi = self.yd
        return round(self.y0 - (y - lo) / ((hi - lo) or 1) * (self.y0 - self.y1), 2)

    def axes(self, xticks: list[float], yticks: list[float], xlabel: str, ylabel: str, yfmt: str = "{:g}") -> list[str]:
        out = [
            f'<rect x="{self.x0}" y="{self.y1}" width="{self.x1 - self.x0}" height="{self.y0 - self.y1}" '
            'fill="#fff" stroke="#999"/>'
        ]
        for t in yticks:
            y = self.py(t)
            out.append(f'<line x1="{self.x0}" y1="{y}" x2="{self.x1}" y2="{y}" stroke="#e6e6e6"/>')
            out.append(
                f'<text x="{self.x0 - 6}" y="{y + 4}" text-anchor="end" font-size="11" {FONT}>'
                f"{_t(yfmt.format(t))}</text>"
            )
        for t in xticks:
            x = self.px(t)
            out.append(f'<line x1="{x}" y1="{self.y0}" x2="{x}" y2="{self.y0 + 4}" stroke="#666"/>')
            out.append(f'<text x="{x}" y="{self.y0 + 17}" text-anchor="middle" font-size="11" {FONT}>{_num(t)}</text>')
        mid_x = (self.x0 + self.x1) / 2
        out.append(
            f'<text x="{mid_x}" y="{self.height - 6}" text-anchor="middle" font-size="12" {FONT}>{_t(xlabel)}</text>'
        )
        mid_y = (self.y0 + self.y1) / 2
        out.append(
            f'<text x="14" y="{mid_y}" text-anchor="middle" font-size="12" {FONT} '
            f'transform="rotate(-90 14 {mid_y})">{_t(ylabel)}</text>'
        )
        return out


def _label_x(x: float, label: str, size: int, width: int) -> tuple[float, str]:
    """Where a label beside a vertical line at ``x`` fits: right of it, else left of it, else from the left edge."""
    w = len(label) * size * 0.56
    if x + 4 + w <= width - 4:
        return x + 4, "start"
    if x - 4 - w >= 4:
        return x - 4, "end"
    return 4, "start"


def _svg(width: int, height: int, body: list[str], label: str) -> str:
    return (
        f'<svg width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{_t(label)}">' + "".join(body) + "</svg>"
    )


def _source_marks(fr: Frame, s: SourceSeries, k: int, n_bounds: int) -> list[str]:
    """One source: its planned passes (dashed), curves (a segment per launch, joined by dots at a resume),
    a diamond where each pass starts, and its legend entry."""
    body: list[str] = []
    c = colour(k)
    if s.planned_passes is not None:
        y = fr.py(s.planned_passes)
        body.append(
            f'<line x1="{fr.x0}" y1="{y}" x2="{fr.x1}" y2="{y}" stroke="{c}" stroke-width="1.2" '
            f'stroke-dasharray="6 4" opacity="0.8"><title>{_t(s.name)}: planned '
            f"{s.planned_passes:g} passes</title></line>"
        )
    for a, b in zip(s.points, s.points[1:]):
        if a.launch != b.launch:  # a resume: what the counters say before and after it, joined by dots
            body.append(
                f'<line x1="{fr.px(a.iteration)}" y1="{fr.py(a.passes)}" x2="{fr.px(b.iteration)}" '
                f'y2="{fr.py(b.passes)}" stroke="{c}" stroke-width="1.5" stroke-dasharray="1 3">'
                f"<title>{_t(s.name)}: {a.samples:,d} samples at iteration {a.iteration:,d} (launch "
                f"{a.launch}), {b.samples:,d} at iteration {b.iteration:,d} (launch {b.launch})</title>"
                "</line>"
            )
    dots = len(s.points) <= MAX_DOTS
    for launch in sorted({p.launch for p in s.points}):
        pts = thin([p for p in s.points if p.launch == launch], MAX_POINTS)
        path = " ".join(f"{fr.px(p.iteration)},{fr.py(p.passes)}" for p in pts)
        body.append(
            f'<polyline points="{path}" fill="none" stroke="{c}" stroke-width="2.2" '
            f'stroke-linejoin="round"><title>{_t(s.name)}, launch {launch}</title></polyline>'
        )
        for p in pts if dots else ():
            body.append(
                f'<circle cx="{fr.px(p.iteration)}" cy="{fr.py(p.passes)}" r="2.2" fill="{c}">'
                f"<title>{_t(s.name)} @ iteration {p.iteration:,d}: {p.samples:,d} samples = "
                f"{p.passes:.6f} passes (pass {p.pass_number})</title></circle>"
            )
    r = 6 if n_bounds <= MAX_LABELS else 4
    for b in s.boundaries:
        x, y = fr.px(b.iteration), fr.py(b.pass_number - 1)
        body.append(
            f'<path d="M{x},{y - r} L{x + r},{y} L{x},{y + r} L{x - r},{y} Z" fill="#fff" stroke="{c}" '
            f'stroke-width="2"><title>{_t(s.name)} starts pass {b.pass_number} at iteration '
            f"{b.iteration:,d} (blend sample {b.sample:,d})</title></path>"
        )
        if n_bounds <= MAX_LABELS:
            text = f"pass {b.pass_number} @ {b.iteration:,d}"
            tx, anchor = _label_x(x + 4, text, 10, int(fr.x1))
            body.append(
                f'<text x="{tx}" y="{y - 7}" text-anchor="{anchor}" font-size="10" fill="{c}" {HALO} '
                f"{FONT}>{_t(text)}</text>"
            )
    # legend
    ly = fr.y1 + 14 + 34 * k
    body.append(f'<line x1="{fr.x1 + 12}" y1="{ly}" x2="{fr.x1 + 34}" y2="{ly}" stroke="{c}" stroke-width="2.5"/>')
    body.append(f'<text x="{fr.x1 + 40}" y="{ly + 4}" font-size="12" {FONT}>{_t(s.name)}</text>')
    if s.planned_passes is not None:
        body.append(
            f'<text x="{fr.x1 + 40}" y="{ly + 18}" font-size="10" fill="#555" {FONT}>planned '
            f"{s.planned_passes:g} (dashed)</text>"
        )
    return body


def _event_marks(fr: Frame, series: Series, width: int) -> list[str]:
    """Resumes and early stops as vertical lines with their label."""
    body: list[str] = []
    marks = [(r.iteration, r.label(), "#333", "5 4") for r in series.resumes]
    marks += [(st.iteration, st.label(), "#C00000", "") for st in series.stops]
    for j, (it, label, c, dash) in enumerate(marks):
        x = fr.px(it)
        ty = 16 + 16 * j
        tx, anchor = _label_x(x, label, 11, width)
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        body.append(
            f'<line x1="{x}" y1="{ty + 3}" x2="{x}" y2="{fr.y0}" stroke="{c}" stroke-width="1.5"{dash_attr}>'
            f"<title>{_t(label)}</title></line>"
        )
        body.append(
            f'<text x="{tx}" y="{ty}" text-anchor="{anchor}" font-size="11" fill="{c}" {HALO} {FONT}>{_t(label)}</text>'
        )
    return body


def passes_plot(series: Series, width: int = 960) -> str:
    """Passes over iterations: one curve per source (a segment per launch), its planned passes as a dashed
    line, a diamond where each pass starts, resumes and early stops as vertical lines with their label."""
    n_marks = len(series.resumes) + len(series.stops)
    top = 30 + 16 * n_marks
    height = 380 + 16 * n_marks
    legend = [s.name for s in series.sources] + [
        f"planned {s.planned_passes:g} (dashed)" for s in series.sources if s.planned_passes is not None
    ]
    right = int(min(300, max(150, 50 + 6.6 * max(len(t) for t in legend))))
    x_hi = max([series.train_iters, series.last_iteration, 1] + [p.iteration for s in series.sources for p in s.points])
    y_hi = max(
        [1.0] + [p.passes for s in series.sources for p in s.points] + [s.planned_passes or 0.0 for s in series.sources]
    )
    yt = nice_ticks(0, y_hi * 1.05, 6)
    fr = Frame(width, height, 64, right, top, 44, (0, x_hi), (0, max(yt[-1], y_hi * 1.05)))
    body = fr.axes(nice_ticks(0, x_hi, 8), yt, "iteration", "passes over the source (samples / samples_per_epoch)")
    # the planned end
    xe = fr.px(series.train_iters)
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
        body += _source_marks(fr, s, k, n_bounds)
    body += _event_marks(fr, series, width)
    return _svg(width, height, body, "passes over iterations per source")


def histogram_plot(h: Histogram, k: int, width: int = 300, height: int = 230) -> str:
    """Tokens seen 0, 1, 2, ... times (one source); bars labelled with their share of the tokens."""
    total = h.total or 1
    top = max([n for _, n in h.tokens] + [1])
    yt = nice_ticks(0, top / total * 100, 4)
    fr = Frame(width, height, 52, 10, 44, 40, (-0.5, len(h.tokens) - 0.5), (0, max(yt[-1], top / total * 112)))
    body = fr.axes([float(t) for t, _ in h.tokens], yt, "times seen", "% of tokens", "{:g}%")
    c = colour(k)
    bw = (fr.x1 - fr.x0) / max(1, len(h.tokens)) * 0.7
    for times, n in h.tokens:
        x, y = fr.px(times) - bw / 2, fr.py(n / total * 100)
        body.append(
            f'<rect x="{x:.2f}" y="{y}" width="{bw:.2f}" height="{fr.y0 - y:.2f}" fill="{c}" '
            f'opacity="{0.55 if h.method == ESTIMATED else 0.9}"><title>{_t(h.source)}: {n:,d} tokens seen '
            f"{times} times ({n / total:.2%})</title></rect>"
        )
        body.append(
            f'<text x="{fr.px(times)}" y="{y - 4}" text-anchor="middle" font-size="10" {FONT}>{n / total:.1%}</text>'
        )
    what = "estimated from counters" if h.method == ESTIMATED else "exact (audit)"
    body.append(
        f'<text x="{width / 2}" y="13" text-anchor="middle" font-size="12" font-weight="bold" {FONT}>'
        f"{_t(h.source)}</text>"
    )
    body.append(
        f'<text x="{width / 2}" y="27" text-anchor="middle" font-size="10" fill="#555" {FONT}>'
        f"{h.total:,d} tokens, {what}</text>"
    )
    return _svg(width, height, body, f"token exposure histogram of {h.source}")
