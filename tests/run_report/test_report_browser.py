"""The report page rendered by a real browser: headless Chromium (Debian's ``chromium``; scripts/setup.sh installs
it) at 2, 8, 22 and 64 train sources with Pile-like names.

The run logs are written by the hooks' own writers over plans the real planner made for real .bin/.idx corpora
(tests/run_logs.py), the page by ``neox-epoch report --html``. Chromium renders a copy with a probe script
appended, in one launch: ``--dump-dom`` gives what its layout engine measured (each legend text's box, each
swatch's place, points along the curves), ``--screenshot`` the pixels (the probe writes below the plot), read
back with the small PNG decoder below (zlib and numpy). The assertions are on what the page must show, not on
exact pixels: every legend entry present, inside the SVG and clear of the others; a different colour per source
in the SVG and on the screen; two sources with equal passes at every record both visible.

``NEOX_EPOCH_SCREENSHOTS=DIR`` copies the 22- and 64-source screenshots there (docs/img holds the committed ones).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import tempfile
import zlib
from dataclasses import dataclass
from html import unescape
from typing import Any

import numpy as np
import pytest
from optional import in_ci
from run_logs import blend_values, launch

from neox_epoch.cli import main
from neox_epoch.formats.corpus import write_random_corpus
from neox_epoch.formats.neox_config import EpochBlock

PILE = (
    *("Pile-CC", "PubMed_Central", "Books3", "OpenWebText2", "ArXiv", "Github", "FreeLaw", "StackExchange"),
    *("USPTO_Backgrounds", "PubMed_Abstracts", "Gutenberg_PG-19", "OpenSubtitles", "Wikipedia_en"),
    *("DM_Mathematics", "Ubuntu_IRC", "BookCorpus2", "EuroParl", "HackerNews", "YoutubeSubtitles", "PhilPapers"),
    *("NIH_ExPorter", "Enron_Emails"),
)
SIZES = (2, 8, 22, 64)
#: the browser window: the page is 1100 px wide at most; the height is set to the plot's bottom
WIDTH = 1024
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)
#: appended to a copy of the page: what Chromium's layout measured, as JSON in a <pre id=probe>
PROBE = """<script>(function () {
  const svg = document.querySelector("svg"), box = svg.getBoundingClientRect(), vb = svg.viewBox.baseVal;
  const at = (x, y) => [x + window.scrollX, y + window.scrollY];
  const out = {svg: {top: box.top + window.scrollY, bottom: box.bottom + window.scrollY,
                     viewbox: [vb.x, vb.y, vb.width, vb.height]}, legend: [], curves: []};
  for (const g of svg.querySelectorAll("g.legend")) {
    const t = g.querySelector("text"), r = g.querySelector("rect.swatch"), b = t.getBBox();
    const rb = r.getBoundingClientRect();
    out.legend.push({source: g.dataset.source, text: t.textContent, fill: r.getAttribute("fill"),
                     box: [Number(r.getAttribute("x")), b.y, b.x + b.width, b.y + b.height],
                     swatch: at(rb.left + rb.width / 2, rb.top + rb.height / 2)});
  }
  for (const p of svg.querySelectorAll("polyline.curve")) {
    const m = p.getScreenCTM(), n = p.getTotalLength(), pts = [];
    for (let i = 0; i <= 600; i++) {
      const q = p.getPointAtLength(n * i / 600);
      pts.push(at(q.x * m.a + q.y * m.c + m.e, q.x * m.b + q.y * m.d + m.f));
    }
    out.curves.push({source: p.dataset.source, stroke: p.getAttribute("stroke"), points: pts});
  }
  const pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();</script>"""


# ---------------------------------------------------------------------------------------------------------
# a PNG reader: 8-bit RGB or RGBA, not interlaced (what Chromium writes)


def _unfilter(kind: int, line: bytearray, prev: bytearray, bpp: int) -> bytearray:
    """Undo one row's PNG filter (RFC 2083, 6.3): None, Sub, Up, Average, Paeth."""
    if kind == 0:
        return line
    if kind == 1:
        return bytearray(np.cumsum(np.frombuffer(bytes(line), np.uint8).reshape(-1, bpp), 0, np.uint8).tobytes())
    if kind == 2:
        return bytearray((np.frombuffer(bytes(line), np.uint8) + np.frombuffer(bytes(prev), np.uint8)).tobytes())
    for i in range(len(line)):
        a, b = line[i - bpp] if i >= bpp else 0, prev[i]
        if kind == 3:
            line[i] = (line[i] + (a + b) // 2) & 255
            continue
        c = prev[i - bpp] if i >= bpp else 0
        p = a + b - c
        pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
        line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    return line


def read_png(path: str) -> np.ndarray:
    """The pixels of a PNG as an (height, width, 3) uint8 array."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    pos, idat, head = 8, [], None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            head = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + length
    assert head is not None, path
    width, height, depth, ctype, _, _, interlace = head
    assert (depth, ctype in (2, 6), interlace) == (8, True, 0), head
    bpp = 3 if ctype == 2 else 4
    raw, stride = zlib.decompress(b"".join(idat)), width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        prev = _unfilter(raw[start], bytearray(raw[start + 1 : start + 1 + stride]), prev, bpp)
        rows.append(bytes(prev))
    return np.frombuffer(b"".join(rows), np.uint8).reshape(height, width, bpp)[:, :, :3]


def test_png_reader_round_trip(tmp_path: Any) -> None:
    """The reader undoes every filter kind: rows written with filters 0-4 by hand decode to the same pixels."""
    rng = np.random.default_rng(5)
    img = rng.integers(0, 256, (5, 7, 3), dtype=np.uint8)
    rows, prev = [], np.zeros(21, np.int64)
    for y, kind in enumerate(range(5)):
        cur = img[y].reshape(-1).astype(np.int64)
        left = np.concatenate([np.zeros(3, np.int64), cur[:-3]])
        upleft = np.concatenate([np.zeros(3, np.int64), prev[:-3]])
        p = left + prev - upleft
        pa, pb, pc = abs(p - left), abs(p - prev), abs(p - upleft)
        paeth = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, prev, upleft))
        pred = [0 * cur, left, prev, (left + prev) // 2, paeth][kind]
        rows.append(bytes([kind]) + ((cur - pred) % 256).astype(np.uint8).tobytes())
        prev = cur

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 7, 5, 8, 2, 0, 0, 0))
    (tmp_path / "x.png").write_bytes(png + chunk(b"IDAT", zlib.compress(b"".join(rows))) + chunk(b"IEND", b""))
    assert (read_png(str(tmp_path / "x.png")) == img).all()


# ---------------------------------------------------------------------------------------------------------
# the pages, rendered


@dataclass(frozen=True)
class Rendered:
    names: list[str]
    html: str
    probe: dict[str, Any]
    pixels: np.ndarray
    png: str


def _chromium() -> str:
    found = os.environ.get("NEOX_EPOCH_CHROMIUM") or shutil.which("chromium")
    if not found:
        why = "chromium is not installed: as root, bash scripts/setup.sh installs it (apt-get install -y chromium)"
        if in_ci():
            pytest.fail(f"CI=true: {why}")
        pytest.skip(why)
    return found


def _browse(chromium: str, *args: str) -> str:
    with tempfile.TemporaryDirectory() as profile:
        res = subprocess.run(
            [chromium, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True, timeout=180
        )
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def _names(n: int) -> list[str]:
    if n == 2:
        return ["Pile-CC", "USPTO_Backgrounds"]
    return [PILE[k % len(PILE)] + (f"_{k // len(PILE)}" if k >= len(PILE) else "") for k in range(n)]


def _run_log(d: str, n: int) -> str:
    """A run over ``n`` sources: 2 are one corpus under two names with equal targets (equal passes at every
    record); more are corpora of different sizes with targets 0.5 to 2.5 passes."""
    names = _names(n)
    for k, name in enumerate(names):
        if n == 2:
            write_random_corpus(os.path.join(d, name), 1, 150, 5, 60)
        else:
            write_random_corpus(os.path.join(d, name), k + 1, 12 + 3 * (k % 5), 5, 60)
    targets = {name: 2.0 if n == 2 else 0.5 + 0.25 * (k % 9) for k, name in enumerate(names)}
    values = blend_values([os.path.join(d, x) for x in names], [1.0] * n, 32, 8)
    return os.path.dirname(launch(os.path.join(d, "run"), values, EpochBlock(epochs=targets, separate_epochs=True)))


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Rendered]:
    chromium = _chromium()
    out = {}
    for n in SIZES:
        d = str(tmp_path_factory.mktemp(f"sources{n}"))
        page = os.path.join(d, "page.html")
        assert main(["report", _run_log(d, n), "--html", page, "--title", f"{n} sources"]) == 0
        html = open(page, encoding="utf-8").read()
        probed = os.path.join(d, "probed.html")
        with open(probed, "w", encoding="utf-8") as f:
            f.write(html.replace("</body>", PROBE + "</body>"))
        png = os.path.join(d, f"report-{n}.png")
        plot = re.search(r'<svg width="\d+" height="(\d+)"', html)
        assert plot, "no plot on the page"
        height = int(plot.group(1)) + 300  # the heading and notes above the plot: the whole plot is on the screen
        size = f"--window-size={WIDTH},{height}"
        dom = _browse(chromium, "--dump-dom", f"--screenshot={png}", size, f"file://{probed}")
        found = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
        assert found, dom[-2000:]
        probe = json.loads(unescape(found.group(1)))
        assert probe["svg"]["bottom"] <= height, (probe["svg"], height)
        out[n] = Rendered(_names(n), html, probe, read_png(png), png)
    keep = os.environ.get("NEOX_EPOCH_SCREENSHOTS")
    for n in (22, 64) if keep else ():
        shutil.copy(out[n].png, os.path.join(str(keep), f"report-{n}.png"))
    return out


def _rgb(hex_colour: str) -> np.ndarray:
    return np.array([int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)])


@pytest.mark.parametrize("n", SIZES)
def test_every_legend_entry_is_shown_inside_the_plot(pages: dict[int, Rendered], n: int) -> None:
    """One legend entry per source, in order, each text box (as Chromium laid it out) inside the SVG's viewBox
    and clear of every other entry: nothing cut off, nothing on top of another entry."""
    r = pages[n]
    legend = r.probe["legend"]
    assert [e["source"] for e in legend] == r.names
    assert all(e["text"].startswith(name) for e, name in zip(legend, r.names))
    assert r.html.count('<g class="legend"') == n
    vx, vy, vw, vh = r.probe["svg"]["viewbox"]
    for e in legend:
        x0, y0, x1, y1 = e["box"]
        assert vx <= x0 < x1 <= vx + vw and vy <= y0 < y1 <= vy + vh, e
    boxes = [e["box"] for e in legend]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (a, b)


@pytest.mark.parametrize("n", SIZES)
def test_each_source_has_its_own_colour(pages: dict[int, Rendered], n: int) -> None:
    """Different fills in the SVG, the curve drawn in its legend's colour, and on the screenshot each legend
    swatch's centre pixel is that colour: n different colours on the screen."""
    r = pages[n]
    legend = r.probe["legend"]
    fills = [e["fill"] for e in legend]
    assert len(set(fills)) == n
    strokes = {c["source"]: c["stroke"] for c in r.probe["curves"]}
    assert strokes == {e["source"]: e["fill"] for e in legend}
    seen = []
    for e in legend:
        x, y = e["swatch"]
        pixel = r.pixels[int(y), int(x)].astype(int)
        assert np.abs(pixel - _rgb(e["fill"])).max() <= 3, (e["source"], e["fill"], pixel)
        seen.append(tuple(pixel))
    assert len(set(seen)) == n


def _visible(r: Rendered, points: list[list[float]], colour: str) -> int:
    """How many of ``points`` have a pixel of ``colour`` (within 24 per channel) at most 1 px away."""
    want, hits = _rgb(colour), 0
    for x, y in points:
        xi, yi = int(round(x)), int(round(y))
        near = r.pixels[yi - 1 : yi + 2, xi - 1 : xi + 2].astype(int).reshape(-1, 3)
        hits += bool((np.abs(near - want).max(axis=1) <= 24).any())
    return hits


@pytest.mark.parametrize("n", SIZES)
def test_coinciding_curves_are_all_visible(pages: dict[int, Rendered], n: int) -> None:
    """Curves drawn at the same place (2 sources: one corpus under two names, equal targets: equal passes at
    every record) are named in the legend ("= same as" the first) and each is visible along the line on the
    screenshot; curves Chromium draws through the same pixels are always so named."""
    r = pages[n]
    curves = {c["source"]: c for c in r.probe["curves"]}
    noted: dict[str, list[str]] = {}
    for e in r.probe["legend"]:
        same = re.search(r" = same as (\S+)$", e["text"])
        noted.setdefault(same.group(1) if same else e["source"], []).append(e["source"])
    shared = {first: group for first, group in noted.items() if len(group) > 1}
    if n == 2:
        assert shared == {"Pile-CC": ["Pile-CC", "USPTO_Backgrounds"]}
    for first, group in shared.items():
        line = curves[first]["points"]
        for name in group:
            hits = _visible(r, line, curves[name]["stroke"])
            assert hits >= len(line) // (4 * len(group)), (name, hits)
    same_pixels: dict[tuple[tuple[int, int], ...], list[str]] = {}
    for c in r.probe["curves"]:
        same_pixels.setdefault(tuple((round(x), round(y)) for x, y in c["points"]), []).append(c["source"])
    for names in same_pixels.values():
        assert len(names) == 1 or names in shared.values(), names
