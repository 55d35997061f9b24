"""GPT-NeoX's own training loop with the plugin, on CPU: exact passes proven from what the model trained on.

Each scenario is one or two real launches of NeoX's ``train.py`` (ea7aefd8, its venv from
tests/helpers/frameworks.py) through the deepspeed launcher with 2 gloo ranks and a tiny model (2 layers,
hidden 64, seq 128). Two test-side pieces, both in tests/helpers/neox_cpu/ and loaded through its
``sitecustomize.py`` on the launch's PYTHONPATH:

- the CPU shim: a test double for the GPU only (CI has none); it says what it replaces and why;
- the batch recorder: records the tokens of every micro-batch each rank trains on, from NeoX's own
  ``get_batch``; tests/helpers/neox_trained.py maps them back to corpus positions through NeoX's index files.

The plugin is attached as users attach it: ``neox-epoch launch`` (the blend, train_epochs and enforce
runs) and ``git apply patches/neox_epoch_hook.patch`` on a copy of NeoX's tree, then NeoX's own
``deepy.py`` (the one-source run). The numbers asserted are what these runs produced and what the
plugin's JSONL plan record says before training starts; the planned figures come from the plugin,
the measured ones from the recorded batches.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import frameworks
import neox_trained as nt
import numpy as np
import pytest

from neox_epoch.formats.corpus import random_documents, write_corpus
from neox_epoch.neox.block import ENV_VAR
from neox_epoch.neox.counters import JSONL_NAME
from neox_epoch.semantics import blend
from neox_epoch.semantics import neox as neox_sem

pytestmark = pytest.mark.neox

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIM_DIR = os.path.join(ROOT, "tests", "helpers", "neox_cpu")
SEQ = 128
LAUNCH_TIMEOUT = 600

#: the corpora: (seed, documents); lengths 20..180 tokens, tokens < 500 (NeoX's CharLevelTokenizer has 512)
CORPORA = {"a": (1, 500), "b": (2, 250), "c": (3, 500), "v": (4, 60), "w": (5, 40)}

#: the tiny model of shared notes "neox-cpu-training" (every fusion off, fp32, ZeRO 0, no pipeline engine), with
#: NeoX's pure-torch Lion optimizer, which needs no deepspeed op build
MODEL: dict[str, Any] = {
    "data_impl": "mmap",
    "tokenizer_type": "CharLevelTokenizer",
    "num_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "seq_length": SEQ,
    "max_position_embeddings": SEQ,
    "pos_emb": "rotary",
    "precision": "fp32",
    "no_weight_tying": True,
    "scaled_upper_triang_masked_softmax_fusion": False,
    "bias_gelu_fusion": False,
    "rope_fusion": False,
    "layernorm_fusion": False,
    "attention_config": [[["global"], 2]],
    "optimizer": {"type": "lion", "params": {"lr": 0.0006, "betas": [0.9, 0.95]}},
    "zero_optimization": {"stage": 0},
    "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 1,
    "num_gpus": 2,
    "global_num_gpus": 2,
    "distributed_backend": "gloo",
    "pipe_parallel_size": 0,
    "model_parallel_size": 1,
    "use_cpu_initialization": True,
    "checkpoint_activations": False,
    "partition_activations": False,
    "lr_decay_style": "cosine",
    "warmup": 0.01,
    "log_interval": 10,
    "num_workers": 1,
}


@dataclass(frozen=True)
class Run:
    """One scenario's directory and what its launches printed."""

    root: str
    outputs: list[str]
    """What each launch printed, in launch order."""
    launches: list[str]
    """Each launch's name (its config, log and record directory are named after it), in launch order."""

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def jsonl(self) -> list[dict[str, Any]]:
        with open(self.path("logs", "epoch", JSONL_NAME), encoding="utf-8") as f:
            return [json.loads(line) for line in f]

    def plan(self) -> dict[str, Any]:
        return next(r for r in self.jsonl() if r["event"] == "plan")

    def recorded(self, kind: str = "train") -> nt.Recorded:
        return nt.read_recorded([self.path("rec", name) for name in self.launches], kind, SEQ)

    def sources(self, names: list[str], split: str = "train") -> dict[str, nt.SourceIndex]:
        return {n: nt.source_index(self.path("data", n), split) for n in names}

    def tensorboard(self) -> dict[str, list[list[float]]]:
        r = subprocess.run(
            [frameworks.neox_python(), os.path.join(SHIM_DIR, "read_tb.py"), self.path("tb"), "neox_epoch/"],
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
        return dict(json.loads(r.stdout))


def _write_corpora(data: str) -> None:
    os.makedirs(data, exist_ok=True)
    for name, (seed, docs) in CORPORA.items():
        write_corpus(os.path.join(data, name), random_documents(seed, docs, 20, 180, vocab=500), dtype="uint16")


def _config(root: str, train: list[str], block: dict[str, Any] | None, **keys: Any) -> dict[str, Any]:
    data = os.path.join(root, "data")
    cfg: dict[str, Any] = {
        **MODEL,
        "train_data_paths": [os.path.join(data, n) for n in train],
        "train_data_weights": [1.0] * len(train),
        "valid_data_paths": [os.path.join(data, "v")],
        "test_data_paths": [os.path.join(data, "v")],
        "valid_data_weights": [1.0],
        "test_data_weights": [1.0],
        "save": os.path.join(root, "ckpt"),
        "load": os.path.join(root, "ckpt"),
        "checkpoint_factor": 1000,
        "tensorboard_dir": os.path.join(root, "tb"),
        "log_dir": os.path.join(root, "logs"),
        "eval_interval": 1000,
        "eval_iters": 2,
    }
    if block is not None:
        cfg["neox_epoch"] = {**block, "log_dir": os.path.join(root, "logs", "epoch")}
    cfg.update(keys)
    return {k: v for k, v in cfg.items() if v is not None}


def _env(record_dir: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop(ENV_VAR, None)
    env.update(
        DS_ACCELERATOR="cpu",
        NEOX_EPOCH_CPU_SHIM="1",
        NEOX_EPOCH_RECORD_DIR=record_dir,
        TORCH_EXTENSIONS_DIR=os.path.join(frameworks.CACHE, "torch-extensions"),
        PYTHONUNBUFFERED="1",
        PYTHONPATH=os.pathsep.join(p for p in (SHIM_DIR, ROOT, env.get("PYTHONPATH", "")) if p),
    )
    return env


def _write(run: Run, cfg: dict[str, Any], name: str) -> str:
    path = run.path(f"{name}.yml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"# {name}\n" + json.dumps(cfg, indent=1) + "\n")
    return path


def _launch(
    run: Run, cfg: dict[str, Any], name: str, cwd: str, via: str = "launch", extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """One launch of NeoX's train.py with ``cfg`` (written as ``name``.yml); its output is kept in ``run``.
    Each launch gets a free master port (DeepSpeed's default 29500 would collide with a concurrent launch)."""
    import local_sshd

    path = _write(run, {"master_port": local_sshd.free_port(), **cfg}, name)
    python = frameworks.neox_python()
    cmd = (
        [python, "-m", "neox_epoch.cli", "launch", "train.py", path]
        if via == "launch"
        else [python, "deepy.py", "train.py", path]
    )
    started = time.time()
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env={**_env(run.path("rec", name)), **(extra_env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=LAUNCH_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher and the ranks it started (a hung rendezvous)
        out, err = proc.communicate()
        pytest.fail(f"{name}: no result after {LAUNCH_TIMEOUT} s; the end of its output:\n{(out + err)[-4000:]}")
    finally:
        _remove_shm_buffers(started)
    r = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    with open(run.path(f"{name}.log"), "w", encoding="utf-8") as f:
        f.write(r.stdout + r.stderr)
    run.outputs.append(r.stdout + r.stderr)
    run.launches.append(name)
    return r


def _remove_shm_buffers(since: float) -> None:
    """deepspeed's CPU shm all-reduce leaves two ~66 MB files in /dev/shm per launch: remove this launch's."""
    for f in glob.glob("/dev/shm/deepspeed_allreduce_buffer_*"):
        try:
            if os.path.getmtime(f) >= since - 1:
                os.unlink(f)
        except OSError:
            pass


def _neox_copy(parent: str) -> str:
    """A copy of NeoX's tree (without its images and tests) in ``parent``/gpt-neox, for a scenario that changes it."""
    tree = os.path.join(parent, "gpt-neox")
    shutil.copytree(frameworks.neox_dir(), tree, symlinks=True, ignore=shutil.ignore_patterns("images", "tests"))
    return tree


def _ok(r: subprocess.CompletedProcess) -> None:
    assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]


def _new_run(tmp_path_factory: pytest.TempPathFactory, name: str) -> Run:
    root = str(tmp_path_factory.mktemp(name))
    _write_corpora(os.path.join(root, "data"))
    return Run(root, [], [])


# ------------------------------------------------------------------------------------------------------------
# the 3-source blend: targets {a: 1, b: 2, c: 0.5} passes, separate_epochs, stopped at a checkpoint and resumed

BLEND_BLOCK = {"epochs": {"a": 1, "b": 2, "c": 0.5}, "separate_epochs": True}
STOP = 100


@pytest.fixture(scope="module")
def blend_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    run = _new_run(tmp_path_factory, "blend")
    cfg = _config(run.root, ["a", "b", "c"], BLEND_BLOCK, checkpoint_factor=STOP)
    _ok(_launch(run, {**cfg, "exit_interval": STOP}, "first", frameworks.neox_dir()))
    _ok(_launch(run, cfg, "resumed", frameworks.neox_dir()))
    return run


def test_blend_every_token_seen_its_target_passes_across_the_resume(blend_run: Run) -> None:
    plan = blend_run.plan()
    rows = {s["name"]: s for s in plan["sources"]}
    rec = blend_run.recorded()
    # what the plan said before training: 245 iterations of 4 samples; a 403, b 389, c 188 samples
    assert (plan["train_iters"], plan["train_batch_size"]) == (245, 4)
    assert [rows[n]["samples_drawn"] for n in "abc"] == [403, 389, 188]
    # every iteration trained exactly once, 4 samples each (2 per rank), split at the checkpoint
    assert sorted(set(rec.iterations.tolist())) == list(range(1, 246))
    assert np.bincount(rec.iterations)[1:].tolist() == [4] * 245
    assert sorted(set(rec.iterations[rec.launches == 0].tolist())) == list(range(1, STOP + 1))
    assert sorted(set(rec.iterations[rec.launches == 1].tolist())) == list(range(STOP + 1, 246))
    ex = nt.exposure(rec, blend_run.sources(["a", "b", "c"]))
    # a: one pass; the 163 unseen tokens are what the plan reported (NeoX's len-1 sample and the stream's tail)
    assert ex.histogram("a") == {0: 163, 1: 51584} and rows["a"]["tokens_unseen"] == 163
    # b: two passes, each shuffled on its own; its last target sample is one short of 2 epochs (NeoX's len-1):
    # 168 tokens seen once, none three times
    assert ex.histogram("b") == {1: 168, 2: 24812} and rows["b"]["tokens_unseen"] == 0
    # c: half a pass: no token twice, and exactly the planned number never seen
    assert ex.histogram("c") == {0: 24329, 1: 24064} and rows["c"]["tokens_unseen"] == 24329
    # the samples of each source trained equal the plan's draws
    assert np.bincount(ex.source_of_row).tolist() == [403, 389, 188]


def test_blend_pass_boundaries_equal_the_counters(blend_run: Run) -> None:
    plan = blend_run.plan()
    rec = blend_run.recorded()
    ex = nt.exposure(rec, blend_run.sources(["a", "b", "c"]))
    starts = [r for r in blend_run.jsonl() if r["event"] == "pass_start"]
    # b is the only source with a second pass; in its epoch-separated index pass 2 starts at sample
    # ceil(24980 / 128) = 196 (the first whose first token is in epoch 2); its 197th draw is trained in iteration 124
    cum_b = nt.draws_by_iteration(rec, ex, 1, 245)
    assert nt.pass_starts(cum_b, [196]) == [124]
    assert [(s["source"], s["pass"], s["iteration"]) for s in starts] == [("b", 2, 124)]
    # b's 195 samples trained before iteration 124 are its first pass less one sample (128 tokens unseen); the
    # pass's last sample straddles the epoch boundary (its first token is in epoch 1, so it is shuffled with
    # epoch 1): its 196 * 128 - 24980 = 108 tokens past the end are the next epoch's first tokens, seen early
    before = rec.where(rec.iterations < 124)
    assert nt.exposure(before, blend_run.sources(["a", "b", "c"])).histogram("b") == {0: 128, 1: 24744, 2: 108}
    # the JSONL counters at every logging iteration equal the recorded draws
    counters = [r for r in blend_run.jsonl() if r["event"] == "counters"]
    assert [r["iteration"] for r in counters] == list(range(10, 241, 10)) + [245]
    for k, name in enumerate("abc"):
        cum = nt.draws_by_iteration(rec, ex, k, 245)
        spe = plan["sources"][k]["samples_per_epoch"]
        for r in counters:
            assert r["sources"][name]["samples"] == int(cum[r["iteration"]]), (name, r["iteration"])
            assert r["sources"][name]["passes"] == round(int(cum[r["iteration"]]) / spe, 6)


def test_blend_tensorboard_carries_the_same_passes_and_boundaries(blend_run: Run) -> None:
    rec = blend_run.recorded()
    ex = nt.exposure(rec, blend_run.sources(["a", "b", "c"]))
    tb = blend_run.tensorboard()
    steps = list(range(10, 241, 10)) + [245]
    for k, name in enumerate("abc"):
        cum = nt.draws_by_iteration(rec, ex, k, 245)
        spe = blend_run.plan()["sources"][k]["samples_per_epoch"]
        samples = tb[f"neox_epoch/samples/{name}"]
        assert [s for s, _ in samples] == steps  # both launches' event files, no step twice
        assert [int(v) for _, v in samples] == [int(cum[i]) for i in steps]
        passes = dict(tb[f"neox_epoch/passes/{name}"])
        assert all(abs(passes[i] - cum[i] / spe) < 1e-6 for i in steps)  # float32 in the event file
    # the pass boundary: a pass_start scalar at iteration 124 and the pass-in-progress scalar switching there
    assert tb["neox_epoch/pass_start/b"] == [[124, 2.0]]
    pass_b = dict(tb["neox_epoch/pass/b"])
    assert pass_b[120] == 1.0 and pass_b[130] == 2.0


def test_blend_resume_continues_the_counters(blend_run: Run) -> None:
    records = blend_run.jsonl()
    events = [(r["event"], r["iteration"]) for r in records if r["event"] in ("plan", "resume", "final")]
    # the first launch stops at exit_interval with a final record that says so; the second resumes at 100
    assert events == [("plan", 0), ("final", STOP), ("plan", 0), ("resume", STOP), ("final", 245)]
    finals = [r for r in records if r["event"] == "final"]
    assert not finals[0]["complete"] and finals[1]["complete"]
    resume = next(r for r in records if r["event"] == "resume")
    assert {n: v["samples"] for n, v in resume["sources"].items()} == {"a": 164, "b": 159, "c": 77}
    assert {n: v["samples"] for n, v in finals[1]["sources"].items()} == {"a": 403, "b": 389, "c": 188}
    counters = [r["iteration"] for r in records if r["event"] == "counters"]
    assert len(counters) == len(set(counters))  # no logging iteration counted twice
    assert "neox_epoch: resumed at iteration 100" in blend_run.outputs[1]


def test_blend_run_ends_where_the_plan_ends(blend_run: Run) -> None:
    # the blend ends at the 980 samples drawn, so NeoX's loader prefetches nothing past the planned end (NeoX
    # would print "Got index out of bounds ... taking modulo" for the greedy draws past the targets otherwise)
    for out in blend_run.outputs:
        assert "Got index out of bounds" not in out
        assert "Traceback" not in out
    assert "neox_epoch: train blend ends at the 980 samples the run draws (NeoX built 1169" in blend_run.outputs[0]


def test_blend_valid_and_test_stay_as_neox_builds_them(blend_run: Run) -> None:
    """Evaluation does not train: valid/test keep NeoX's own build (1.005 buffer); the recorded evaluation
    samples all come from the valid/test indices NeoX built, none from a train index."""
    rec = blend_run.recorded("eval")
    plan = blend_run.plan()
    assert rec.texts.shape[0] > 0
    ev = {**blend_run.sources(["v"], "valid"), **{"v_test": nt.source_index(blend_run.path("data", "v"), "test")}}
    ex = nt.exposure(rec, ev)
    assert set(ex.source_of_row.tolist()) <= {0, 1}
    train = blend_run.sources(["a", "b", "c"])
    assert not any(t.tobytes() in s.samples for t in rec.texts for s in train.values())
    assert plan["eval_splits"].startswith("built as NeoX builds them (x1.005")
    assert "  valid/test: built as NeoX builds them (x1.005" in blend_run.outputs[0]


# ------------------------------------------------------------------------------------------------------------
# the same blend, stopped at iteration 105 with a global batch of 4 and resumed with 8 (gradient accumulation 2)

BATCH_STOP = 105  # 105 x 4 = 420 consumed; 980 - 420 = 560 = 70 x 8 left: whole batches, nothing left over


@pytest.fixture(scope="module")
def batch_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    run = _new_run(tmp_path_factory, "batch")
    cfg = _config(run.root, ["a", "b", "c"], BLEND_BLOCK, checkpoint_factor=BATCH_STOP, eval_interval=50)
    _ok(_launch(run, {**cfg, "exit_interval": BATCH_STOP}, "first", frameworks.neox_dir()))
    refused = _launch(run, {**cfg, "gradient_accumulation_steps": 2}, "refused", frameworks.neox_dir())
    assert refused.returncode != 0
    # the learning-rate schedule must follow the new end (or be kept): NeoX would assert; the hooks say it first
    doubled = {**cfg, "gradient_accumulation_steps": 2, "override_lr_scheduler": True}
    check = subprocess.run(
        [
            sys.executable,
            "-m",
            "neox_epoch.cli",
            "resume-check",
            run.path("ckpt"),
            _write(run, doubled, "check"),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    with open(run.path("check.json"), "w", encoding="utf-8") as f:
        f.write(check.stdout)
    from_log = subprocess.run(
        [
            sys.executable,
            "-m",
            "neox_epoch.cli",
            "resume-check",
            run.path("logs", "epoch"),
            run.path("check.yml"),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    with open(run.path("check_from_log.json"), "w", encoding="utf-8") as f:
        f.write(from_log.stdout)
    _ok(_launch(run, doubled, "doubled", frameworks.neox_dir()))
    return run


def test_batch_change_resume_trains_every_token_its_target_passes(batch_run: Run) -> None:
    """NeoX alone would start the resumed loader at (105 x 2 % 245) x 4 = sample 840 and never train samples
    420..839; the hooks start at the 420 consumed (saved beside the checkpoint) and end when the run's 980
    samples are drawn: iteration 105 + 560 / 8 = 175. The tokens trained are exactly those of the unchanged
    run (test_blend_every_token_seen_its_target_passes_across_the_resume): same histograms, same draws."""
    assert (
        "resuming iteration 105 with train_batch_size 4 -> 8 moves the end of the run from iteration 245 to 175"
        in batch_run.outputs[1]
    ) and "set override_lr_scheduler: true" in batch_run.outputs[1]
    rec = batch_run.recorded()
    per_iteration = np.bincount(rec.iterations)[1:].tolist()
    assert per_iteration == [4] * BATCH_STOP + [8] * 70
    ex = nt.exposure(rec, batch_run.sources(["a", "b", "c"]))
    assert ex.histogram("a") == {0: 163, 1: 51584}
    assert ex.histogram("b") == {1: 168, 2: 24812}
    assert ex.histogram("c") == {0: 24329, 1: 24064}
    assert np.bincount(ex.source_of_row).tolist() == [403, 389, 188]
    state = json.loads(open(batch_run.path("ckpt", f"global_step{BATCH_STOP}", "neox_epoch_state.json")).read())
    assert (state["consumed_samples"], state["train_batch_size"], state["samples_total"]) == (420, 4, 980)
    assert state["drawn"] == [403, 389, 188]
    resumed = [r for r in batch_run.jsonl() if r["event"] == "plan"][-1]
    assert resumed["train_iters"] == 175 and resumed["train_batch_size"] == 8
    assert resumed["resume"] == {
        "changed": {"train_batch_size": [4, 8]},
        "start_sample": 420,
        "findings": [],
        "consumed_samples": 420,
    }
    assert (
        "stock NeoX: start = (iteration * gas % len(loader)) * micro * dp = (105 * 2 % 245) * 2 * 2 = 840"
        in (batch_run.outputs[2])
    )
    # resume-check, run before the resume, said exactly this: the hooks start at 420, nothing skipped or
    # repeated, and the resumed launch draws a 231, b 222, c 107 (what the recorded batches of that launch hold)
    predicted = json.loads(open(batch_run.path("check.json")).read())
    assert (predicted["resumed_by"], predicted["start_sample"], predicted["clean"]) == ("hooks", 420, True)
    # the same from the run's JSONL alone: the hooks recorded the checkpoint's state there when NeoX saved it
    from_log = json.loads(open(batch_run.path("check_from_log.json")).read())
    assert from_log["checkpoint"].endswith("neox_epoch.jsonl (global_step105)")
    # the validation loader too (the hooks record eval_interval and eval_iters with the state): evaluations at 50
    # and 100 drew 2 x 2 x 1 x 4 = 16 samples, NeoX restarts it at ((105 x 2) // 50) x 2 batches of 4 = 32
    assert (predicted["valid"]["drawn"], predicted["valid"]["start_sample"]) == (16, 32)
    # the resumed launch evaluates at 150 and after 175: 2 x 2 x 2 batches of 4 from sample 32, items 32..63 of the
    # validation index NeoX built for the train_iters the hooks set (175 x 8: (175 // 50 + 1) x 2 x 8 = 64 asked,
    # 65 with its 1.005; 96 samples, so no wrap), all of v
    assert predicted["valid"]["sources"] == [{"name": "v", "drawn_before": 16, "resumed": 32, "continued": 32}]
    assert not any("itertools.cycle" in n for n in predicted["notes"])
    evaluated = batch_run.recorded("eval")
    (doc,) = glob.glob(batch_run.path("data", "v_valid_0_indexmap_65ns_*_doc_idx.npy"))
    for rank in (0, 1):
        rows = evaluated.texts[(evaluated.launches == 2) & (evaluated.ranks == rank)][:16]
        items = [32 + 4 * batch + 2 * rank + k for batch in range(8) for k in range(2)]
        assert [row.tobytes() for row in rows] == nt.item_texts(
            batch_run.path("data", "v"), doc[: -len("_doc_idx.npy")], items
        ), rank
    assert {k: v for k, v in from_log.items() if k not in ("checkpoint", "consumed_how")} == {
        k: v for k, v in predicted.items() if k not in ("checkpoint", "consumed_how")
    }
    after = np.bincount(ex.source_of_row[rec.launches == 2], minlength=3).tolist()
    assert after == [s["drawn_after_resume"] for s in predicted["sources"]] == [231, 222, 107]
    final = [r for r in batch_run.jsonl() if r["event"] == "final"][-1]
    assert final["iteration"] == 175 and final["complete"]
    assert {n: v["samples"] for n, v in final["sources"].items()} == {"a": 403, "b": 389, "c": 188}


@pytest.fixture(scope="module")
def enforced_remainder(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Run, subprocess.CompletedProcess, dict[str, Any]]:
    """The same blend with ``enforce``, stopped at 105 x 4, resumed with a global batch of 12: the 560 samples
    left are 46 batches and 8 more, so the last 8 of the run's 980 would never be drawn."""
    run = _new_run(tmp_path_factory, "enforce")
    cfg = _config(run.root, ["a", "b", "c"], {**BLEND_BLOCK, "enforce": True}, checkpoint_factor=BATCH_STOP)
    _ok(_launch(run, {**cfg, "exit_interval": BATCH_STOP}, "first", frameworks.neox_dir()))
    tripled = {**cfg, "gradient_accumulation_steps": 3, "override_lr_scheduler": True}
    check = subprocess.run(
        [
            sys.executable,
            "-m",
            "neox_epoch.cli",
            "resume-check",
            run.path("ckpt"),
            _write(run, tripled, "check"),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    refused = _launch(run, tripled, "tripled", frameworks.neox_dir())
    return run, refused, json.loads(check.stdout)


def test_enforce_refuses_the_resume_that_resume_check_flags(
    enforced_remainder: tuple[Run, subprocess.CompletedProcess, dict[str, Any]],
) -> None:
    """With enforce the hooks stop the resumed launch at data build, naming resume-check's finding word for word;
    the resumed launch trains nothing (its record holds no batch)."""
    run, refused, predicted = enforced_remainder
    finding = (
        "remainder: the last 8 of the run's 980 samples are not drawn: 560 left after iteration 105 is not a "
        "whole number of batches of 12; choose a global batch that divides 560"
    )
    assert predicted["findings"] == [finding] and predicted["resumed_by"] == "hooks"
    assert refused.returncode != 0
    assert (
        f"neox_epoch: this resume would not be exact: {finding} (neox-epoch resume-check finding; enforce is on)"
        in run.outputs[1]
    )
    rec = run.recorded()
    assert rec.launches.tolist().count(1) == 0 and np.bincount(rec.iterations)[1:].tolist() == [4] * BATCH_STOP


# ------------------------------------------------------------------------------------------------------------
# stock NeoX (no neox_epoch block), weights 2:1:1, 105 iterations of 4, resumed with 8: resume-check's prediction

STOCK_WEIGHTS = [2.0, 1.0, 1.0]


def _stock_resume(
    run: Run, cfg: dict[str, Any], stop: int, resumed: dict[str, Any], name: str
) -> tuple[Run, dict[str, Any], int]:
    """Stock NeoX (deepy.py) stopped at ``stop``; ``resume-check --json --exposure`` on its checkpoint with the
    ``resumed`` config, before the resumed launch ``name`` runs: (the run, what resume-check said, its exit code)."""
    _ok(_launch(run, {**cfg, "exit_interval": stop}, "first", frameworks.neox_dir(), via="deepy"))
    check = subprocess.run(
        [
            sys.executable,
            "-m",
            "neox_epoch.cli",
            "resume-check",
            run.path("ckpt"),
            _write(run, resumed, "check"),
            "--json",
            "--exposure",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    _ok(_launch(run, resumed, name, frameworks.neox_dir(), via="deepy"))
    return run, json.loads(check.stdout), check.returncode


#: the stock run's validation blend and evaluation (every 41 iterations, 3 x gas batches): the resumed evaluations
#: reach the blend's end, and no source is drawn past its len (where NeoX's item index would wrap on its own)
VALID_WEIGHTS = [3.0, 2.0]
STOCK_EVAL = {"eval_interval": 41, "eval_iters": 3}


@pytest.fixture(scope="module")
def stock_batch_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, dict[str, Any], int]:
    """240 x 4 = 960 samples asked first, 120 x 8 = 960 after the change: the same index files (NeoX names them
    by the samples asked), so positions name the same samples before and after; resume-check runs between. The
    validation set is a blend of two sources."""
    run = _new_run(tmp_path_factory, "stock")
    data = run.path("data")
    cfg = _config(
        run.root,
        ["a", "b", "c"],
        None,
        train_data_weights=STOCK_WEIGHTS,
        train_iters=240,
        checkpoint_factor=BATCH_STOP,
        valid_data_paths=[os.path.join(data, "v"), os.path.join(data, "w")],
        valid_data_weights=VALID_WEIGHTS,
        **STOCK_EVAL,
    )
    resumed = {**cfg, "train_iters": 120, "gradient_accumulation_steps": 2, "override_lr_scheduler": True}
    return _stock_resume(run, cfg, BATCH_STOP, resumed, "doubled")


def test_resume_check_predicts_what_stock_neox_skips(stock_batch_run: tuple[Run, dict[str, Any], int]) -> None:
    """resume-check says stock NeoX restarts at (105 x 2 % len) x 4 = 840 and never trains samples 420..839;
    the recorded batches show exactly that: the first launch drew blend positions 0..419, the resumed one
    840..959, each iteration's samples from the sources the blend's draw order gives those positions."""
    run, predicted, code = stock_batch_run
    assert code == 1 and predicted["resumed_by"] == "NeoX" and predicted["consumed_samples"] == 420
    assert (predicted["start_sample"], predicted["skipped"], predicted["repeated"]) == (840, [420, 840], None)
    assert predicted["findings"][0] == "skip: samples 420..839 are never trained (420 samples)"
    rec = run.recorded()
    ex = nt.exposure(rec, run.sources(["a", "b", "c"]))
    weights = [w / sum(STOCK_WEIGHTS) for w in STOCK_WEIGHTS]
    at = {p: blend.greedy_counts(weights, p) for p in (420, 840, 960)}
    trained = np.bincount(ex.source_of_row, minlength=3).tolist()
    assert trained == [at[420][k] + at[960][k] - at[840][k] for k in range(3)]
    skipped = {s["name"]: s["skipped_samples"] for s in predicted["sources"]}
    assert skipped == {n: at[840][k] - at[420][k] for k, n in enumerate("abc")} == {"a": 210, "b": 105, "c": 105}
    assert np.bincount(rec.iterations)[1:].tolist() == [4] * BATCH_STOP + [8] * 15
    after = np.bincount(ex.source_of_row[rec.launches == 1], minlength=3).tolist()
    assert after == [s["drawn_after_resume"] for s in predicted["sources"]] == [60, 30, 30]


def _blend_item_texts(
    run: Run, names: str, weights: list[float], requests: list[int | None], split: str, positions: list[int]
) -> list[bytes]:
    """The texts of blend positions ``positions`` of a ``split`` blend of the sources ``names`` (one letter each)
    with ``weights``: each position's source and item by the blend's greedy, read from the index NeoX built for
    that source and its request (``{name}_{split}_{k}_indexmap_{n}ns_...``)."""
    greedy = neox_sem.blend_weights(weights)
    texts = []
    for p in positions:
        before, after = blend.greedy_counts(greedy, p), blend.greedy_counts(greedy, p + 1)
        k = next(i for i in range(len(greedy)) if after[i] > before[i])
        (doc,) = glob.glob(run.path("data", f"{names[k]}_{split}_{k}_indexmap_{requests[k]}ns_*_doc_idx.npy"))
        texts += nt.item_texts(run.path("data", names[k]), doc[: -len("_doc_idx.npy")], [before[k]])
    return texts


def _valid_item_texts(run: Run, train_iters: int, batch: int, positions: list[int]) -> list[bytes]:
    """The stock run's validation blend positions ``positions`` in the launch that asked train_iters x batch."""
    asked = neox_sem.eval_sample_counts(train_iters, batch, STOCK_EVAL["eval_interval"], STOCK_EVAL["eval_iters"])[1]
    requests = neox_sem.normalized_weights_and_num_samples(VALID_WEIGHTS, asked)[1]
    return _blend_item_texts(run, "vw", VALID_WEIGHTS, requests, "valid", positions)


def test_resume_check_says_which_validation_samples_stock_neox_evaluates_per_source(
    stock_batch_run: tuple[Run, dict[str, Any], int],
) -> None:
    """Evaluations at 41 and 82 drew 2 x 3 x 1 batches of 4 = validation blend positions 0..23 (14 of v, 10 of w).
    NeoX restarts the validation loader at ((105 x 2) // 41) x 3 = batch 15 = sample 60 of the 76 (19 batches) of
    the new run's blend. Its one evaluation, after the last iteration, draws 3 x 2 batches: 60..75, then NeoX's
    itertools.cycle replays the launch's first pass from its start: 60..67 again, never 0..59. resume-check said all
    of it before the resume, per source: the recorded evaluation batches are exactly those positions' items of
    the indices NeoX built for v and w. The test evaluation after it draws items 0..23 of the test index."""
    run, predicted, _ = stock_batch_run
    valid = predicted["valid"]
    assert (valid["drawn"], valid["continued_sample"], valid["start_sample"]) == (24, 24, 60)
    assert any(
        n.startswith("valid: NeoX restarts the validation loader at sample 60; the saved run's evaluations drew 24")
        for n in predicted["notes"]
    )
    assert (
        "valid: the resumed evaluations reach the validation dataset's end and NeoX's loader (itertools.cycle "
        "over the launch's first pass) evaluates samples 60..67 again, not 0..59" in predicted["notes"]
    )
    evaluated = run.recorded("eval")
    positions = {0: list(range(24)), 1: list(range(60, 76)) + list(range(60, 68))}
    for launch, (iters, batch) in enumerate(((240, 4), (120, 8))):
        for rank in (0, 1):
            rows = evaluated.texts[(evaluated.launches == launch) & (evaluated.ranks == rank)][:12]
            mine = [p for p in positions[launch] if p % 4 // 2 == rank]  # each rank its micro slice of a batch
            assert [row.tobytes() for row in rows] == _valid_item_texts(run, iters, batch, mine), (launch, rank)
    weights = neox_sem.blend_weights(VALID_WEIGHTS)

    def per_source(ps: list[int]) -> list[int]:
        return [
            sum(blend.greedy_counts(weights, p + 1)[k] - blend.greedy_counts(weights, p)[k] for p in ps)
            for k in range(2)
        ]

    sources = {s["name"]: s for s in valid["sources"]}
    assert [sources[n]["drawn_before"] for n in ("v", "w")] == per_source(positions[0]) == [14, 10]
    assert [sources[n]["resumed"] for n in ("v", "w")] == per_source(positions[1]) == [15, 9]
    assert [sources[n]["continued"] for n in ("v", "w")] == per_source(list(range(24, 48))) == [15, 9]
    # the test loader starts at 0 in every launch and is evaluated once, after the last iteration: items 0..23
    assert predicted["test"]["start_sample"] == 0 and predicted["test"]["samples"] == 3 * 8
    tests = neox_sem.normalized_weights_and_num_samples([1.0], neox_sem.eval_sample_counts(120, 8, 41, 3)[2])[1]
    (test_doc,) = glob.glob(run.path("data", f"v_test_0_indexmap_{tests[0]}ns_*_doc_idx.npy"))
    for rank in (0, 1):
        rows = evaluated.texts[(evaluated.launches == 1) & (evaluated.ranks == rank)][12:]
        items = [4 * batch + 2 * rank + k for batch in range(6) for k in range(2)]
        assert [row.tobytes() for row in rows] == nt.item_texts(
            run.path("data", "v"), test_doc[: -len("_doc_idx.npy")], items
        ), rank


def test_resume_check_exposure_equals_the_tokens_stock_neox_trained(
    stock_batch_run: tuple[Run, dict[str, Any], int],
) -> None:
    """resume-check --exposure, run before the resume, counts each source's input tokens by times seen over the
    whole run with the audit's exposure computation: as resumed it equals, bin for bin, the tokens both launches
    recorded; continued unchanged (items 0 .. greedy(420) + drawn after the resume) it equals NeoX's own index
    files read item by item. The skip trains other samples than continuing would, not fewer."""
    run, predicted, _ = stock_batch_run
    ex = nt.exposure(run.recorded(), run.sources(["a", "b", "c"]))
    weights = [w / sum(STOCK_WEIGHTS) for w in STOCK_WEIGHTS]
    at = {p: blend.greedy_counts(weights, p) for p in (420, 840, 960)}
    for k, name in enumerate("abc"):
        got = predicted["exposure"][name]
        assert got["resumed"]["tokens"] == {str(t): int(n) for t, n in enumerate(np.bincount(ex.counts[name])) if n}, (
            name
        )
        stem = run.path("data", got["index"])
        continued = nt.drawn_token_counts(run.path("data", name), stem, 0, at[420][k] + at[960][k] - at[840][k])
        assert got["continued"]["tokens"] == {str(t): int(n) for t, n in enumerate(np.bincount(continued)) if n}, name
        drawn = at[420][k] + at[960][k] - at[840][k]  # both draw as many samples of seq_length input tokens
        assert got["resumed"]["token_exposures"] == got["continued"]["token_exposures"] == drawn * SEQ, name


# stock NeoX on 2 GPUs for 105 iterations of 4, resumed on 1 GPU (the same micro batch and accumulation: a global
# batch of 2): resume-check's prediction of what is trained again, token by token

WORLD_STOP = 125  # the resumed launch stops here (exit_interval): 20 iterations of 2 samples


@pytest.fixture(scope="module")
def halved_world_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, dict[str, Any], int]:
    """480 x 2 = 960 samples asked after the change, as 240 x 4 before: the same index files. resume-check runs on
    the checkpoint with the 1-GPU config before the resumed launch, which stops after 20 iterations."""
    run = _new_run(tmp_path_factory, "world")
    cfg = _config(
        run.root,
        ["a", "b", "c"],
        None,
        train_data_weights=STOCK_WEIGHTS,
        train_iters=240,
        checkpoint_factor=BATCH_STOP,
        **STOCK_EVAL,
    )
    _ok(_launch(run, {**cfg, "exit_interval": BATCH_STOP}, "first", frameworks.neox_dir(), via="deepy"))
    one = {**cfg, "num_gpus": 1, "global_num_gpus": 1, "train_iters": 480, "override_lr_scheduler": True}
    check = subprocess.run(
        [sys.executable, "-m", "neox_epoch.cli", "resume-check", run.path("ckpt"), _write(run, one, "check"), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    _ok(_launch(run, {**one, "exit_interval": WORLD_STOP}, "one_gpu", frameworks.neox_dir(), via="deepy"))
    return run, json.loads(check.stdout), check.returncode


def test_resume_check_predicts_what_stock_neox_trains_again_on_fewer_gpus(
    halved_world_run: tuple[Run, dict[str, Any], int],
) -> None:
    """Two GPUs drew blend positions 0..419 (105 x 4). On one GPU the loader batch is 2 and NeoX restarts it at
    (105 x 1 % len) x 2 = 210: positions 210..419 are trained again (a: 105, b: 52, c: 53 of them), and the 20
    iterations the resumed launch ran are exactly positions 210..249, each the item of its source's index that the
    blend's draw order gives it. The validation loader restarts at ((105 x 1) // 41) x 3 batches of 2 = sample 12
    though the evaluations at 41 and 82 drew 0..23: the evaluation at 123 evaluates items 12..17 again."""
    run, predicted, code = halved_world_run
    assert code == 1 and predicted["resumed_by"] == "NeoX" and predicted["consumed_samples"] == 420
    assert (predicted["new_train_batch_size"], predicted["start_sample"], predicted["repeated"]) == (2, 210, [210, 420])
    assert predicted["findings"][0] == "repeat: samples 210..419 are trained again (210 samples)"
    weights = neox_sem.blend_weights(STOCK_WEIGHTS)
    at = {p: blend.greedy_counts(weights, p) for p in (210, 420)}
    assert (
        {s["name"]: s["repeated_samples"] for s in predicted["sources"]}
        == {n: at[420][k] - at[210][k] for k, n in enumerate("abc")}
        == {"a": 105, "b": 52, "c": 53}
    )
    rec = run.recorded()
    after = rec.where(rec.launches == 1)
    assert set(after.ranks.tolist()) == {0} and np.bincount(after.iterations)[BATCH_STOP + 1 :].tolist() == [2] * 20
    requests = neox_sem.normalized_weights_and_num_samples(STOCK_WEIGHTS, 960)[1]
    expected = _blend_item_texts(run, "abc", STOCK_WEIGHTS, requests, "train", list(range(210, 250)))
    assert [row.tobytes() for row in after.texts] == expected
    valid = predicted["valid"]
    assert (valid["drawn"], valid["start_sample"]) == (24, 12)
    assert valid["sources"] == [
        {"name": "v", "drawn_before": 24, "resumed": 60, "continued": 60}
    ]  # 10 evaluations to 480
    evaluated = run.recorded("eval")
    asked = neox_sem.normalized_weights_and_num_samples([1.0], neox_sem.eval_sample_counts(480, 2, 41, 3)[1])[1]
    assert [row.tobytes() for row in evaluated.texts[evaluated.launches == 1]] == _blend_item_texts(
        run, "v", [1.0], asked, "valid", list(range(12, 18))
    )


# stock NeoX, weights 2:1:1 for 105 iterations of 4, resumed with 1:2:1: resume-check's prediction, token by token

REWEIGHTED = [1.0, 2.0, 1.0]


@pytest.fixture(scope="module")
def reweighted_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, dict[str, Any], int]:
    """The same batch and train_iters before and after: only the blend's weights change. resume-check reads the
    saved run's weights from the config files NeoX copied into its checkpoint."""
    run = _new_run(tmp_path_factory, "reweighted")
    cfg = _config(
        run.root, ["a", "b", "c"], None, train_data_weights=STOCK_WEIGHTS, train_iters=240, checkpoint_factor=BATCH_STOP
    )
    return _stock_resume(run, cfg, BATCH_STOP, {**cfg, "train_data_weights": REWEIGHTED}, "reweighted")


def test_resume_check_predicts_a_changed_blend_token_by_token(reweighted_run: tuple[Run, dict[str, Any], int]) -> None:
    """NeoX resumes at 105 x 4 = 420 in a blend rebuilt with the new weights: from there each source's items
    greedy(1:2:1, 420) .. greedy(1:2:1, 960) of its index for the new request, a and b rebuilt (asked 242 and
    483 samples instead of 483 and 242: other epochs, other orders), c the same index (242 either way) where the
    saved run stopped in it. The tokens the resumed launch trained are exactly those items' input tokens."""
    run, predicted, code = reweighted_run
    assert code == 1 and predicted["resumed_by"] == "NeoX" and predicted["start_sample"] == 420
    kinds = [f.split(":")[0] for f in predicted["findings"]]
    assert kinds == ["blend-changed", "orders-change", "orders-change"]
    rows = {s["name"]: (s["skipped_samples"], s["repeated_samples"]) for s in predicted["sources"]}
    assert rows == {"a": (None, None), "b": (None, None), "c": (0, 0)}
    weights = neox_sem.blend_weights(REWEIGHTED)
    at = {p: blend.greedy_counts(weights, p) for p in (420, 960)}
    assert [s["drawn_after_resume"] for s in predicted["sources"]] == [at[960][k] - at[420][k] for k in range(3)]
    rec = run.recorded()
    after = rec.where(rec.launches == 1)
    ex = nt.exposure(after, run.sources(["a", "b", "c"]))
    assert np.bincount(ex.source_of_row, minlength=3).tolist() == [
        s["drawn_after_resume"] for s in predicted["sources"]
    ]
    requests = neox_sem.normalized_weights_and_num_samples(REWEIGHTED, 960)[1]
    for k, name in enumerate("abc"):
        prefix = run.path("data", name)
        (stem,) = [
            f[: -len("_doc_idx.npy")] for f in glob.glob(f"{prefix}_train_{k}_indexmap_{requests[k]}ns_*_doc_idx.npy")
        ]
        expected = nt.drawn_token_counts(prefix, stem, at[420][k], at[960][k])
        assert np.array_equal(ex.counts[name], expected), name


def test_resume_check_exposure_of_a_changed_blend_equals_the_tokens_stock_neox_trained(
    reweighted_run: tuple[Run, dict[str, Any], int],
) -> None:
    """With --exposure, run before the resume, a and b (whose new index, asked other samples, has other epochs and
    so another order) get the saved run's items of its index plus the resumed run's of the new one, summed token by
    token by the audit's kernel: the new indices were not built yet, so resume-check built them as NeoX would.
    Equal, bin for bin, to the tokens both launches recorded; c (the same index) as before."""
    run, predicted, _ = reweighted_run
    ex = nt.exposure(run.recorded(), run.sources(["a", "b", "c"]))
    for name in "abc":
        got = predicted["exposure"][name]
        assert got["resumed"]["tokens"] == {str(t): int(n) for t, n in enumerate(np.bincount(ex.counts[name])) if n}, (
            name
        )
        assert ("built here as NeoX will build it" in got["note"]) == (name != "c"), got["note"]


# stock NeoX, seq_length 64 for 105 iterations of 4, resumed with seq_length 128: every sample is cut anew

SEQ_STOP = 105


@pytest.fixture(scope="module")
def lengthened_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, dict[str, Any], int]:
    """The first launch trains on 64-token samples, the resumed one on 128-token samples of the same corpora (the
    model's rotary positions allow 128 throughout); resume-check --exposure runs between the launches."""
    run = _new_run(tmp_path_factory, "lengthened")
    cfg = _config(
        run.root,
        ["a", "b", "c"],
        None,
        train_data_weights=STOCK_WEIGHTS,
        train_iters=240,
        checkpoint_factor=SEQ_STOP,
        seq_length=SEQ // 2,
    )
    resumed = {**cfg, "seq_length": SEQ, "train_iters": 180, "override_lr_scheduler": True}
    return _stock_resume(run, cfg, SEQ_STOP, resumed, "lengthened")


def test_resume_check_counts_each_token_across_a_seq_length_change(
    lengthened_run: tuple[Run, dict[str, Any], int], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """NeoX resumes at 105 x 4 = 420 of a blend of new indices (named by seq_length 128): each source's items
    greedy(420) .. greedy(720) of its new index, after items 0 .. greedy(420) - 1 of its 64-token index. Positions
    name other token spans, so no sample count is skipped or repeated; resume-check --exposure, before the resume,
    sums both indices' input tokens per token: equal, bin for bin, to what the two launches recorded (rows of 65
    and of 129 tokens). Continued unchanged: the 64-token index for as many input tokens, equal to NeoX's files."""
    run, predicted, code = lengthened_run
    assert code == 1 and predicted["resumed_by"] == "NeoX" and predicted["start_sample"] == 420
    assert predicted["findings"][0].startswith("seq-length-changed: seq_length 64 -> 128: ")
    assert all(s["skipped_samples"] is None and s["repeated_samples"] is None for s in predicted["sources"])
    weights = neox_sem.blend_weights(STOCK_WEIGHTS)
    at = {p: blend.greedy_counts(weights, p) for p in (420, 720)}
    first = nt.read_recorded([run.path("rec", "first")], "train", SEQ // 2)
    second = nt.read_recorded([run.path("rec", "lengthened")], "train", SEQ)
    assert (first.texts.shape, second.texts.shape) == ((420, SEQ // 2 + 1), (300, SEQ + 1))
    sources = run.sources(["a", "b", "c"])
    before, after = nt.exposure(first, sources), nt.exposure(second, sources)
    assert np.bincount(after.source_of_row, minlength=3).tolist() == [at[720][k] - at[420][k] for k in range(3)]
    requested = neox_sem.normalized_weights_and_num_samples(STOCK_WEIGHTS, 240 * 4)[1]
    for k, name in enumerate("abc"):
        got = predicted["exposure"][name]
        both = before.counts[name] + after.counts[name]
        assert got["resumed"]["tokens"] == {str(t): int(n) for t, n in enumerate(np.bincount(both)) if n}, name
        assert got["resumed"]["token_exposures"] == at[420][k] * SEQ // 2 + (at[720][k] - at[420][k]) * SEQ
        prefix = run.path("data", name)
        (old,) = glob.glob(f"{prefix}_train_{k}_indexmap_{requested[k]}ns_{SEQ // 2}sl_*_doc_idx.npy")
        items = at[420][k] + (at[720][k] - at[420][k]) * 2
        continued = nt.drawn_token_counts(prefix, old[: -len("_doc_idx.npy")], 0, items)
        assert got["continued"]["tokens"] == {str(t): int(n) for t, n in enumerate(np.bincount(continued)) if n}, name
    # a source larger than the window is summed window by window (here windows of 2,000 tokens): the same bins, from
    # the saved checkpoint's tag and NeoX's own new index (the resumed launch has built it by now)
    from neox_epoch.cli import main
    from neox_epoch.resume import exposure as resume_exposure

    monkeypatch.setattr(resume_exposure, "WINDOW_TOKENS", 2000)
    assert (
        main(
            ["resume-check", run.path("ckpt", f"global_step{SEQ_STOP}"), run.path("check.yml"), "--json", "--exposure"]
        )
        == 1
    )
    windowed = json.loads(capsys.readouterr().out)["exposure"]
    for name in "abc":
        got = predicted["exposure"][name]
        assert (windowed[name]["resumed"], windowed[name]["continued"]) == (got["resumed"], got["continued"]), name
        assert "windows of documents of at most 2000 tokens" in windowed[name]["note"], windowed[name]["note"]


# ------------------------------------------------------------------------------------------------------------
# one source, epochs: 1, through the patch and NeoX's own deepy.py


@pytest.fixture(scope="module")
def patched_neox(tmp_path_factory: pytest.TempPathFactory) -> str:
    tree = _neox_copy(str(tmp_path_factory.mktemp("neox")))
    subprocess.run(["git", "init", "-q"], cwd=tree, check=True)
    subprocess.run(["git", "apply", os.path.join(ROOT, "patches", "neox_epoch_hook.patch")], cwd=tree, check=True)
    return tree


@pytest.fixture(scope="module")
def one_source_run(tmp_path_factory: pytest.TempPathFactory, patched_neox: str) -> Run:
    run = _new_run(tmp_path_factory, "one")
    _ok(_launch(run, _config(run.root, ["a"], {"epochs": 1}, eval_interval=50), "one", patched_neox, via="deepy"))
    return run


def test_one_source_epoch_through_the_patch(one_source_run: Run) -> None:
    plan = one_source_run.plan()
    (row,) = plan["sources"]
    rec = one_source_run.recorded()
    # one pass: 403 samples of 404 (NeoX's len-1) -> 100 iterations of 4; the last 3 fall in the remainder
    assert (plan["train_iters"], row["samples_drawn"], row["epochs_built"]) == (100, 400, 1)
    assert sorted(set(rec.iterations.tolist())) == list(range(1, 101))
    ex = nt.exposure(rec, one_source_run.sources(["a"]))
    hist = ex.histogram("a")
    assert hist == {0: row["tokens_unseen"], 1: 51747 - row["tokens_unseen"]}  # no token twice
    assert hist[0] == 547  # 3 remainder samples + NeoX's len-1 sample (4 x 128) and the stream's last 35 tokens
    assert "neox_epoch: hooks installed" in one_source_run.outputs[0]


# ------------------------------------------------------------------------------------------------------------
# train_epochs: NeoX's own key, planned exactly, each epoch shuffled on its own, across a resume


@pytest.fixture(scope="module")
def epochs_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    run = _new_run(tmp_path_factory, "epochs")
    cfg = _config(
        run.root,
        ["b"],
        {"separate_epochs": True},
        train_epochs=2,
        train_data_weights=None,
        valid_data_weights=None,
        test_data_weights=None,
        checkpoint_factor=60,
    )
    _ok(_launch(run, {**cfg, "exit_interval": 60}, "first", frameworks.neox_dir()))
    _ok(_launch(run, cfg, "resumed", frameworks.neox_dir()))
    # its last checkpoint resumed with another seed (a setting the data fingerprint holds), logs and saves apart
    _launch(
        run,
        {
            **cfg,
            "seed": 4321,
            "save": run.path("ckpt-reseeded"),
            "tensorboard_dir": run.path("tb-reseeded"),
            "neox_epoch": {**cfg["neox_epoch"], "log_dir": run.path("logs", "reseeded")},
        },
        "reseeded",
        frameworks.neox_dir(),
    )
    return run


def test_a_resume_without_stages_on_changed_data_settings_stops(epochs_run: Run) -> None:
    """No stages: a resume whose data fingerprint differs (seed 1234 -> 4321) stops before its first step with one
    line naming the change, the checkpoint and the fix (allow_data_change); nothing is trained."""
    k = epochs_run.launches.index("reseeded")
    out = epochs_run.outputs[k]
    lines = [ln for ln in out.splitlines() if "the data changed since the checkpoint" in ln]
    assert lines, out[-4000:]
    assert (
        "the data changed since the checkpoint: seed 1,234 -> 4,321 (global_step97); resume on the data the "
        'checkpoint was trained on, or set "allow_data_change": true' in lines[0]
    )
    assert "Traceback" not in lines[0]
    rec = epochs_run.recorded()
    assert int(np.sum(rec.launches == k)) == 0

    # resume-check on the same checkpoint and config says so first: a data-changed finding (and, on the config the
    # run was trained with, the comparison as a note)
    def check(name: str) -> dict[str, Any]:
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "neox_epoch.cli",
                "resume-check",
                epochs_run.path("ckpt"),
                epochs_run.path(f"{name}.yml"),
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode in (0, 1), r.stderr
        return dict(json.loads(r.stdout))

    (finding,) = [f for f in check("reseeded")["findings"] if f.startswith("data-changed:")]
    assert finding.startswith(
        "data-changed: the data changed since the checkpoint: seed 1,234 -> 4,321; the hooks stop before the first step"
    )
    assert "data fingerprint: unchanged since the checkpoint" in check("resumed")["notes"]


def test_train_epochs_each_epoch_shuffled_on_its_own_across_a_resume(epochs_run: Run) -> None:
    plan = epochs_run.plan()
    (row,) = plan["sources"]
    rec = epochs_run.recorded()
    assert (row["samples_per_epoch"], row["epochs_built"], row["target_passes"]) == (195, 2, 2.0)
    assert plan["train_iters"] == 97 and plan["separate_epochs"]
    assert sorted(set(rec.iterations.tolist())) == list(range(1, 98))
    ex = nt.exposure(rec, epochs_run.sources(["b"]))
    # 388 of 389 samples (remainder 1 under one global batch): every token twice except the remainder's
    assert ex.histogram("b") == {1: 296, 2: 24684}
    cum = nt.draws_by_iteration(rec, ex, 0, 97)
    (start,) = [r for r in epochs_run.jsonl() if r["event"] == "pass_start"]
    # pass 2 starts at sample ceil(24980 / 128) = 196 of the separated index: the 197th draw, in iteration 50
    assert nt.pass_starts(cum, [196]) == [start["iteration"]] == [50]


# ------------------------------------------------------------------------------------------------------------
# enforce: a run that draws more than was built stops before it trains a replayed sample


def test_enforce_stops_before_a_replayed_sample(tmp_path_factory: pytest.TempPathFactory) -> None:
    run = _new_run(tmp_path_factory, "enforce")
    # 101 iterations x 4 = 404 samples; one source with the buffer at 1.0: NeoX's blend offers 403 (len-1)
    cfg = _config(run.root, ["a"], {"blend_buffer": 1.0, "enforce": True}, train_iters=101)
    r = _launch(run, cfg, "enforce", frameworks.neox_dir())
    assert r.returncode != 0
    text = r.stdout + r.stderr
    line = (
        "neox-epoch worker: error: neox_epoch: train_iters 101: at iteration 101: the train loader's 100 batches "
        "are used up after iteration 100"
    )
    assert line in text, text[-4000:]
    assert run.recorded().texts.shape[0] == 0  # stopped while building the data: nothing trained


# ------------------------------------------------------------------------------------------------------------
# two "nodes" on one machine: DeepSpeed's pdsh launcher over ssh to localhost and 127.0.0.1


def test_multi_node_launch_over_ssh_reaches_every_rank(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The block travels in NEOX_EPOCH_BLOCK, which launch adds to DeepSpeed's exported prefixes: pdsh's command
    line exports it to each node, and each rank's worker refuses to start without it. The world (2, one slot per
    host in the hostfile) is the one check-batch computes from the same config."""
    import local_sshd

    run = _new_run(tmp_path_factory, "nodes")
    tree = _neox_copy(run.root)
    hostfile = run.path("hostfile")
    with open(hostfile, "w", encoding="utf-8") as f:
        f.write("localhost slots=1\n127.0.0.1 slots=1\n")
    # what pdsh does not export (DeepSpeed's CPU accelerator exports nothing) goes through DeepSpeed's own env file
    with open(os.path.join(tree, ".deepspeed_env"), "w", encoding="utf-8") as f:
        f.write(f"DS_ACCELERATOR=cpu\nTORCH_EXTENSIONS_DIR={os.path.join(frameworks.CACHE, 'torch-extensions')}\n")
    cfg = _config(
        run.root,
        ["b"],
        {"epochs": 1},
        num_gpus=None,
        global_num_gpus=None,
        hostfile=hostfile,
        master_addr="127.0.0.1",
        master_port=local_sshd.free_port(),
    )
    check = subprocess.run(
        [sys.executable, "-m", "neox_epoch.cli", "check-batch", "--json", _write(run, cfg, "nodes")],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, DS_ACCELERATOR="cpu"),
    )
    world = json.loads(check.stdout)
    with local_sshd.local_sshd(run.path("sshd")) as ssh_env:
        r = _launch(run, cfg, "nodes", tree, extra_env=ssh_env)
    _ok(r)
    text = r.stdout + r.stderr
    assert "pdsh -S -f 1024 -w localhost,127.0.0.1" in text and f"export {ENV_VAR}=" in text
    plan = run.plan()
    assert world["world_size"] == 2 and plan["train_batch_size"] == world["train_batch_size"] == 4
    rec = run.recorded()
    assert sorted(set(rec.ranks.tolist())) == [0, 1]  # both nodes' ranks trained under the worker
    assert np.bincount(rec.iterations)[1:].tolist() == [4] * plan["train_iters"]
    ex = nt.exposure(rec, run.sources(["b"]))
    (row,) = plan["sources"]
    assert ex.histogram("b") == {0: row["tokens_unseen"], 1: 24980 - row["tokens_unseen"]}
