"""``neox-epoch report``: the run log the hooks write, read back into exact numbers and drawn as one HTML page.

Every log here is written by the hooks' own writers (tests/helpers/run_logs.py: after_build's "plan" event, then
PassCounters start/step/final) over plans the real planner made for real .bin/.idx corpora, so the parser is
tested on lines the plugin can produce, and each expected number is derived from the plan beside it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any

import pytest
from run_logs import blend_values, launch

from neox_epoch.cli import main
from neox_epoch.formats.corpus import write_random_corpus
from neox_epoch.formats.neox_config import EpochBlock
from neox_epoch.run_report import exposure, log, series, svg
from neox_epoch.run_report.cli import build

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
CACHE = os.path.join(HERE, "fixtures", "neox", "neox_cache")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The run logs: one source, a three-source blend resumed with a doubled batch, an early stop."""
    d = tmp_path_factory.mktemp("runs")
    for i, (name, docs) in enumerate([("web", 120), ("code", 40), ("books", 60)]):
        write_random_corpus(str(d / name), i + 1, docs, 5, 200)
    web, code, books = (str(d / n) for n in ("web", "code", "books"))
    out = {}
    # one source, data_path + split (a direct dataset: samples = iteration x batch), 2 passes, epochs separated
    one = {
        "data_path": web,
        "split": "98,1,1",
        "seq_length": 32,
        "train_batch_size": 4,
        "eval_interval": 1000,
        "eval_iters": 1,
    }
    out["one"] = os.path.dirname(launch(str(d / "one"), one, EpochBlock(epochs=2, separate_epochs=True), 0, None, 10))
    # three sources, exact epochs; stopped at iteration 30 with batch 8, resumed at 30 with batch 16
    blk = EpochBlock(epochs={"web": 1, "code": 2, "books": 1.5}, separate_epochs=True)
    launch(str(d / "blend"), blend_values([web, code, books], [1, 1, 1], 32, 8), blk, 0, 30, 5)
    out["blend"] = os.path.dirname(
        launch(str(d / "blend"), blend_values([web, code, books], [1, 1, 1], 32, 16), blk, 30, None, 5)
    )
    # two sources, 1.5 passes over epochs shuffled together, stopped early at 100 (exit_interval)
    out["stop"] = os.path.dirname(
        launch(str(d / "stop"), blend_values([web, code], [1.0, 1.0], 32, 4), EpochBlock(epochs=1.5), 0, 100, 10)
    )
    return out


def _json(path: str, *more: str) -> dict[str, Any]:
    res = subprocess.run(
        [sys.executable, "-m", "neox_epoch.cli", "report", path, "--json", *more],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(res.stdout)


def _plan(path: str, k: int = 0) -> dict[str, Any]:
    plans = [json.loads(x) for x in open(os.path.join(path, log.JSONL_NAME), encoding="utf-8")]
    return [p for p in plans if p["event"] == "plan"][k]


# ---------------------------------------------------------------------------------------------------------
# exact numbers


def test_one_source_series(runs: dict[str, str]) -> None:
    """A direct dataset draws iteration x batch samples; passes = samples / samples_per_epoch; pass 2 starts in the
    iteration holding the pass's first sample (sample // batch + 1)."""
    plan = _plan(runs["one"])
    (src,) = plan["sources"]
    assert (plan["train_iters"], plan["train_batch_size"], src["samples_per_epoch"], src["tokens"]) == (
        163,
        4,
        327,
        10482,
    )
    s, hists, notes, rows = build(runs["one"])
    (web,) = s.sources
    assert [p.iteration for p in web.points] == [0, *range(10, 161, 10), 163]
    assert all(p.samples == 4 * p.iteration for p in web.points)  # a direct dataset: iteration x train_batch_size
    assert all(p.passes == round(p.samples / 327, 6) for p in web.points)
    assert [(b.iteration, b.pass_number, b.sample) for b in web.boundaries] == [(83, 2, 328)]
    assert 328 // 4 + 1 == 83  # the pass's first sample (0-based 328) is drawn in iteration 83
    assert (s.complete, s.last_iteration, s.resumes, s.stops) == (True, 163, (), ())
    assert rows[0].arithmetic() == "passes = samples / samples_per_epoch = 652 / 327 = 1.993884"
    assert rows[0].input_tokens == 652 * 32
    # 652 = 1 x 327 + 325: one whole pass, 325/327 of the second; 10482 x 2/327 = 64.1 tokens seen once
    (h,) = hists
    assert (h.method, h.tokens, notes) == (exposure.ESTIMATED, ((0, 0), (1, 64), (2, 10418)), [])


def test_blend_resumed_with_a_doubled_batch(runs: dict[str, str]) -> None:
    """Launch 1 stops at 30 with batch 8, launch 2 resumes at 30 with batch 16: the resume is marked with what
    changed (from the two plan events), and the counters' jump at it is named (the resumed counters count
    iteration x 16 from 0: 480 samples at iteration 30 where 240 were drawn)."""
    s, hists, _, rows = build(runs["blend"])
    assert [(r.start, r.end, r.train_iters, r.train_batch_size, r.status) for r in s.launches] == [
        (0, 30, 111, 8, "stopped early"),
        (30, 55, 55, 16, "complete"),
    ]
    (r,) = s.resumes
    assert (r.launch, r.iteration, r.changes_from, r.previous_iteration) == (2, 30, "plans", 30)
    assert [(c.key, c.old, c.new) for c in r.changes] == [
        ("train_batch_size", 8, 16),
        ("train_iters", 111, 55),
        ("weights", (334.0, 231.0, 323.0), (334.0, 231.0, 315.0)),
    ]  # books' exact target moves with the batch
    assert r.label().startswith("resume @ 30: train_batch_size 8 \u2192 16, train_iters 111 \u2192 55")
    assert [(j.source, j.before, j.after) for j in r.jumps] == [("web", 90, 182), ("code", 63, 126), ("books", 87, 172)]
    assert sum(j.before for j in r.jumps) == 30 * 8 and sum(j.after for j in r.jumps) == 30 * 16
    assert any("code: pass 2 began inside that jump" in n for n in r.notes())
    assert [(x.launch, x.iteration, x.train_iters, x.kind) for x in s.stops] == [(1, 30, 111, "stopped early")]
    by = {x.name: x for x in s.sources}
    assert [(b.launch, b.iteration, b.pass_number, b.sample) for b in by["books"].boundaries] == [(2, 39, 2, 608)]
    assert 608 // 16 + 1 == 39  # blend sample 608 is in iteration 39 of batch 16
    assert [p.samples for p in by["web"].points if p.iteration == 30] == [90, 182]  # both launches' records
    assert [x.boundary_text() for x in rows] == ["-", "pass 2 inside the jump at the resume @ 30", "pass 2 @ 39"]
    assert [(x.source, x.samples, x.samples_per_epoch, round(x.passes, 6), x.planned_passes) for x in rows] == [
        ("web", 334, 335, 0.997015, 1.0),
        ("code", 231, 116, 1.991379, 2.0),
        ("books", 315, 216, 1.458333, 1.5),
    ]
    # separated epochs: books 315 = 216 + 99 -> 99/216 of its 6923 tokens seen twice (3173.0), the rest once
    assert {h.source: h.tokens for h in hists}["books"] == ((0, 0), (1, 3750), (2, 3173))


def test_resume_changed_record_is_preferred(runs: dict[str, str], tmp_path: Any) -> None:
    """The resume event's optional "changed" {key: [old, new]} (added to the hooks' resume record for issue 13) is
    shown as written, with consumed_samples; here the real record gets the field the new writer adds."""
    lines = open(os.path.join(runs["blend"], log.JSONL_NAME), encoding="utf-8").read().splitlines()
    out = []
    for raw in lines:
        obj = json.loads(raw)
        if obj["event"] == "resume":
            obj.update(changed={"train_batch_size": [8, 16]}, consumed_samples=240)
        out.append(json.dumps(obj))
    f = tmp_path / "x.jsonl"
    f.write_text("\n".join(out) + "\n")
    (r,) = build(str(f))[0].resumes
    assert (r.label(), r.changes_from, r.consumed_samples) == (
        "resume @ 30: train_batch_size 8 \u2192 16",
        "record",
        240,
    )


def test_early_stop(runs: dict[str, str]) -> None:
    """final complete=false at 100 of 169: a stop mark; epochs shuffled together: Binomial(2, drawn / built)."""
    s, hists, _, rows = build(runs["stop"])
    assert (s.complete, s.last_iteration, s.train_iters) == (False, 100, 169)
    assert [x.label() for x in s.stops] == ["stopped early @ 100 of 169"]
    assert [(x.source, x.samples) for x in rows] == [("web", 297), ("code", 103)]
    assert sum(x.samples for x in rows) == 100 * 4
    plan = {p["name"]: p for p in _plan(runs["stop"])["sources"]}
    assert (plan["web"]["epochs_built"], plan["web"]["samples_built"], plan["web"]["separate_epochs"]) == (
        2,
        671,
        False,
    )
    h = {x.source: x for x in hists}["web"]
    p = 297 / 671
    assert h.tokens == ((0, 3339), (1, 5303), (2, 2106))
    assert abs(h.tokens[0][1] - 10748 * (1 - p) ** 2) < 1 and abs(h.tokens[2][1] - 10748 * p * p) < 1


def test_rollback_and_missing_final(runs: dict[str, str], tmp_path: Any) -> None:
    """A launch resumed from an earlier checkpoint than the previous one reached trains those iterations again;
    a launch whose final record is missing (killed) is marked as such at its last counters."""
    one = {
        "data_path": os.path.join(os.path.dirname(runs["one"]), "web"),
        "split": "98,1,1",
        "seq_length": 32,
        "train_batch_size": 4,
        "eval_interval": 1000,
        "eval_iters": 1,
    }
    blk = EpochBlock(epochs=2, separate_epochs=True)
    launch(str(tmp_path), one, blk, 0, 60, 10)
    path = launch(str(tmp_path), one, blk, 50, None, 10)
    s = build(path)[0]
    (r,) = s.resumes
    assert (r.iteration, r.previous_iteration, r.changes, r.jumps) == (50, 60, (), ())
    assert r.label() == "resume @ 50: nothing changed"
    assert "iterations 51..60 are trained again" in r.notes()[0]
    restarted = launch(str(tmp_path / "again"), one, blk, 0, 40, 10)
    launch(str(tmp_path / "again"), {**one, "seq_length": 64}, blk, 0, None, 10)
    (r,) = build(restarted)[0].resumes  # a second launch from scratch, with a longer sequence
    assert r.restart and r.label().startswith("restart from 0: train_iters 163 → ")
    assert ("seq_length", 32, 64) in [(c.key, c.old, c.new) for c in r.changes]
    assert "iterations 1..40 are trained again" in r.notes()[0]
    lines = open(path, encoding="utf-8").read().splitlines()
    killed = tmp_path / "killed.jsonl"
    cut = max(k for k, x in enumerate(lines) if json.loads(x).get("iteration") == 120)
    killed.write_text("\n".join(lines[: cut + 1]) + "\n")  # killed after iteration 120's record: no final
    s = build(str(killed))[0]
    assert [x.label() for x in s.stops] == ["stopped early @ 60 of 163", "no final record after 120 (of 163)"]
    assert [x.status for x in s.launches] == ["stopped early", "no final record"]
    assert (s.complete, s.last_iteration) == (False, 120)


@pytest.mark.skipif(not os.path.isdir(CACHE), reason="tests/fixtures/neox/neox_cache missing")
def test_audit_histogram_replaces_the_estimate(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """NeoX's headline case (one source, stock 1.005: 2 epochs built and shuffled together, 2304 of 4621 samples
    drawn): the audit's exact histogram from the real NeoX cache replaces the counters' estimate; the estimate's
    unseen tokens equal the planner's tokens_unseen (same model), the audit's are NeoX's own (golden: 37031)."""
    prefix = os.path.join(CACHE, "corpus_a")
    path = launch(
        str(tmp_path / "run"),
        blend_values([prefix], [1.0], 64, 8, train_iters=288, seed=1234),
        EpochBlock(blend_buffer=1.005),
        0,
        None,
        50,
    )
    files = [
        os.path.join(CACHE, f"corpus_a_train_0_indexmap_2316ns_64sl_1234s_packedpi_ac_{r}_idx.npy")
        for r in ("doc", "sample", "shuffle")
    ]
    capsys.readouterr()
    assert main(["audit", *files, "--consumed", "2304", "--json"]) == 0
    audit = tmp_path / "audit.json"
    audit.write_text(capsys.readouterr().out)
    est = _json(os.path.dirname(path))["exposure"]["sources"]["corpus_a"]
    assert est["method"] == exposure.ESTIMATED
    assert est["tokens"] == {"0": 37184, "1": 73951, "2": 36768}
    assert _plan(os.path.dirname(path))["sources"][0]["tokens_unseen"] == 37184
    exact = _json(path, "--audit", str(audit))["exposure"]
    assert exact["sources"]["corpus_a"]["method"] == exposure.AUDIT
    assert exact["sources"]["corpus_a"]["tokens"] == {"0": 37031, "1": 74288, "2": 36584}
    assert exact["notes"] == []


# ---------------------------------------------------------------------------------------------------------
# inputs: several launches, a file, a directory of launch directories


def test_launch_directories_and_file_read_alike(runs: dict[str, str], tmp_path: Any) -> None:
    """The blend's two launches split into two launch directories read as the one file does."""
    lines = open(os.path.join(runs["blend"], log.JSONL_NAME), encoding="utf-8").read().splitlines(keepends=True)
    second = next(k for k, x in enumerate(lines) if k and json.loads(x)["event"] == "plan")
    for name, part in (("a", lines[:second]), ("b", lines[second:])):
        (tmp_path / name).mkdir()
        (tmp_path / name / log.JSONL_NAME).write_text("".join(part))
    whole, split = _json(runs["blend"]), _json(str(tmp_path))
    for key in ("sources", "resumes", "stops", "numbers", "exposure"):
        assert whole[key] == split[key], key
    assert whole == _json(os.path.join(runs["blend"], log.JSONL_NAME))


def test_json_keys_are_stable(runs: dict[str, str]) -> None:
    """The --json keys docs/report.md documents."""
    d = _json(runs["blend"])
    assert sorted(d) == [
        "complete",
        "exposure",
        "files",
        "last_iteration",
        "launches",
        "missing",
        "numbers",
        "resumes",
        "schema",
        "seq_length",
        "sources",
        "stops",
        "train_iters",
        "version",
    ]
    assert d["missing"] == []  # a log written whole lacks nothing
    assert sorted(d["launches"][0]) == [
        "file",
        "from_iteration",
        "launch",
        "line",
        "mode",
        "schema",
        "seq_length",
        "status",
        "to_iteration",
        "train_batch_size",
        "train_iters",
        "version",
    ]
    assert sorted(d["sources"][0]) == [
        "name",
        "pass_starts",
        "planned_passes",
        "points",
        "prefix",
        "samples_per_epoch",
        "tokens",
    ]
    assert sorted(d["sources"][0]["points"][0]) == ["iteration", "launch", "pass", "passes", "samples"]
    assert sorted(d["resumes"][0]) == [
        "changed",
        "changed_from",
        "consumed_samples",
        "iteration",
        "jumps",
        "label",
        "launch",
        "notes",
        "previous_iteration",
    ]
    assert sorted(d["stops"][0]) == ["iteration", "kind", "label", "launch", "train_iters"]
    assert sorted(d["numbers"][0]) == [
        "arithmetic",
        "input_tokens",
        "iteration",
        "passes",
        "planned_passes",
        "samples",
        "samples_per_epoch",
        "source",
        "tokens",
    ]
    assert sorted(d["exposure"]) == ["notes", "sources"]
    assert sorted(d["exposure"]["sources"]["web"]) == ["derivation", "method", "samples", "tokens"]


# ---------------------------------------------------------------------------------------------------------
# the page


def test_html_is_one_self_contained_file(runs: dict[str, str], tmp_path: Any) -> None:
    """No script, link, font or image is fetched: no http, no src=, no url(); an <svg> per plot (passes + one
    histogram per source); the pass boundary, the resume's label and the early stop are on the page."""
    out = tmp_path / "out" / "report.html"
    assert main(["report", runs["blend"], "--html", str(out)]) == 0
    assert os.listdir(out.parent) == ["report.html"]  # written atomically: no temporary file left
    html = out.read_text(encoding="utf-8")
    low = html.lower()
    for bad in ("http", "src=", "<script", "<link", "url(", "@import", "<img", "href="):
        assert bad not in low, bad
    assert html.count("<svg") == 1 + 3 and html.count("</svg>") == 4
    assert "pass 2 @ 39" in html  # books' pass boundary
    assert "resume @ 30: train_batch_size 8 \u2192 16" in html
    assert "stopped early @ 30 of 111" in html
    assert "estimated from counters" in html
    hists = re.findall(r'<svg width="300".*?</svg>', html)
    ticks = [re.findall(r'text-anchor="end"[^>]*>([\d.]+%)</text>', h) for h in hists]
    assert len(ticks) == 3 and ticks[0] == ticks[1] == ticks[2] and ticks[0][0] == "0%"  # one y-scale
    assert "passes = samples / samples_per_epoch = 315 / 216 = 1.458333" in html
    assert str(runs["blend"]) not in html  # files named by their directory and name only


def test_report_imports_no_framework() -> None:
    """The report stays in the light core: no torch, DeepSpeed or megatron import."""
    code = (
        "import sys, neox_epoch.cli as c; c.build_parser(['report']); import neox_epoch.run_report.cli; "
        "print(sorted(m for m in ('torch', 'deepspeed', 'megatron') if m in sys.modules))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.strip() == "[]"


# ---------------------------------------------------------------------------------------------------------
# bad input: exit 2, one line naming the file and line


def _fails(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    capsys.readouterr()
    assert main(["report", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("neox-epoch report: error: "), err
    return err


def test_bad_input_exits_2_with_one_line(
    runs: dict[str, str], tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    real = open(os.path.join(runs["blend"], log.JSONL_NAME), encoding="utf-8").read().splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(real[:3] + ['{"event": "counters", "iteration": 5'] + real[3:]) + "\n")
    assert re.search(r"bad\.jsonl:4: not JSON", _fails(capsys, str(bad), "--json"))
    cut = tmp_path / "cut.jsonl"  # a crash in the middle of the last write: read, and named as a missing record
    cut.write_text("\n".join(real) + "\n" + real[2][:40])
    capsys.readouterr()
    assert main(["report", str(cut), "--json"]) == 0
    (torn,) = json.loads(capsys.readouterr().out)["missing"]
    assert (torn["line"], torn["kind"], torn["records"]) == (len(real) + 1, "torn_line", 1)
    assert torn["label"].startswith(f"cut.jsonl:{len(real) + 1}: a record cut short by a crash")
    noplan = tmp_path / "noplan.jsonl"
    noplan.write_text("\n".join(x for x in real if json.loads(x)["event"] != "plan") + "\n")
    assert 'noplan.jsonl:1: a "counters" event before any "plan" event' in _fails(capsys, str(noplan), "--json")
    other = open(os.path.join(runs["one"], log.JSONL_NAME), encoding="utf-8").read().splitlines()
    mixed = tmp_path / "mixed.jsonl"  # another run's counters after this run's final, no plan between them
    mixed.write_text("\n".join(real + [x for x in other if json.loads(x)["event"] == "counters"][:1]) + "\n")
    assert f'mixed.jsonl:{len(real) + 1}: a "counters" event after this launch\'s "final"' in _fails(
        capsys, str(mixed), "--json"
    )
    field = tmp_path / "field.jsonl"
    obj = json.loads(real[1])
    obj["iteration"] = "5"
    field.write_text("\n".join([real[0], json.dumps(obj)]) + "\n")
    assert 'field.jsonl:2: counters: "iteration": expected an integer >= 0, found "5"' in _fails(
        capsys, str(field), "--json"
    )
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    assert 'no "plan" event' in _fails(capsys, str(empty), "--json")
    assert "no such file or directory" in _fails(capsys, str(tmp_path / "missing"), "--json")
    (tmp_path / "emptydir").mkdir()
    assert f"no {log.JSONL_NAME} in this directory" in _fails(capsys, str(tmp_path / "emptydir"), "--json")
    assert "nothing to write" in _fails(capsys, runs["one"])
    notaudit = tmp_path / "a.json"
    notaudit.write_text("[]")
    assert "not the output of neox-epoch audit --json" in _fails(
        capsys, runs["one"], "--json", "--audit", str(notaudit)
    )


def test_series_are_frozen(runs: dict[str, str]) -> None:
    """Parsed logs and series are immutable values."""
    run = log.read_run(runs["one"])
    with pytest.raises(AttributeError):
        run.launches[0].train_iters = 1  # type: ignore[misc]
    with pytest.raises(AttributeError):
        series.compute(run).sources[0].points[0].samples = 1  # type: ignore[misc]


def test_long_runs_keep_the_page_small() -> None:
    """A curve of 100,000 records is drawn with at most MAX_POINTS vertices, first and last kept."""
    pts = list(range(100_000))
    thinned = svg.thin(pts, svg.MAX_POINTS)
    assert len(thinned) == svg.MAX_POINTS and thinned[0] == 0 and thinned[-1] == 99_999
    assert thinned == sorted(set(thinned))
    assert svg.thin(pts[:10], svg.MAX_POINTS) == pts[:10]


def _lab(hex_colour: str) -> tuple[float, float, float]:
    """sRGB to CIELAB (D65)."""
    lin = [
        (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4)
        for c in (int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5))
    ]
    r, g, b = lin
    xyz = (
        (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047,
        0.2126 * r + 0.7152 * g + 0.0722 * b,
        (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883,
    )
    fx, fy, fz = (t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116 for t in xyz)
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def test_palette_has_64_colours_apart() -> None:
    """64 sources, 64 colours: the 8 Okabe-Ito first, no two closer than 19 CIELAB units, none near the white
    background; past 8 a curve also gets a dash pattern."""
    from neox_epoch.util import svg as draw

    cols = [draw.colour(k) for k in range(64)]
    assert cols[:8] == ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
    lab = [_lab(c) for c in cols]
    gaps = [sum((x - y) ** 2 for x, y in zip(a, b)) ** 0.5 for i, a in enumerate(lab) for b in lab[i + 1 :]]
    assert len(set(cols)) == 64 and min(gaps) >= 19
    assert min(sum((x - y) ** 2 for x, y in zip(a, _lab("#FFFFFF"))) ** 0.5 for a in lab) >= 19
    assert [draw.dash(k) for k in (0, 7, 8, 16, 24)] == ["", "", "9 3", "2 3", "9 3 2 3"]
