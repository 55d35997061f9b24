"""Inline SVG drawing shared by the report page and ``audit --plot``: no plotting library, no script, no font.

Colours: the 8 Okabe-Ito colours (distinguishable with colour-vision deficiencies) and then 56 more, each picked
as far as possible (CIELAB distance) from the colours before it and from the white background: 64 sources get
64 different colours (no two closer than 19 CIELAB units). Past the first 8, a curve also gets a dash pattern.
A legend grows with its entries (rows of columns), so it is never cut off.
"""

from __future__ import annotations

import math
from html import escape
from typing import TypeVar

PALETTE = (
    *("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"),
    *("#0A0AFF", "#FF0AE7", "#00D600", "#000070", "#FF0A6C", "#700016", "#5A5316", "#3370FF"),
    *("#5F970C", "#970C89", "#165A5A", "#FF0A23", "#7D10C6", "#5A1646", "#D6685C", "#5CD6D6"),
    *("#00D66B", "#FF33AD", "#002D70", "#D6995C", "#97890C", "#96D600", "#888888", "#165A16"),
    *("#A30052", "#A30000", "#995CD6", "#703800", "#3347FF", "#CE0AFF", "#5C74D6", "#B1D65C"),
    *("#0093A3", "#084268", "#00A300", "#D65CBE", "#A36200", "#550868", "#F05442", "#00D696"),
    *("#0C9744", "#CE3BCE", "#0000A3", "#0A9DFF", "#D6BE5C", "#5A7000", "#2B38AB", "#6D0C97"),
    *("#CE3B59", "#555555", "#FF540A", "#5A2416", "#08684B", "#5CD6B1", "#F04288", "#ED1D46"),
)
#: a curve's dash pattern by its palette row (8 colours a row): solid, then dashed, dotted, dash-dot
DASHES = ("", "9 3", "2 3", "9 3 2 3")
T = TypeVar("T")
FONT = 'font-family="sans-serif"'
#: a white outline under text drawn over lines
HALO = 'paint-order="stroke" stroke="#fff" stroke-width="3"'
#: a generous width per character of 12 px sans-serif text (legend columns are sized with it; DejaVu Sans, the
#: widest of the common defaults, averages about 6.5)
CHAR_W = 6.8
#: one legend row
ROW_H = 18


def colour(k: int) -> str:
    """The ``k``-th source's colour (0-based); past 64 the palette starts again (with another dash)."""
    return PALETTE[k % len(PALETTE)]


def dash(k: int) -> str:
    """The ``k``-th source's dash pattern ("" = solid): the first 8 are solid."""
    return DASHES[(k // 8) % len(DASHES)]


def thin(points: list[T], limit: int) -> list[T]:
    """At most ``limit`` of ``points``, evenly spaced, the first and the last always kept."""
    if len(points) <= limit:
        return points
    step = (len(points) - 1) / (limit - 1)
    return [points[round(k * step)] for k in range(limit)]


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


def num(v: float) -> str:
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:g}"


def esc(text: str) -> str:
    return escape(text, quote=True)


class Frame:
    """A plot area inside an SVG: data coordinates to pixels."""

    def __init__(
        self,
        width: int,
        height: int,
        margins: tuple[int, int, int, int],
        x: tuple[float, float],
        y: tuple[float, float],
    ) -> None:
        """``margins``: left, right, top, bottom (pixels)."""
        left, right, top, bottom = margins
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
                f"{esc(yfmt.format(t))}</text>"
            )
        for t in xticks:
            x = self.px(t)
            out.append(f'<line x1="{x}" y1="{self.y0}" x2="{x}" y2="{self.y0 + 4}" stroke="#666"/>')
            out.append(f'<text x="{x}" y="{self.y0 + 17}" text-anchor="middle" font-size="11" {FONT}>{num(t)}</text>')
        mid_x = (self.x0 + self.x1) / 2
        out.append(
            f'<text x="{mid_x}" y="{self.y0 + 36}" text-anchor="middle" font-size="12" {FONT}>{esc(xlabel)}</text>'
        )
        mid_y = (self.y0 + self.y1) / 2
        out.append(
            f'<text x="14" y="{mid_y}" text-anchor="middle" font-size="12" {FONT} '
            f'transform="rotate(-90 14 {mid_y})">{esc(ylabel)}</text>'
        )
        return out


def label_x(x: float, label: str, size: int, width: int) -> tuple[float, str]:
    """Where a label beside a vertical line at ``x`` fits: right of it, else left of it, else from the left edge."""
    w = len(label) * size * 0.56
    if x + 4 + w <= width - 4:
        return x + 4, "start"
    if x - 4 - w >= 4:
        return x - 4, "end"
    return 4, "start"


def svg(width: int, height: int, body: list[str], label: str, standalone: bool = False) -> str:
    """An ``<svg>`` element; ``standalone``: a file of its own (with the SVG namespace an HTML page does without)."""
    ns = 'xmlns="http://www.w3.org/2000/svg" ' if standalone else ""
    return (
        f'<svg {ns}width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(label)}">' + "".join(body) + "</svg>"
    )


def legend_shape(texts: list[str], width: int, left: int = 12) -> tuple[int, int]:
    """(columns, rows) of a legend of ``texts`` across ``width`` pixels: columns as wide as the longest entry."""
    col = legend_column(texts)
    cols = max(1, min(len(texts), (width - left) // col))
    return cols, math.ceil(len(texts) / cols)


def legend_column(texts: list[str]) -> int:
    return int(56 + CHAR_W * max([len(t) for t in texts] + [1]))


def legend(entries: list[tuple[str, str, str, str]], width: int, top: float, left: int = 12) -> list[str]:
    """A legend of ``(name, text, colour, dash)`` entries in rows of columns from ``top``: a filled square and
    a line sample in the entry's colour and dash, then its text. Each entry is a ``<g class="legend">``."""
    texts = [text for _, text, _, _ in entries]
    cols, _ = legend_shape(texts, width, left)
    col = legend_column(texts)
    body = []
    for k, (name, text, c, d) in enumerate(entries):
        x, y = left + col * (k % cols), round(top + ROW_H * (k // cols))
        dash_attr = f' stroke-dasharray="{d}"' if d else ""
        body.append(
            f'<g class="legend" data-source="{esc(name)}"><rect class="swatch" x="{x}" y="{y - 5}" width="10" '
            f'height="10" fill="{c}"/><line x1="{x + 13}" y1="{y}" x2="{x + 34}" y2="{y}" stroke="{c}" '
            f'stroke-width="2.5"{dash_attr}/><text x="{x + 38}" y="{y + 4}" font-size="12" {FONT}>'
            f"{esc(text)}</text></g>"
        )
    return body


def histogram(
    name: str,
    tokens: list[tuple[int, int]],
    k: int,
    y_top: float,
    notes: tuple[str, str] = ("", ""),
    size: tuple[int, int] = (300, 230),
) -> str:
    """Tokens seen 0, 1, 2, ... times (one source) as % of its tokens, bars labelled with their share; ``y_top``
    (%) is the y-axis' top, the same for histograms meant to be compared. ``notes``: a subtitle and a bar style
    ("estimated": lighter bars)."""
    width, height = size
    total = sum(n for _, n in tokens) or 1
    yt = nice_ticks(0, y_top, 4)
    fr = Frame(width, height, (52, 10, 44, 40), (-0.5, len(tokens) - 0.5), (0, max(yt[-1], y_top)))
    body = fr.axes([float(t) for t, _ in tokens], yt, "times seen", "% of tokens", "{:g}%")
    c = colour(k)
    bw = (fr.x1 - fr.x0) / max(1, len(tokens)) * 0.7
    for times, n in tokens:
        x, y = fr.px(times) - bw / 2, fr.py(n / total * 100)
        body.append(
            f'<rect x="{x:.2f}" y="{y}" width="{bw:.2f}" height="{fr.y0 - y:.2f}" fill="{c}" '
            f'opacity="{0.55 if notes[1] == "estimated" else 0.9}"><title>{esc(name)}: {n:,d} tokens seen '
            f"{times} times ({n / total:.2%})</title></rect>"
        )
        body.append(
            f'<text x="{fr.px(times)}" y="{y - 4}" text-anchor="middle" font-size="10" {FONT}>{n / total:.1%}</text>'
        )
    body.append(
        f'<text x="{width / 2}" y="13" text-anchor="middle" font-size="12" font-weight="bold" {FONT}>'
        f"{esc(name[: int(width / 7)])}<title>{esc(name)}</title></text>"
    )
    body.append(
        f'<text x="{width / 2}" y="27" text-anchor="middle" font-size="10" fill="#555" {FONT}>{esc(notes[0])}</text>'
    )
    return svg(width, height, body, f"token exposure histogram of {name}")


def shared_top(histograms: list[list[tuple[int, int]]]) -> float:
    """The y-axis top (%) that fits every histogram's tallest bar and its label: one scale for all."""
    tops = [max([n for _, n in h] + [0]) / (sum(n for _, n in h) or 1) * 100 for h in histograms]
    return max(tops + [1.0]) * 1.12


def histogram_grid(hists: list[tuple[str, list[tuple[int, int]]]], title: str, columns: int = 3) -> str:
    """Several histograms in one SVG, side by side on one y-scale (``audit --plot``)."""
    top = shared_top([h for _, h in hists])
    cell_w, cell_h = 300, 230
    cols = max(1, min(columns, len(hists)))
    rows = math.ceil(len(hists) / cols)
    width, height = cols * cell_w, 30 + rows * cell_h
    body = [
        f'<rect width="{width}" height="{height}" fill="#fff"/>',
        f'<text x="{width / 2}" y="18" text-anchor="middle" font-size="14" font-weight="bold" {FONT}>'
        f"{esc(title)}</text>",
    ]
    for k, (name, tokens) in enumerate(hists):
        x, y = cell_w * (k % cols), 30 + cell_h * (k // cols)
        total = sum(n for _, n in tokens)
        inner = histogram(name, tokens, k, top, (f"{total:,d} tokens", ""), (cell_w, cell_h))
        body.append(f'<g transform="translate({x} {y})">{inner}</g>')
    return svg(width, height, body, title, standalone=True)
