"""NeoX integration (issue 4): the neox_epoch block, neox-epoch launch, the hooks, the counters, the patch.

Unit tests (block validation, config cleaning, launcher argv rewriting, counters math, planning from
NeoX values) run anywhere. Tests marked ``neox`` run real GPT-NeoX in a subprocess: the checkout and the
interpreter come from tests/helpers/frameworks.py (``NEOX_DIR``/``NEOX_PYTHON`` when set, else the vendored copy
extracted into .cache and a venv built there once by scripts/neox_env.sh: NeoX's code wants deepspeed
0.16-era APIs, numpy<2 and its compiled helpers).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import frameworks
import numpy as np
import pytest
import yaml

from neox_epoch.errors import ConfigError, NeoxEpochError
from neox_epoch.formats.neox_config import EpochBlock, load_neox_configs
from neox_epoch.neox.block import ENV_VAR, HookBlock, decode_env, from_environ, parse_block
from neox_epoch.neox.counters import JSONL_NAME, JsonlSink, counters_for
from neox_epoch.neox.launch import clean_configs, strip_block_text, worker_argv
from neox_epoch.neox.planning import make_run_plan
from neox_epoch.neox.worker import split_argv
from neox_epoch.plan.exact import exact_plan
from neox_epoch.plan.from_neox import plan_input_from_neox
from neox_epoch.semantics import blend, neox_index

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ------------------------------------------------------------------------------------------------------------
# block


def test_block_validation_and_did_you_mean():
    hb = parse_block({"epochs": 2, "separate-epochs": True, "log_dir": "x"})
    assert hb.block.epochs == 2 and hb.block.separate_epochs and hb.settings == {}
    with pytest.raises(ConfigError, match='did you mean "epochs"'):
        parse_block({"epoch": 1})
    with pytest.raises(ConfigError, match="blend_buffer"):
        parse_block({"epochs": 1, "blend_buffer": 0.5})
    with pytest.raises(ConfigError, match="enforce"):
        parse_block({"epochs": 1, "enforce": "yes"})
    with pytest.raises(ConfigError, match="targets"):
        parse_block({"epochs": 1, "targets": {"a": -1}, "weights": [1.0]})
    hb = parse_block({"epochs": {"a": 1, "b": 2}, "targets": {"a": 10, "b": 20}, "weights": [10.0, 20.0]})
    assert hb.settings["targets"] == {"a": 10, "b": 20}
    assert issubclass(ConfigError, NeoxEpochError)


def test_block_env_round_trip():
    hb = HookBlock(EpochBlock(epochs=1.5, separate_epochs=True, enforce=True), {"train_iters": 7})
    back = decode_env(hb.to_env())
    assert back.block == hb.block and back.settings == {"train_iters": 7}
    assert from_environ({}) is None
    assert from_environ({ENV_VAR: hb.to_env()}).block.epochs == 1.5
    with pytest.raises(ConfigError, match=ENV_VAR):
        decode_env("not base64 json")


# ------------------------------------------------------------------------------------------------------------
# config cleaning and argv rewriting


FLOW = """# comment kept
{
  "seq_length": 32,  # inline comment kept
  "neox_epoch": {"epochs": 1, "log_dir": "logs"},
  "train_iters": 5,
}
"""
BLOCK_STYLE = """seq_length: 32
neox-epoch:
  epochs: 2
  separate_epochs: true
train_iters: 5
"""


@pytest.mark.parametrize("text", [FLOW, BLOCK_STYLE])
def test_strip_block_keeps_the_rest(text):
    out, raw = strip_block_text(text, "x.yml")
    assert raw is not None and "neox" not in out.replace("# comment", "")
    assert yaml.safe_load(out) == {"seq_length": 32, "train_iters": 5}
    if text is FLOW:
        assert "# comment kept" in out and "# inline comment kept" in out


def test_clean_configs_never_touches_user_files(tmp_path):
    a, b = tmp_path / "a.yml", tmp_path / "b.yml"
    a.write_text(FLOW)
    b.write_text("{seed: 3}\n")
    work = tmp_path / "work"
    work.mkdir()
    cleaned, hb = clean_configs([str(a), str(b)], str(work))
    assert a.read_text() == FLOW and hb is not None and hb.block.log_dir == "logs"
    assert [os.path.basename(p) for p in cleaned] == ["a.yml", "b.yml"]
    assert "neox_epoch" not in yaml.safe_load(open(cleaned[0]))
    c = tmp_path / "c.yml"
    c.write_text(BLOCK_STYLE)
    work2 = tmp_path / "work2"
    work2.mkdir()
    with pytest.raises(ConfigError, match="keep it in one file"):
        clean_configs([str(a), str(c)], str(work2))


def test_worker_argv_and_split():
    argv = ["--num_gpus", "2", "train.py", "--deepspeed_config", "X", "--megatron_config", "Y"]
    new = worker_argv(argv, "train.py")
    assert new == [
        "--module",
        "--num_gpus",
        "2",
        "neox_epoch.neox.worker",
        "train.py",
        "--deepspeed_config",
        "X",
        "--megatron_config",
        "Y",
    ]
    # what deepspeed.launcher.launch then runs: python -u -m neox_epoch.neox.worker --local_rank=0 train.py ...
    assert split_argv(["--local_rank=0", "train.py", "--deepspeed_config", "X"]) == (
        "train.py",
        ["--local_rank=0", "--deepspeed_config", "X"],
    )
    with pytest.raises(ConfigError):
        worker_argv(argv, "other.py")


# ------------------------------------------------------------------------------------------------------------
# counters


def test_counters_equal_exact_greedy_replay_and_markers():
    w = blend.normalize([5.0, 2.0, 3.0])
    spe = [90, 37, 61]
    bounds = [[90, 180], [37, 74, 111], [61]]
    c = counters_for(["a", "b", "c"], spe, bounds, [2, 3, 1], w, train_batch_size=8, train_iters=97, log_interval=10)
    for k in list(range(0, 98)):
        assert c.counts_at(k) == blend.greedy_counts(w, k * 8), k
    p = c.passes_at(50)
    want = blend.greedy_counts(w, 400)
    assert [p[n]["samples"] for n in "abc"] == want
    assert p["a"]["passes"] == round(want[0] / 90, 6)
    # markers: the iteration consuming the blend position of each source's first sample of pass 2, 3, ...
    dataset_index = np.zeros(97 * 8, dtype=np.int64)
    counts = [0, 0, 0]
    for s in range(97 * 8):
        i = blend.advance(w, s, counts, s + 1)[0]
        dataset_index[s] = [x - y for x, y in zip(i, counts)].index(1)
        counts = i
    for m in c.markers:
        i = "abc".index(m.source)
        pos = np.flatnonzero(dataset_index == i)[bounds[i][m.pass_number - 2]]
        assert m.sample == pos and m.iteration == pos // 8 + 1


def test_counters_direct_dataset_and_resume(tmp_path):
    sink = JsonlSink(str(tmp_path))
    scalars = []
    c = counters_for(
        ["web"],
        [100],
        [[100, 200]],
        [2.5],
        None,
        train_batch_size=4,
        train_iters=60,
        log_interval=5,
        sink=sink,
        scalar=lambda k, v, it: scalars.append((k, v, it)),
    )
    assert [m.iteration for m in c.markers] == [26, 51]
    c.start(30)  # resumed from a checkpoint at iteration 30
    for it in range(31, 61):
        c.step(it)
    report = c.final(60)
    recs = [json.loads(x) for x in open(tmp_path / JSONL_NAME)]
    assert recs[0]["event"] == "resume" and recs[0]["iteration"] == 30 and recs[0]["sources"]["web"]["samples"] == 120
    assert [r["iteration"] for r in recs if r["event"] == "pass_start"] == [51]  # 26 was before the resume
    its = [r["iteration"] for r in recs if r["event"] == "counters"]
    assert its == list(range(35, 61, 5))
    assert report["sources"]["web"]["samples"] == 240 and report["sources"]["web"]["pass"] == 3
    assert scalars[0] == ("neox_epoch/passes/web", 1.4, 35)
    # another rank: inactive, writes nothing
    c2 = counters_for(["web"], [100], [[100]], [1], None, 4, 60, 5, active=False)
    c2.start(0)
    c2.step(5)


def test_epoch_separated_shuffle_groups():
    starts = neox_index.epoch_starts(tokens=1000, seq_length=10, epochs=3)
    assert starts == [0, 100, 200, 299]
    sh = neox_index.separated_shuffle(starts, np.random.RandomState(0))
    assert sh.dtype == np.uint32 and sorted(sh.tolist()) == list(range(299))
    for a, b in zip(starts[:-1], starts[1:]):
        assert sorted(sh[a:b].tolist()) == list(range(a, b))
    assert neox_index.pass_boundaries(1000, 10, 3, True, 99) == [100, 200]
    assert neox_index.pass_boundaries(1000, 10, 3, False, 99) == [99, 198]


# ------------------------------------------------------------------------------------------------------------
# planning from NeoX values (no NeoX needed)


def test_run_plan_from_neox_values(corpus, tmp_path):
    a, b = corpus("a", 1, 80, 5, 120), corpus("b", 2, 40, 5, 90)
    values = {
        "train_data_paths": [a, b],
        "valid_data_paths": [a],
        "test_data_paths": [a],
        "seq_length": 16,
        "train_batch_size": 4,
        "eval_interval": 100,
        "eval_iters": 1,
        "train_data_weights": [1.0, 1.0],
    }
    rp = make_run_plan(values, EpochBlock(epochs={"a": 1, "b": 2}))
    cfg_path = tmp_path / "c.yml"
    cfg_path.write_text(yaml.safe_dump(values))
    inp = plan_input_from_neox(load_neox_configs([str(cfg_path)], check_keys=False))
    ref = exact_plan(inp, {"a": 1.0, "b": 2.0})
    assert rp.train_iters == ref.train_iters
    assert rp.exact_targets == tuple(ref.settings["targets"].values())
    assert [s.samples_drawn for s in rp.train] == list(rp.exact_targets)
    back = make_run_plan(values, EpochBlock(epochs={"a": 1, "b": 2}), rp.settings())
    assert back.train_iters == rp.train_iters
    with pytest.raises(NeoxEpochError, match="train_iters"):
        make_run_plan(values, EpochBlock(epochs={"a": 1, "b": 2}), {**rp.settings(), "train_iters": 1})
    with pytest.raises(NeoxEpochError, match="separate_epochs"):
        make_run_plan(
            {**values, "train_data_paths": [a], "train_data_weights": [1.0]}, EpochBlock(epochs=1.5, enforce=True)
        )
    with pytest.raises(ConfigError, match="unknown source"):
        make_run_plan(values, EpochBlock(epochs={"zzz": 1}))


# ------------------------------------------------------------------------------------------------------------
# with GPT-NeoX


def _neox_env() -> dict[str, str]:
    env = dict(os.environ, DS_ACCELERATOR="cpu", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop(ENV_VAR, None)
    return env


def _probe(tmp_path, name, args, block):
    case = tmp_path / f"{name}.json"
    case.write_text(json.dumps({"args": args, "block": block}))
    out = tmp_path / f"{name}.out.json"
    neox_dir = frameworks.neox_dir()
    r = subprocess.run(
        [
            frameworks.neox_python(),
            "-m",
            "neox_epoch.neox.probe",
            "--neox-dir",
            neox_dir,
            "--case",
            str(case),
            "--out",
            str(out),
        ],
        cwd=neox_dir,
        env=_neox_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads(out.read_text()), r.stdout + r.stderr  # (the hooks' warnings go to stderr)


def _hist(src):
    return {int(k): v for k, v in src["histogram"].items()}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from neox_epoch.formats.corpus import write_random_corpus

    d = tmp_path_factory.mktemp("neox_data")
    specs = {"a": (11, 300, 5, 200), "b": (12, 150, 5, 150), "c": (13, 400, 5, 100), "v": (14, 30, 5, 100)}
    for name, (seed, docs, lo, hi) in specs.items():
        write_random_corpus(str(d / name), seed, docs, lo, hi)
    return d


def _paths_args(d, names, weights, tbs=8):
    return {
        "train_data_paths": [str(d / n) for n in names],
        "valid_data_paths": [str(d / "v")],
        "test_data_paths": [str(d / "v")],
        "train_data_weights": weights,
        "valid_data_weights": [1.0],
        "test_data_weights": [1.0],
        "seq_length": 32,
        "train_batch_size": tbs,
        "eval_interval": 100,
        "eval_iters": 2,
    }


def _fresh(d, tmp_path, sub):
    """A copy of the corpora in its own directory, so NeoX's cache files of one run are not reused by another."""
    t = tmp_path / sub
    shutil.copytree(d, t, ignore=shutil.ignore_patterns("*.npy"))
    return t


def _check_exact(src, passes, tokens_unseen_planned=None):
    """Every token seen floor(p) or ceil(p) times; never more than ceil(p); the deficit is the undrawn stream."""
    h = _hist(src)
    hi = int(np.ceil(passes - 1e-9))
    assert max(h) <= hi, (src["name"], h)
    assert min(h) >= hi - 1, (src["name"], h)
    deficit = sum((hi - k) * v for k, v in h.items())
    assert deficit == hi * src["tokens"] - src["input_tokens"]
    assert src["wrapped"] == 0
    if tokens_unseen_planned is not None:
        assert h.get(0, 0) == tokens_unseen_planned


@pytest.mark.neox
def test_one_source_exact_and_stock_spillover(data, tmp_path):
    d = _fresh(data, tmp_path, "one")
    got, log = _probe(
        tmp_path, "one", _paths_args(d, ["a"], [1.0], tbs=4), {"epochs": 1, "log_dir": str(tmp_path / "l")}
    )
    (src,) = got["sources"]
    row = got["table"][0]
    assert src["epochs"] == 1 and row["epochs_built"] == 1
    _check_exact(src, 1.0, row["tokens_unseen"])
    # unseen = the samples of the pass not drawn (remainder under one global batch + NeoX's len-1) + the tail
    assert _hist(src).get(0, 0) < (row["samples_per_epoch"] - row["samples_drawn"] + 1) * 32
    # the run NeoX would make for the same train_iters asks 1.005x -> more than one epoch (the headline problem)
    assert int(np.ceil(got["samples"] * 1.005)) > row["samples_per_epoch"]
    assert "neox_epoch: exact plan" in log and got["counter_mismatches"] == []
    recs = [json.loads(x) for x in open(tmp_path / "l" / JSONL_NAME)]
    assert recs[0]["event"] == "plan" and recs[-1]["event"] == "final" and recs[-1]["complete"]
    # stock NeoX, same train_iters: 1.005 -> 2 epochs shuffled together -> spillover
    d2 = _fresh(data, tmp_path, "one_stock")
    stock, _ = _probe(
        tmp_path, "one_stock", {**_paths_args(d2, ["a"], [1.0], tbs=4), "train_iters": got["train_iters"]}, None
    )
    (s2,) = stock["sources"]
    h2 = _hist(s2)
    assert s2["epochs"] == 2 and h2.get(0, 0) > 0.1 * s2["tokens"] and h2.get(2, 0) > 0.1 * s2["tokens"]


@pytest.mark.neox
def test_weighted_blend_per_source_epochs(data, tmp_path):
    d = _fresh(data, tmp_path, "blend")
    block = {"epochs": {"a": 1, "b": 2, "c": 0.5}, "enforce": True, "log_dir": str(tmp_path / "l")}
    got, log = _probe(tmp_path, "blend", _paths_args(d, ["a", "b", "c"], [1.0, 1.0, 1.0]), block)
    by = {s["name"]: s for s in got["sources"]}
    rows = {r["dataset"]: r for r in got["table"]}
    _check_exact(by["train_0"], 1.0, rows["train_0"]["tokens_unseen"])
    _check_exact(by["train_1"], 2.0)
    c = _hist(by["train_2"])
    assert max(c) == 1 and c[1] == by["train_2"]["input_tokens"]  # half a pass: each token at most once
    assert got["counter_mismatches"] == []  # live counters == the real blend's draws at every 7th iteration
    final = got["final"]["sources"]
    assert final["b"]["passes"] == pytest.approx(2.0, abs=1e-3) and final["b"]["pass"] == 2
    assert "source b starts pass 2 at iteration" in log
    # stock NeoX with the same train_iters and weights proportional to the targets: spillover on a and b
    targets = got["plan"]["targets"]
    d2 = _fresh(data, tmp_path, "blend_stock")
    stock, _ = _probe(
        tmp_path,
        "blend_stock",
        {**_paths_args(d2, ["a", "b", "c"], [float(targets[k]) for k in "abc"]), "train_iters": got["train_iters"]},
        None,
    )
    sa = stock["sources"][0]
    assert sa["epochs"] == 2 and _hist(sa).get(0, 0) > 0.1 * sa["tokens"]


@pytest.mark.neox
def test_loader_used_up_warning_names_the_iteration(data, tmp_path):
    """Observe mode, buffer 1.0, one source, batch 1, train_iters = samples per epoch: NeoX builds one epoch, its
    blend offers one sample less (len-1), and the loader's itertools.cycle would replay its first sample in the
    last iteration; the hooks' warning names that iteration (with enforce, the same line is a WrapError)."""
    from neox_epoch.formats.idx import read_header, sizes_memmap

    d = _fresh(data, tmp_path, "used_up")
    spe = (int(np.sum(sizes_memmap(read_header(str(d / "a"))), dtype=np.int64)) - 1) // 32
    args = {**_paths_args(d, ["a"], [1.0], tbs=1), "train_iters": spe}
    _, log = _probe(tmp_path, "used_up", args, {"blend_buffer": 1.0})
    assert (
        f"neox_epoch: train_iters {spe}: at iteration {spe}: the train loader's {spe - 1} batches are used up "
        f"after iteration {spe - 1} and NeoX's itertools.cycle would replay them from its first batch"
    ) in log
    case = tmp_path / "used_up_enforce.json"
    case.write_text(json.dumps({"args": args, "block": {"blend_buffer": 1.0, "enforce": True}}))
    r = subprocess.run(
        [
            frameworks.neox_python(),
            "-m",
            "neox_epoch.neox.probe",
            "--neox-dir",
            frameworks.neox_dir(),
            "--case",
            str(case),
            "--out",
            str(tmp_path / "x.json"),
        ],
        cwd=frameworks.neox_dir(),
        env=_neox_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode != 0 and f"WrapError: neox_epoch: train_iters {spe}: at iteration {spe}:" in r.stderr


def test_replay_guard_counts_batches_from_the_resumed_iteration():
    """The guard over NeoX's train iterator: position = iteration * gas + batches taken (not NeoX's offset modulo
    the loader), so a resumed run that would replay is caught at the same iteration as an uninterrupted one."""
    from types import SimpleNamespace

    from neox_epoch.neox.hook_state import ReplayGuard, WrapError

    args = SimpleNamespace(iteration=3, gradient_accumulation_steps=2)
    guard = ReplayGuard(iter(range(100)), args, batches=10, enforce=True)
    assert [next(guard) for _ in range(4)] == [0, 1, 2, 3]  # batches 6..9 of 10
    args.iteration = 5
    with pytest.raises(WrapError, match="iteration 6: the train loader's 10 batches are used up after iteration 5"):
        next(guard)
    loose = ReplayGuard(iter(range(100)), SimpleNamespace(iteration=5, gradient_accumulation_steps=2), 10, False)
    assert next(loose) == 0 and loose.warned  # without enforce: one warning, the batch is still returned


#: in-process hooks, then NeoX's own get_learning_rate_scheduler on the args the hooks left (pretrain builds the
#: data loaders before setup_model_and_optimizer builds the scheduler)
LR_SCRIPT = textwrap.dedent("""
    import json, sys, tempfile
    import torch
    import megatron.training as training
    import neox_epoch.neox
    from neox_epoch.neox.probe import init_cpu, neox_args
    case = json.loads(sys.argv[1])
    init_cpu(tempfile.mkdtemp())
    args = neox_args(**case["args"])
    neox_epoch.neox.install(case["block"])
    training.build_train_valid_test_data_loaders(neox_args=args)
    training.update_iterations(neox_args=args, data_loaders={"train": None})
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=case["args"]["lr"])
    sched = training.get_learning_rate_scheduler(opt, args)
    print(json.dumps({"train_iters": args.train_iters, "end_iter": sched.end_iter, "warmup_iter": sched.warmup_iter}))
""")


@pytest.mark.neox
def test_hooks_schedule_reaches_neox_scheduler(data, tmp_path):
    """train_iters 320000 and lr_decay_iters 320000 in NeoX's args: after the hooks, NeoX's AnnealingLR decays
    over the planned train_iters and warms up for warmup * that (not 0.01 * 320000 = 3200 iterations)."""
    d = _fresh(data, tmp_path, "lr")
    args = {
        **_paths_args(d, ["a"], [1.0]),
        "train_iters": 320000,
        "lr_decay_iters": 320000,
        "warmup": 0.01,
        "lr": 0.001,
        "min_lr": 0.0,
        "lr_decay_style": "cosine",
        "no_load_optim": False,
        "deepspeed": True,
        "optimizer_type": "adam",
        "use_checkpoint_lr_scheduler": False,
        "override_lr_scheduler": False,
        "use_mup": False,
    }
    r = subprocess.run(
        [frameworks.neox_python(), "-c", LR_SCRIPT, json.dumps({"args": args, "block": {"epochs": 1}})],
        cwd=frameworks.neox_dir(),
        env=_neox_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["train_iters"] < 320000 and got["end_iter"] == got["train_iters"]
    assert got["warmup_iter"] == pytest.approx(0.01 * got["train_iters"])
    assert f"lr_decay_iters 320000 -> {got['train_iters']}" in r.stdout + r.stderr


@pytest.mark.neox
def test_data_path_split_separate_epochs(data, tmp_path):
    d = _fresh(data, tmp_path, "split")
    args = {
        "data_path": str(d / "a"),
        "split": "90,5,5",
        "seq_length": 32,
        "train_batch_size": 8,
        "eval_interval": 100,
        "eval_iters": 2,
    }
    got, log = _probe(tmp_path, "split", args, {"epochs": 1.5, "separate_epochs": True})
    (src,) = got["sources"]
    assert src["epochs"] == 2 and "epoch-separated index" in log
    _check_exact(src, 1.5)  # every token once or twice, none unseen
    assert set(_hist(src)) == {1, 2}
    assert any(
        f.endswith("-sepep_indexmap_" + f.split("-sepep_indexmap_")[-1])
        for f in os.listdir(d)
        if "-sepep_indexmap_" in f
    )
    d2 = _fresh(data, tmp_path, "split_stock")
    stock, _ = _probe(
        tmp_path, "split_stock", {**args, "data_path": str(d2 / "a"), "train_iters": got["train_iters"]}, None
    )
    assert _hist(stock["sources"][0]).get(0, 0) > 0  # jointly shuffled epochs: some tokens never seen


NEOX_CONFIG = """# CPU test config
{{
  "train_data_paths": ["{a}"], "valid_data_paths": ["{v}"], "test_data_paths": ["{v}"],
  "train_data_weights": [1.0], "valid_data_weights": [1.0], "test_data_weights": [1.0],
  "data_impl": "mmap",
  "neox_epoch": {{"epochs": 1, "log_dir": "{logs}"}},  # the plugin's block
  "seq_length": 32, "max_position_embeddings": 32,
  "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
  "num_gpus": 2, "global_num_gpus": 2, "log_interval": 10,
  "eval_interval": 100, "eval_iters": 2,
  "num_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
  "tokenizer_type": "CharLevelTokenizer",
}}
"""

#: a user script for CPU workers: NeoX's own argument handling and data path, with the one CUDA-only step of
#: initialize_megatron replaced by a gloo group (written by the test, run by the real deepspeed launcher)
CPU_SCRIPT = textwrap.dedent("""
    import json, os, sys
    import torch
    from megatron.neox_arguments import NeoXArgs
    from megatron import mpu
    import megatron.training as training
    from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology

    neox_args = NeoXArgs.consume_neox_args()
    neox_args.configure_distributed_args()
    torch.distributed.init_process_group("gloo")
    mpu.initialize_model_parallel(1, topology=PipeModelDataParallelTopology(num_pp=1, num_mp=1, num_dp=2))
    torch.cuda.LongTensor = lambda data: torch.tensor(data, dtype=torch.long)
    loaders = training.build_train_valid_test_data_loaders(neox_args=neox_args)
    training.update_iterations(neox_args=neox_args, data_loaders=loaders)
    import neox_epoch.neox.installer as inst
    c = inst.current().counters
    c.start(0)
    for it in range(1, neox_args.train_iters + 1):
        c.step(it)
    c.final(neox_args.train_iters)
    batch = next(iter(loaders["train"]))
    out = {"rank": torch.distributed.get_rank(), "train_iters": neox_args.train_iters,
           "len_train": len(loaders["train"].dataset), "batch": list(batch["text"].shape)}
    open(os.environ["PROBE_OUT"] + str(out["rank"]), "w").write(json.dumps(out))
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
    os._exit(0)  # skip the interpreter teardown, where a CPU rank aborts now and then (rc -6)
""")


def _launch(tmp_path, data, script, dry_run, extra_env=None, config=NEOX_CONFIG):
    d = _fresh(data, tmp_path, "launch")
    cfg = tmp_path / "run.yml"
    cfg.write_text(config.format(a=d / "a", v=d / "v", logs=tmp_path / "logs"))
    before = cfg.read_text()
    cmd = (
        [frameworks.neox_python(), "-m", "neox_epoch.cli", "launch"]
        + (["--dry-run"] if dry_run else [])
        + [script, str(cfg)]
    )
    env = {**_neox_env(), "PROBE_OUT": str(tmp_path / "rank"), "MASTER_PORT": "29517", **(extra_env or {})}
    r = subprocess.run(cmd, cwd=frameworks.neox_dir(), env=env, capture_output=True, text=True, timeout=900)
    assert cfg.read_text() == before
    return r


@pytest.mark.neox
def test_launch_dry_run_through_deepy(data, tmp_path):
    r = _launch(tmp_path, data, "train.py", dry_run=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    argv, mc = out["launcher_argv"], out["megatron_config"]
    assert list(out)[:2] == ["version", "schema"] and out["schema"] == 1  # neox_epoch.util.schema's stamp
    assert argv[0] == "--module" and argv[argv.index("neox_epoch.neox.worker") + 1] == "train.py"
    assert "--num_gpus" in argv and argv[argv.index("--num_gpus") + 1] == "2"
    assert "neox_epoch" not in mc and mc["train_iters"] == out["settings"]["train_iters"]
    assert mc["train_batch_size"] == 8 == out["settings"]["train_batch_size"]
    assert all('"neox_epoch":' not in t for t in mc["config_files"].values())
    assert "# the plugin's block" in next(iter(mc["config_files"].values()))  # comments kept
    assert decode_env(out["env"][ENV_VAR]).settings["train_iters"] == mc["train_iters"]
    assert out["export_prefix"] == "NEOX_EPOCH" and ENV_VAR.startswith(out["export_prefix"])


@pytest.mark.neox
def test_launch_dry_run_passes_the_schedule_to_neox(data, tmp_path):
    """A shipped-style train_iters 320000 / lr_decay_iters 320000: the worker config NeoX builds (its own
    from_ymls with launch's overwrite values) has lr_decay_iters = the planned train_iters, and stderr says so."""
    config = NEOX_CONFIG.replace(
        '"eval_interval": 100,', '"eval_interval": 100, "train_iters": 320000, "lr_decay_iters": 320000,'
    )
    r = _launch(tmp_path, data, "train.py", dry_run=True, config=config)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    mc = out["megatron_config"]
    assert mc["train_iters"] == out["settings"]["train_iters"] < 320000
    assert mc["lr_decay_iters"] == mc["train_iters"]
    assert f"neox_epoch: train_iters: 320000 -> {mc['train_iters']} (set): exact mode" in r.stderr
    assert f"neox_epoch: lr_decay_iters: 320000 -> {mc['train_iters']} (scaled)" in r.stderr
    assert [e["key"] for e in out["schedule"]][:2] == ["train_iters", "lr_decay_iters"]


@pytest.mark.neox
def test_launch_two_cpu_ranks_train_py_stops_at_cuda_assert(data, tmp_path):
    r = _launch(tmp_path, data, "train.py", dry_run=False)
    text = r.stdout + r.stderr
    assert r.returncode != 0
    assert text.count("spawned with command") == 2 and "neox_epoch.neox.worker" in text
    # the hooks were in place in the worker: rank 0 logs it, but the launcher may stop rank 0 before it logs when
    # the other rank reaches NeoX's CUDA assert first (seen in CI); a traceback that passes through the worker's
    # runpy.run_path shows that install() had returned on the failing rank (it runs just before)
    through_worker = os.path.join("neox_epoch", "neox", "worker.py") in text and "run_path" in text
    assert "neox_epoch: hooks installed" in text or through_worker, text[-3000:]
    assert "Megatron requires CUDA." in text  # NeoX's initialize_megatron asserts CUDA before building data


@pytest.mark.neox
def test_launch_two_cpu_ranks_data_build(data, tmp_path):
    script = tmp_path / "cpu_train.py"
    script.write_text(CPU_SCRIPT)
    r = _launch(tmp_path, data, str(script), dry_run=False)
    text = r.stdout + r.stderr
    assert r.returncode == 0, text[-4000:]
    ranks = [json.loads((tmp_path / f"rank{k}").read_text()) for k in (0, 1)]
    assert ranks[0]["train_iters"] == ranks[1]["train_iters"] > 0
    assert ranks[0]["batch"] == [4, 33]
    assert text.count("neox_epoch: exact plan") == 1  # the table on rank 0 only
    recs = [json.loads(x) for x in open(tmp_path / "logs" / JSONL_NAME)]
    assert recs[0]["event"] == "plan" and recs[0]["train_iters"] == ranks[0]["train_iters"]
    assert sum(1 for x in recs if x["event"] == "final") == 1


@pytest.mark.neox
def test_patch_applies_to_neox_checkout(tmp_path):
    patch = os.path.join(ROOT, "patches", "neox_epoch_hook.patch")
    text = open(patch).read()
    assert sum(1 for x in text.splitlines() if x.startswith("+") and not x.startswith("+++")) <= 4
    for tool in ("git", "patch"):
        dst = tmp_path / tool
        dst.mkdir()
        for f in ("deepy.py", "train.py"):
            shutil.copy(os.path.join(frameworks.neox_dir(), f), dst / f)
        if tool == "git":
            subprocess.run(["git", "init", "-q"], cwd=dst, check=True)
            subprocess.run(["git", "apply", "--check", patch], cwd=dst, check=True)
            subprocess.run(["git", "apply", patch], cwd=dst, check=True)
        else:
            subprocess.run(["patch", "-p1", "--dry-run", "-i", patch], cwd=dst, check=True, capture_output=True)
            subprocess.run(["patch", "-p1", "-i", patch], cwd=dst, check=True, capture_output=True)
        assert "neox_epoch.neox.hook_deepy()" in (dst / "deepy.py").read_text()
        assert "neox_epoch.neox.install_from_env()" in (dst / "train.py").read_text()
        subprocess.run([sys.executable, "-m", "py_compile", str(dst / "deepy.py"), str(dst / "train.py")], check=True)
