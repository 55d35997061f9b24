"""Data stages on GPT-NeoX's own training loop (CPU, deepspeed launcher, 2 gloo ranks): proven from what the
model trained on.

Three stages (1: a 1 pass; 2: a 0.5, b 1; 3: b 1, c 2) on tiny corpora cut so that every stage is a whole
number of global batches (a: 96 samples per pass, b: 64, c: 48; global batch 4): 24 + 28 + 40 = 92
iterations. The first launch stops at iteration 40 (in stage 2) after a checkpoint; the second resumes it to
the end (also saving at iteration 52, the stage 2 / stage 3 boundary); a third resumes the same checkpoint on a
changed corpus c and must stop before its first step with the fingerprint line; a fourth resumes the checkpoint
of iteration 52 with stage 3 changed (b 1, c 1) and trains exactly the new stage to iteration 80. The recorder (tests/helpers/neox_cpu/batch_recorder.py) keeps the tokens of every
trained sample; each is mapped to its position in its source's own order through the index files the
hooks wrote (``train_k-stages``).
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
from neox_epoch.semantics.stage_order import draw_order

pytestmark = pytest.mark.neox

#: samples per pass of each source: (T - 1) // 128 with T = N * 128 + 1 + 60 tokens
PER_PASS = {"a": 96, "b": 64, "c": 48}
STAGES = [
    {"name": "one", "passes": {"a": 1}},
    {"name": "two", "passes": {"a": 0.5, "b": 1}},
    {"name": "three", "passes": {"b": 1, "c": 2}},
]
STOP = 40
TRAIN_ITERS = 92
#: the stage 2 / stage 3 boundary: the resumed launch also saves there; a fourth launch resumes it with stage 3 changed
BOUNDARY = 52
CHANGED_THREE = {"name": "three", "passes": {"b": 1, "c": 1}}


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
        _sized_corpus(run.path("data", name), 11 + k, n)
    block = {"stages": STAGES, "max_passes": 2}
    cfg = _config(run.root, ["a", "b", "c"], block, checkpoint_factor=STOP)
    _ok(_launch(run, {**cfg, "exit_interval": STOP}, "first", frameworks.neox_dir()))
    shutil.copytree(run.path("ckpt"), run.path("ckpt-at-stop"))
    _ok(_launch(run, {**cfg, "extra_save_iters": [BOUNDARY]}, "resumed", frameworks.neox_dir()))
    # the same checkpoint resumed on a changed corpus c (a and b unchanged)
    os.makedirs(run.path("data2"))
    for name in "ab":
        for ext in (".bin", ".idx"):
            shutil.copy(run.path("data", name + ext), run.path("data2", name + ext))
    _sized_corpus(run.path("data2", "c"), 99, PER_PASS["c"], tail=70)  # other documents, 10 more tokens
    changed = {
        **cfg,
        "train_data_paths": [run.path("data2", n) for n in "abc"],
        "load": run.path("ckpt-at-stop"),
        "save": run.path("ckpt-changed"),
    }
    rc = _launch(run, changed, "changed", frameworks.neox_dir())
    # the checkpoint saved exactly at the stage 2 / stage 3 boundary resumed with a changed stage 3 (c 1 pass, not
    # 2), on copies of the corpora (its index files apart) with its own logs: the later stage may change
    os.makedirs(run.path("data3"))
    for name in "abc":
        for ext in (".bin", ".idx"):
            shutil.copy(run.path("data", name + ext), run.path("data3", name + ext))
    later = [*STAGES[:2], CHANGED_THREE]
    tag = f"global_step{BOUNDARY}"  # NeoX loads the newest tag its load directory's "latest" names
    shutil.copytree(run.path("ckpt", tag), run.path("ckpt-at-boundary", tag))
    with open(run.path("ckpt-at-boundary", "latest"), "w", encoding="utf-8") as f:
        f.write(tag)
    boundary = {
        **cfg,
        "train_data_paths": [run.path("data3", n) for n in "abc"],
        "load": run.path("ckpt-at-boundary"),
        "save": run.path("ckpt-boundary"),
        "override_lr_scheduler": True,
        "tensorboard_dir": run.path("tb-boundary"),
        "neox_epoch": {**cfg["neox_epoch"], "stages": later, "log_dir": run.path("logs", "boundary")},
    }
    _ok(_launch(run, boundary, "boundary", frameworks.neox_dir()))
    return run, rc


def _draws(run: Run, names: Any = "abc") -> tuple[dict[str, Any], np.ndarray, np.ndarray, np.ndarray]:
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
    plan = next(r for r in run.jsonl() if r["event"] == "plan")
    st = plan["stages"]
    assert (plan["train_iters"], plan["train_batch_size"]) == (TRAIN_ITERS, 4)
    assert st["boundaries"] == [24, 52] and st["samples_per_pass"] == PER_PASS
    assert [(s["name"], s["first_iteration"], s["end_iteration"]) for s in st["stages"]] == [
        ("one", 0, 24),
        ("two", 24, 52),
        ("three", 52, 92),
    ]
    assert [{n: (d["draws"], d["start"]) for n, d in s["draws"].items()} for s in st["stages"]] == [
        {"a": (96, 0)},
        {"a": (48, 96), "b": (64, 0)},
        {"b": (64, 64), "c": (96, 0)},
    ]
    assert st["total_draws"] == {"a": 144, "b": 128, "c": 96}
    assert st["cumulative_passes"] == {"a": 1.5, "b": 2.0, "c": 2.0}
    assert all(s["notes"] == [] for s in st["stages"])  # every stage is whole batches: nothing inexact


def test_stages_each_source_trained_its_cumulative_targets_in_its_own_order(staged: tuple[Run, Any]) -> None:
    run, _ = staged
    stages, iterations, source, position = _draws(run)
    rec = run.recorded()
    # every iteration trained once, 4 samples, split at the checkpoint (launch 0: 1..40, launch 1: 41..92)
    assert np.bincount(iterations)[1:].tolist() == [4] * TRAIN_ITERS
    assert sorted(set(rec.iterations[rec.launches == 0].tolist())) == list(range(1, STOP + 1))
    assert sorted(set(rec.iterations[rec.launches == 1].tolist())) == list(range(STOP + 1, TRAIN_ITERS + 1))
    for k, name in enumerate("abc"):
        mine = np.sort(position[source == k])
        total = stages["total_draws"][name]
        # each position of the source's order trained exactly once: exactly its cumulative target
        assert mine.tolist() == list(range(total)), name
        # every sample of a pass trained before any sample of the next pass
        its, pos = iterations[source == k], position[source == k]
        n = PER_PASS[name]
        for p in range(1, -(-total // n)):
            assert its[pos < p * n].max() <= its[pos >= p * n].min(), (name, p)
    # per iteration, exactly the planned draws (stage boundaries at the planned iterations)
    counts = [[s["draws"].get(n, {}).get("draws", 0) for n in "abc"] for s in stages["stages"]]
    starts = [[s["draws"].get(n, {}).get("start", 0) for n in "abc"] for s in stages["stages"]]
    which, where = draw_order(counts, starts)
    for i in range(1, TRAIN_ITERS + 1):
        got = sorted(zip(source[iterations == i].tolist(), position[iterations == i].tolist()))
        want = sorted(zip(which[(i - 1) * 4 : i * 4].tolist(), where[(i - 1) * 4 : i * 4].tolist()))
        assert got == want, i
    # the sources trained per stage: stage 1 only a, stage 2 a and b, stage 3 b and c
    assert sorted(set(source[iterations <= 24].tolist())) == [0]
    assert sorted(set(source[(iterations > 24) & (iterations <= 52)].tolist())) == [0, 1]
    assert sorted(set(source[iterations > 52].tolist())) == [1, 2]


def test_stages_counters_and_tensorboard_equal_the_recorded_draws(staged: tuple[Run, Any]) -> None:
    run, _ = staged
    _, iterations, source, _ = _draws(run)
    records = run.jsonl()
    cum = {
        name: np.cumsum(np.bincount(iterations[source == k], minlength=TRAIN_ITERS + 1)) for k, name in enumerate("abc")
    }
    counters = [r for r in records if r["event"] == "counters"]
    steps = list(range(10, 91, 10)) + [TRAIN_ITERS]
    assert [r["iteration"] for r in counters] == steps
    for r in counters:
        for name in "abc":
            assert r["sources"][name]["samples"] == int(cum[name][r["iteration"]]), (name, r["iteration"])
            assert r["sources"][name]["passes"] == round(int(cum[name][r["iteration"]]) / PER_PASS[name], 6)
    assert [(r["iteration"], r["stage_name"]) for r in counters] == [
        (10, "one"),
        (20, "one"),
        (30, "two"),
        (40, "two"),
        (50, "two"),
        (60, "three"),
        (70, "three"),
        (80, "three"),
        (90, "three"),
        (92, "three"),
    ]
    starts = [(r["iteration"], r["stage"], r["name"]) for r in records if r["event"] == "stage_start"]
    # stages 1 and 2 start in the first launch, stage 3 after the resume (at iteration 40)
    assert starts == [(1, 1, "one"), (25, 2, "two"), (53, 3, "three")]
    passes = [(r["source"], r["pass"], r["iteration"]) for r in records if r["event"] == "pass_start"]
    # a's pass 2 starts with stage 2 (iteration 25); b's pass 2 and c's with stage 3 (c's pass 2 inside it)
    assert passes[:1] == [("a", 2, 25)] and ("b", 2, 53) in passes
    final = [r for r in records if r["event"] == "final"][-1]
    assert {n: v["samples"] for n, v in final["sources"].items()} == {"a": 144, "b": 128, "c": 96}
    tb = run.tensorboard()
    for name in "abc":
        assert [(s, int(v)) for s, v in tb[f"neox_epoch/samples/{name}"]] == [(i, int(cum[name][i])) for i in steps]
    assert [(s, int(v)) for s, v in tb["neox_epoch/stage"]] == [
        (10, 1),
        (20, 1),
        (30, 2),
        (40, 2),
        (50, 2),
        (60, 3),
        (70, 3),
        (80, 3),
        (90, 3),
        (92, 3),
    ]
    assert tb["neox_epoch/stage_start"] == [[1, 1.0], [25, 2.0], [53, 3.0]]


def test_stages_resume_on_a_changed_corpus_stops_with_the_fingerprint_line(staged: tuple[Run, Any]) -> None:
    run, rc = staged
    out = rc.stdout + rc.stderr
    assert rc.returncode != 0
    lines = [ln for ln in out.splitlines() if "the data changed since the checkpoint" in ln]
    assert lines, out[-4000:]
    assert "source 'c' tokens" in lines[0] and "(global_step40)" in lines[0] and "allow_data_change" in lines[0]
    assert "source 'a'" not in lines[0] and "source 'b'" not in lines[0]
    rec = run.recorded()
    assert int(np.sum(rec.launches == 2)) == 0  # stopped before its first step
    with open(run.path("ckpt", "global_step40", "neox_epoch_state.json"), encoding="utf-8") as f:
        state = json.load(f)
    assert [s["name"] for s in state["fingerprint"]["sources"]] == ["a", "b", "c"]
    assert state["stage_boundaries"] == [0, 24, 52]


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
    assert "source 'c' tokens 6,205 -> 6,215" in finding and "source 'a'" not in finding


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
    assert stages["boundaries"] == [24, 52]
    assert stages["started"] == [
        {"iteration": 1, "stage": 1, "name": "one"},
        {"iteration": 25, "stage": 2, "name": "two"},
        {"iteration": 53, "stage": 3, "name": "three"},
    ]
    with open(html, encoding="utf-8") as f:
        page = f.read()
    assert "<h2>Stages</h2>" in page and "<td class=l>three</td><td>53..92</td><td>53</td>" in page


def test_resume_exactly_at_a_boundary_with_a_changed_later_stage(staged: tuple[Run, Any]) -> None:
    """The checkpoint of iteration 52 (stages 1 and 2 done, stage 3 not started) resumed with stage 3 changed to
    b 1, c 1: the hooks note the change and keep the started stages; the run ends at 52 + (64 + 48) / 4 = 80.
    Its recorded rows are exactly the new stage 3's draws, iteration by iteration: b's positions 64..127 of its
    own order (its pass 2, continuing where stage 2 left it), c's 0..47 (one pass, every sample once)."""
    run, _ = staged
    k = run.launches.index("boundary")
    out = run.outputs[k]
    assert (
        "the stages after stage 2 changed since the checkpoint (iteration 52); the 2 started stage(s) are "
        "unchanged, so the resume stays exact" in out
    )
    with open(run.path("logs", "boundary", "neox_epoch.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    plan = next(r for r in records if r["event"] == "plan")
    st = plan["stages"]
    assert plan["train_iters"] == 80 and st["boundaries"] == [24, 52]
    assert [{n: (d["draws"], d["start"]) for n, d in s["draws"].items()} for s in st["stages"]] == [
        {"a": (96, 0)},
        {"a": (48, 96), "b": (64, 0)},
        {"b": (64, 64), "c": (48, 0)},
    ]
    rec = run.recorded()
    mine = rec.launches == k
    iterations, texts = rec.iterations[mine], rec.texts[mine]
    assert np.bincount(iterations, minlength=81)[BOUNDARY + 1 :].tolist() == [4] * 28 and iterations.min() == 53
    lookup: dict[bytes, list[tuple[int, int]]] = {}
    for j, name in enumerate("abc"):
        for pos, text in enumerate(_order_texts(run.path("data3", name), f"train_{j}")):
            lookup.setdefault(text, []).append((j, pos))
    # a text found twice (the same span in two passes) is taken in training order: first the history this resume
    # continues (the first two launches' iterations 1..52), then its own rows
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
    assert sorted(p for _, s, p in rows if s == 1) == list(range(64, 128))
    assert sorted(p for _, s, p in rows if s == 2) == list(range(48))
    assert not [r for r in rows if r[1] == 0]
    which, where = draw_order([[0, 64, 48]], [[0, 64, 0]])
    for i in range(BOUNDARY + 1, 81):
        got = sorted((s, p) for it, s, p in rows if it == i)
        j = i - BOUNDARY - 1
        assert got == sorted(zip(which[j * 4 : (j + 1) * 4].tolist(), where[j * 4 : (j + 1) * 4].tolist())), i
    final = [r for r in records if r["event"] == "final"][-1]
    assert final["iteration"] == 80 and {n: v["samples"] for n, v in final["sources"].items()} == {
        "a": 144,
        "b": 128,
        "c": 48,
    }


#: issue 37: a staged config the one-blend weight search refused (tests/neox/test_neox_stages_plan.py); per-pass samples
#: 196, 116, 154; totals whole passes (196, 232, 308 = 184 batches of 4)
ISSUE_37_PER_PASS = {"src0": 196, "src1": 116, "src2": 154}
ISSUE_37 = [
    {"name": "warm", "passes": {"src0": 0.5, "src1": 0.5}},
    {"name": "main", "passes": {"src0": 0.5, "src2": 1}},
    {"name": "anneal", "passes": {"src1": 1.5, "src2": 1}},
]


@pytest.fixture(scope="module")
def issue_37(tmp_path_factory: pytest.TempPathFactory) -> Run:
    run = _new_run(tmp_path_factory, "stages-37")
    for k, (name, n) in enumerate(ISSUE_37_PER_PASS.items()):
        _sized_corpus(run.path("data", name), 21 + k, n)
    cfg = _config(run.root, list(ISSUE_37_PER_PASS), {"stages": ISSUE_37})
    _ok(_launch(run, cfg, "first", frameworks.neox_dir()))
    return run


def test_issue_37_trains_each_stage_exactly_in_neox(issue_37: Run) -> None:
    """The config plans and NeoX trains it exactly: each iteration only its stage's sources, each source's order
    position once (no token above its passes), a pass complete before the next starts."""
    stages, iterations, source, position = _draws(issue_37, list(ISSUE_37_PER_PASS))
    assert stages["train_iters"] == 184 and stages["boundaries"] == [39, 102]
    assert stages["total_draws"] == {"src0": 196, "src1": 232, "src2": 308}
    assert np.bincount(iterations)[1:].tolist() == [4] * 184
    for k, (name, n) in enumerate(ISSUE_37_PER_PASS.items()):
        pos, its = position[source == k], iterations[source == k]
        assert np.sort(pos).tolist() == list(range(stages["total_draws"][name])), name
        for p in range(1, -(-len(pos) // n)):
            assert its[pos < p * n].max() <= its[pos >= p * n].min(), (name, p)
    assert sorted(set(source[iterations <= 39].tolist())) == [0, 1]
    assert sorted(set(source[(iterations > 39) & (iterations <= 102)].tolist())) == [0, 2]
    assert sorted(set(source[iterations > 102].tolist())) == [1, 2]
