"""Data stages on GPT-NeoX's own training loop (CPU, deepspeed launcher, 2 gloo ranks): proven from what the
model trained on.

Issue 35's config: three sources over three stages (warm: src0 0.5, src1 0.5; main: src0 0.5, src2 1; anneal:
src1 1.5, src2 1), totals whole passes (src0 1, src1 2, src2 2), on tiny corpora of 196, 116 and 154 samples per
pass (global batch 4; every stage a whole number of batches). The first launch stops inside the middle stage after
a checkpoint; the second resumes it to the end (also saving at the main / anneal boundary); a third resumes the
same checkpoint on a rewritten corpus src2 and must stop before its first step with the fingerprint line; a fourth
resumes the checkpoint of the main / anneal boundary with the last stage changed and trains exactly the new stage.
The recorder (tests/helpers/neox_cpu/batch_recorder.py) keeps the tokens of every trained sample; each is mapped to its
position in its source's own order through the index files the hooks wrote (``train_k-stages``) and the real
.bin/.idx. Every expected number is computed from the config, the corpora's .idx headers or the recorded draws.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

import frameworks
import numpy as np
import pytest
from test_neox_training import SEQ, Run, _config, _launch, _new_run, _ok

from neox_epoch.formats.corpus import random_documents, write_corpus
from neox_epoch.formats.idx import read_header, sizes_memmap, tokens_memmap
from neox_epoch.semantics.stage_order import draw_order, samples_per_pass

pytestmark = pytest.mark.neox

#: samples per pass of each source the corpora are cut to: (T - 1) // 128 with T = N * 128 + 1 + 60 tokens
PER_PASS = {"src0": 196, "src1": 116, "src2": 154}
NAMES = list(PER_PASS)
STAGES: list[dict[str, Any]] = [
    {"name": "warm", "passes": {"src0": 0.5, "src1": 0.5}},
    {"name": "main", "passes": {"src0": 0.5, "src2": 1}},
    {"name": "anneal", "passes": {"src1": 1.5, "src2": 1}},
]
BATCH = 4
#: the last stage changed for the fourth launch (resumed at the main / anneal boundary)
CHANGED_THREE: dict[str, Any] = {"name": "anneal", "passes": {"src1": 0.5, "src2": 1}}


def _stage_ends(stages: list[dict[str, Any]], per_pass: dict[str, int]) -> list[int]:
    """Each stage's last iteration: its wanted samples (whole here) in whole batches, cumulated."""
    ends, at = [], 0
    for st in stages:
        at += int(sum(p * per_pass[s] for s, p in st["passes"].items())) // BATCH
        ends.append(at)
    return ends


ENDS = _stage_ends(STAGES, PER_PASS)
TRAIN_ITERS = ENDS[-1]
#: the first launch stops here, inside the middle stage
STOP = (ENDS[0] + ENDS[1]) // 2
#: the main / anneal boundary: the resumed launch also saves there; a fourth launch resumes it with anneal changed
BOUNDARY = ENDS[1]


def _sized_corpus(prefix: str, seed: int, per_pass: int, tail: int = 60) -> None:
    """Random documents (20..180 tokens, vocabulary 500) cut to ``per_pass * 128 + 1 + tail`` tokens."""
    total = per_pass * SEQ + 1 + tail
    docs, have = [], 0
    for d in random_documents(seed, 10 * total // 20 + 10, 20, 180, vocab=500):
        docs.append(d[: total - have])
        have += len(docs[-1])
        if have == total:
            break
    write_corpus(prefix, docs, dtype="uint16")


def _order_texts(prefix: str, name: str) -> list[bytes]:
    """The seq_length + 1 tokens at each position of the source's own order (the hooks' staged index files)."""
    (stem,) = {f[: -len("_doc_idx.npy")] for f in _glob(f"{prefix}_{name}-stages_indexmap_*_doc_idx.npy")}
    header = read_header(prefix)
    sizes = np.asarray(sizes_memmap(header), dtype=np.int64)
    tokens = np.asarray(tokens_memmap(header), dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    doc_idx = np.load(stem + "_doc_idx.npy").astype(np.int64)
    rows = np.load(stem + "_sample_idx.npy").astype(np.int64)
    shuffle = np.load(stem + "_shuffle_idx.npy").astype(np.int64)[:-1]
    lens = sizes[doc_idx]
    stream = np.repeat(offsets[doc_idx] - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens) + np.arange(
        int(lens.sum())
    )
    starts = np.concatenate([[0], np.cumsum(lens)])[rows[:, 0]] + rows[:, 1]
    return [tokens[stream[starts[r] : starts[r + 1] + 1]].tobytes() for r in shuffle]


def _glob(pattern: str) -> list[str]:
    import glob

    return sorted(glob.glob(pattern))


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, Any]:
    run = _new_run(tmp_path_factory, "stages")
    for k, (name, n) in enumerate(PER_PASS.items()):
        _sized_corpus(run.path("data", name), 21 + k, n)
    block = {"stages": STAGES, "max_passes": 2}
    cfg = _config(run.root, NAMES, block, checkpoint_factor=STOP)
    _ok(_launch(run, {**cfg, "exit_interval": STOP}, "first", frameworks.neox_dir()))
    shutil.copytree(run.path("ckpt"), run.path("ckpt-at-stop"))
    _ok(_launch(run, {**cfg, "extra_save_iters": [BOUNDARY]}, "resumed", frameworks.neox_dir()))
    # the same checkpoint (inside the middle stage) resumed on a rewritten corpus src2 (src0 and src1 unchanged)
    os.makedirs(run.path("data2"))
    for name in NAMES[:2]:
        for ext in (".bin", ".idx"):
            shutil.copy(run.path("data", name + ext), run.path("data2", name + ext))
    _sized_corpus(run.path("data2", "src2"), 99, PER_PASS["src2"], tail=70)  # other documents, 10 more tokens
    changed = {
        **cfg,
        "train_data_paths": [run.path("data2", n) for n in NAMES],
        "load": run.path("ckpt-at-stop"),
        "save": run.path("ckpt-changed"),
    }
    rc = _launch(run, changed, "changed", frameworks.neox_dir())
    # the checkpoint saved exactly at the main / anneal boundary resumed with a changed anneal stage, on copies of
    # the corpora (its index files apart) with its own logs: the later stage may change
    os.makedirs(run.path("data3"))
    for name in NAMES:
        for ext in (".bin", ".idx"):
            shutil.copy(run.path("data", name + ext), run.path("data3", name + ext))
    later = [*STAGES[:2], CHANGED_THREE]
    tag = f"global_step{BOUNDARY}"  # NeoX loads the newest tag its load directory's "latest" names
    shutil.copytree(run.path("ckpt", tag), run.path("ckpt-at-boundary", tag))
    with open(run.path("ckpt-at-boundary", "latest"), "w", encoding="utf-8") as f:
        f.write(tag)
    boundary = {
        **cfg,
        "train_data_paths": [run.path("data3", n) for n in NAMES],
        "load": run.path("ckpt-at-boundary"),
        "save": run.path("ckpt-boundary"),
        "override_lr_scheduler": True,
        "tensorboard_dir": run.path("tb-boundary"),
        "neox_epoch": {**cfg["neox_epoch"], "stages": later, "log_dir": run.path("logs", "boundary")},
    }
    _ok(_launch(run, boundary, "boundary", frameworks.neox_dir()))
    return run, rc


def _real_per_pass(run: Run, folder: str = "data") -> dict[str, int]:
    """Samples per pass of each source from its real .idx: (tokens - 1) // seq_length."""
    out = {}
    for name in NAMES:
        header = read_header(run.path(folder, name))
        out[name] = samples_per_pass(int(np.sum(np.asarray(sizes_memmap(header), dtype=np.int64))), SEQ)
    return out


def _config_draws(stages: list[dict[str, Any]], per_pass: dict[str, int]) -> list[dict[str, tuple[int, int]]]:
    """Per stage and source (draws, start) the config asks: passes x samples per pass, each source continuing where
    its earlier stages left it (whole samples and whole batches in this config)."""
    drawn = dict.fromkeys(per_pass, 0)
    out = []
    for st in stages:
        row = {}
        for s, p in st["passes"].items():
            row[s] = (round(p * per_pass[s]), drawn[s])
            drawn[s] += row[s][0]
        out.append(row)
    return out


def _stage_of(iteration: int, ends: list[int]) -> int:
    """1-based stage that trains ``iteration`` (1-based)."""
    return next(k + 1 for k, end in enumerate(ends) if iteration <= end)


def _draws(run: Run, names: Any = tuple(NAMES)) -> tuple[dict[str, Any], np.ndarray, np.ndarray, np.ndarray]:
    """The plan's stages, and per recorded row (first two launches): iteration, source index, position in its order."""
    stages = next(r for r in run.jsonl() if r["event"] == "plan")["stages"]
    rec = run.recorded()
    keep = rec.launches < 2
    iterations, texts = rec.iterations[keep], rec.texts[keep]
    lookup: dict[bytes, list[tuple[int, int]]] = {}
    for k, name in enumerate(names):
        for pos, text in enumerate(_order_texts(run.path("data", name), f"train_{k}")):
            lookup.setdefault(text, []).append((k, pos))
    order = np.argsort(iterations, kind="stable")
    source = np.full(len(iterations), -1)
    position = np.full(len(iterations), -1)
    used: dict[bytes, int] = {}
    for row in order:  # a text found twice (the same span in two passes) is taken in order
        key = texts[row].tobytes()
        hits = lookup.get(key)
        assert hits, f"recorded row of iteration {int(iterations[row])} is at no position of any source's order"
        source[row], position[row] = hits[used.get(key, 0)]
        used[key] = used.get(key, 0) + 1
    return stages, iterations, source, position


def test_stages_plan_is_whole_batches_and_exact(staged: tuple[Run, Any]) -> None:
    run, _ = staged
    per_pass = _real_per_pass(run)
    assert per_pass == PER_PASS  # the corpora are cut as intended
    plan = next(r for r in run.jsonl() if r["event"] == "plan")
    st = plan["stages"]
    assert (plan["train_iters"], plan["train_batch_size"]) == (TRAIN_ITERS, BATCH)
    assert st["boundaries"] == ENDS[:-1] and st["samples_per_pass"] == per_pass
    assert STOP > ENDS[0] and STOP < ENDS[1]  # the first launch stops inside the middle stage
    assert [(s["name"], s["first_iteration"], s["end_iteration"]) for s in st["stages"]] == [
        (c["name"], first, end) for c, first, end in zip(STAGES, [0, *ENDS[:-1]], ENDS)
    ]
    want = _config_draws(STAGES, per_pass)
    assert [{n: (d["draws"], d["start"]) for n, d in s["draws"].items()} for s in st["stages"]] == want
    totals = {n: sum(row.get(n, (0, 0))[0] for row in want) for n in NAMES}
    assert st["total_draws"] == totals
    # totals whole passes (1, 2, 2): the passes built are exactly those
    passes = {n: sum(c["passes"].get(n, 0) for c in STAGES) for n in NAMES}
    assert st["cumulative_passes"] == passes and all(float(p).is_integer() for p in passes.values())
    assert st["passes_built"] == {n: int(p) for n, p in passes.items()}
    assert all(s["notes"] == [] for s in st["stages"])  # every stage is whole batches: nothing inexact


def test_stages_each_source_trained_its_cumulative_targets_in_its_own_order(staged: tuple[Run, Any]) -> None:
    run, _ = staged
    stages, iterations, source, position = _draws(run)
    rec = run.recorded()
    per_pass = _real_per_pass(run)
    passes = {n: sum(c["passes"].get(n, 0) for c in STAGES) for n in NAMES}
    # every iteration trained once, BATCH samples, split at the checkpoint inside the middle stage
    assert np.bincount(iterations)[1:].tolist() == [BATCH] * TRAIN_ITERS
    assert sorted(set(rec.iterations[rec.launches == 0].tolist())) == list(range(1, STOP + 1))
    assert sorted(set(rec.iterations[rec.launches == 1].tolist())) == list(range(STOP + 1, TRAIN_ITERS + 1))
    for k, name in enumerate(NAMES):
        mine = np.sort(position[source == k])
        # each position of the source's order trained exactly once, and exactly its passes' worth: no token of it
        # trained more than its passes
        assert mine.tolist() == list(range(round(passes[name] * per_pass[name]))), name
        # every sample of a pass trained before any sample of the next pass
        its, pos = iterations[source == k], position[source == k]
        n = per_pass[name]
        for p in range(1, -(-len(pos) // n)):
            assert its[pos < p * n].max() <= its[pos >= p * n].min(), (name, p)
    # per iteration, exactly the planned draws (stage boundaries at the planned iterations)
    counts = [[s["draws"].get(n, {}).get("draws", 0) for n in NAMES] for s in stages["stages"]]
    starts = [[s["draws"].get(n, {}).get("start", 0) for n in NAMES] for s in stages["stages"]]
    which, where = draw_order(counts, starts)
    for i in range(1, TRAIN_ITERS + 1):
        got = sorted(zip(source[iterations == i].tolist(), position[iterations == i].tolist()))
        want = sorted(zip(which[(i - 1) * BATCH : i * BATCH].tolist(), where[(i - 1) * BATCH : i * BATCH].tolist()))
        assert got == want, i
    # each iteration draws only its stage's sources (and each stage draws all of them)
    stage = np.array([_stage_of(int(i), ENDS) for i in iterations])
    for k, c in enumerate(STAGES):
        own = sorted(NAMES.index(n) for n in c["passes"])
        assert sorted(set(source[stage == k + 1].tolist())) == own, c["name"]


def test_stages_counters_and_tensorboard_equal_the_recorded_draws(staged: tuple[Run, Any]) -> None:
    run, _ = staged
    _, iterations, source, position = _draws(run)
    per_pass = _real_per_pass(run)
    records = run.jsonl()
    cum = {
        name: np.cumsum(np.bincount(iterations[source == k], minlength=TRAIN_ITERS + 1)) for k, name in enumerate(NAMES)
    }
    counters = [r for r in records if r["event"] == "counters"]
    steps = [*range(10, TRAIN_ITERS, 10), TRAIN_ITERS]
    assert [r["iteration"] for r in counters] == steps
    for r in counters:
        for name in NAMES:
            assert r["sources"][name]["samples"] == int(cum[name][r["iteration"]]), (name, r["iteration"])
            assert r["sources"][name]["passes"] == round(int(cum[name][r["iteration"]]) / per_pass[name], 6)
    assert [(r["iteration"], r["stage_name"]) for r in counters] == [
        (i, STAGES[_stage_of(i, ENDS) - 1]["name"]) for i in steps
    ]
    starts = [(r["iteration"], r["stage"], r["name"]) for r in records if r["event"] == "stage_start"]
    # warm and main start in the first launch, anneal after the resume
    assert starts == [(first + 1, k + 1, c["name"]) for k, (c, first) in enumerate(zip(STAGES, [0, *ENDS[:-1]]))]
    events = [(r["source"], r["pass"], r["iteration"]) for r in records if r["event"] == "pass_start"]
    # each later pass starts at the iteration that trained its first position (from the recorded draws)
    recorded = [
        (name, p + 1, int(iterations[(source == k) & (position == p * per_pass[name])][0]))
        for k, name in enumerate(NAMES)
        for p in range(1, -(-int(np.sum(source == k)) // per_pass[name]))
    ]
    assert recorded and all(e in events for e in recorded), (recorded, events)
    final = [r for r in records if r["event"] == "final"][-1]
    assert {n: v["samples"] for n, v in final["sources"].items()} == {
        n: int(np.sum(source == k)) for k, n in enumerate(NAMES)
    }
    tb = run.tensorboard()
    for name in NAMES:
        assert [(s, int(v)) for s, v in tb[f"neox_epoch/samples/{name}"]] == [(i, int(cum[name][i])) for i in steps]
    assert [(s, int(v)) for s, v in tb["neox_epoch/stage"]] == [(i, _stage_of(i, ENDS)) for i in steps]
    assert tb["neox_epoch/stage_start"] == [[first + 1, float(k + 1)] for k, first in enumerate([0, *ENDS[:-1]])]


def test_stages_resume_on_a_changed_corpus_stops_with_the_fingerprint_line(staged: tuple[Run, Any]) -> None:
    run, rc = staged
    out = rc.stdout + rc.stderr
    assert rc.returncode != 0
    lines = [ln for ln in out.splitlines() if "the data changed since the checkpoint" in ln]
    assert lines, out[-4000:]
    tag = f"(global_step{STOP})"
    assert "source 'src2' tokens" in lines[0] and tag in lines[0] and "allow_data_change" in lines[0]
    assert "source 'src0'" not in lines[0] and "source 'src1'" not in lines[0]
    rec = run.recorded()
    assert int(np.sum(rec.launches == 2)) == 0  # stopped before its first step
    with open(run.path("ckpt", f"global_step{STOP}", "neox_epoch_state.json"), encoding="utf-8") as f:
        state = json.load(f)
    assert [s["name"] for s in state["fingerprint"]["sources"]] == NAMES
    assert state["stage_boundaries"] == [0, *ENDS[:-1]]


def test_resume_check_prints_the_fingerprint_comparison(staged: tuple[Run, Any]) -> None:
    import subprocess
    import sys

    run, _ = staged
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))}

    def check(config: str) -> dict[str, Any]:
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "neox_epoch.cli",
                "resume-check",
                run.path("ckpt-at-stop"),
                run.path(config),
                "--json",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert r.returncode in (0, 1), r.stderr
        return dict(json.loads(r.stdout))

    same = check("resumed.yml")  # the config the resumed launch used: nothing changed
    assert same["findings"] == [] and "data fingerprint: unchanged since the checkpoint" in same["notes"]
    changed = check("changed.yml")
    (finding,) = [f for f in changed["findings"] if f.startswith("data-changed:")]
    before, after = (
        int(np.sum(sizes_memmap(read_header(run.path(d, "src2"))), dtype=np.int64)) for d in ("data", "data2")
    )
    assert f"source 'src2' tokens {before:,d} -> {after:,d}" in finding and "source 'src0'" not in finding


def test_report_page_shows_the_stages(staged: tuple[Run, Any]) -> None:
    import subprocess
    import sys

    run, _ = staged
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))}
    html = run.path("report.html")
    r = subprocess.run(
        [sys.executable, "-m", "neox_epoch.cli", "report", run.path("logs", "epoch"), "--html", html, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    stages = json.loads(r.stdout)["stages"]
    assert stages["boundaries"] == ENDS[:-1]
    firsts = [0, *ENDS[:-1]]
    assert stages["started"] == [
        {"iteration": first + 1, "stage": k + 1, "name": c["name"]} for k, (c, first) in enumerate(zip(STAGES, firsts))
    ]
    with open(html, encoding="utf-8") as f:
        page = f.read()
    last = f"<td class=l>{STAGES[-1]['name']}</td><td>{BOUNDARY + 1}..{TRAIN_ITERS}</td><td>{BOUNDARY + 1}</td>"
    assert "<h2>Stages</h2>" in page and last in page


def test_resume_exactly_at_a_boundary_with_a_changed_later_stage(staged: tuple[Run, Any]) -> None:
    """The checkpoint of the main / anneal boundary (warm and main done, anneal not started) resumed with anneal
    changed (src1 0.5, src2 1): the hooks note the change and keep the started stages; the run ends after the new
    anneal's whole batches. Its recorded rows are exactly the new anneal's draws, iteration by iteration: each
    source's positions continuing where main left it (src2's pass 2), none of src0."""
    run, _ = staged
    k = run.launches.index("boundary")
    out = run.outputs[k]
    assert (
        f"the stages after stage 2 changed since the checkpoint (iteration {BOUNDARY}); the 2 started stage(s) are "
        "unchanged, so the resume stays exact" in out
    )
    with open(run.path("logs", "boundary", "neox_epoch.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    later = [*STAGES[:2], CHANGED_THREE]
    per_pass = _real_per_pass(run, "data3")
    ends = _stage_ends(later, per_pass)
    want = _config_draws(later, per_pass)
    plan = next(r for r in records if r["event"] == "plan")
    st = plan["stages"]
    assert plan["train_iters"] == ends[-1] and st["boundaries"] == ends[:-1] == ENDS[:-1]
    assert [{n: (d["draws"], d["start"]) for n, d in s["draws"].items()} for s in st["stages"]] == want
    rec = run.recorded()
    mine = rec.launches == k
    iterations, texts = rec.iterations[mine], rec.texts[mine]
    assert np.bincount(iterations, minlength=ends[-1] + 1)[BOUNDARY + 1 :].tolist() == [BATCH] * (ends[-1] - BOUNDARY)
    assert iterations.min() == BOUNDARY + 1
    lookup: dict[bytes, list[tuple[int, int]]] = {}
    for j, name in enumerate(NAMES):
        for pos, text in enumerate(_order_texts(run.path("data3", name), f"train_{j}")):
            lookup.setdefault(text, []).append((j, pos))
    # a text found twice (the same span in two passes) is taken in training order: first the history this resume
    # continues (the first two launches' iterations up to the boundary), then its own rows
    used: dict[bytes, int] = {}
    before = (rec.launches < 2) & (rec.iterations <= BOUNDARY)
    for row in np.argsort(rec.iterations[before], kind="stable"):
        key = rec.texts[before][row].tobytes()
        used[key] = used.get(key, 0) + 1
    rows = []
    for row in np.argsort(iterations, kind="stable"):
        key = texts[row].tobytes()
        hits = lookup.get(key)
        assert hits, f"recorded row of iteration {int(iterations[row])} is at no position of any source's order"
        rows.append((int(iterations[row]), *hits[used.get(key, 0)]))
        used[key] = used.get(key, 0) + 1
    for j, name in enumerate(NAMES):
        draws, start = want[-1].get(name, (0, 0))
        assert sorted(p for _, s, p in rows if s == j) == list(range(start, start + draws)), name
    counts = [[want[-1].get(n, (0, 0))[0] for n in NAMES]]
    which, where = draw_order(counts, [[want[-1].get(n, (0, 0))[1] for n in NAMES]])
    for i in range(BOUNDARY + 1, ends[-1] + 1):
        got = sorted((s, p) for it, s, p in rows if it == i)
        j = i - BOUNDARY - 1
        assert got == sorted(
            zip(which[j * BATCH : (j + 1) * BATCH].tolist(), where[j * BATCH : (j + 1) * BATCH].tolist())
        ), i
    final = [r for r in records if r["event"] == "final"][-1]
    totals = {n: sum(row.get(n, (0, 0))[0] for row in want) for n in NAMES}
    assert final["iteration"] == ends[-1] and {n: v["samples"] for n, v in final["sources"].items()} == totals
