"""The planner against numbers produced by running REAL GPT-NeoX data code (scripts/neox_golden.py).

The fixture tests/fixtures/neox/neox_golden.json records what NeoX's own build_train_valid_test_data_loaders
built for 18 cases (data_path + split, one train path, weighted and weight_by_num_documents blends, random
cases, and train_epochs mode with the train_iters NeoX's own update_iterations derived), plus the train_epochs
configurations NeoX refuses and its messages. The corpora are regenerated here from their recorded seeds
(sha1-checked), planned with NeoX semantics, and every request, epoch count, len, blend size, draw and
train_iters must be equal; what NeoX refuses the planner must refuse for the same reason. scripts/neox_golden.py is
also re-run live on the real NeoX that tests/helpers/frameworks.py finds (NEOX_DIR/NEOX_PYTHON, else the vendored copy
and a
venv built once) and must reproduce the fixture.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess

import frameworks
import pytest
import yaml

from neox_epoch import cli
from neox_epoch.formats.corpus import write_random_corpus
from neox_epoch.formats.neox_config import load_neox_configs
from neox_epoch.plan.from_neox import plan_input_from_neox
from neox_epoch.plan.planner import make_plan

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
FIXTURE = os.path.join(HERE, "fixtures", "neox", "neox_golden.json")
GOLDEN = json.load(open(FIXTURE, encoding="utf-8"))
EPOCH_CASES = sorted(k for k, c in GOLDEN["cases"].items() if "train_epochs" in c)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    d = tmp_path_factory.mktemp("neox_corpora")
    paths = {}
    for label, c in GOLDEN["corpora"].items():
        prefix = str(d / label)
        write_random_corpus(prefix, c["seed"], c["num_documents"], c["min_len"], c["max_len"])
        sha = hashlib.sha1(open(prefix + ".bin", "rb").read()).hexdigest()
        assert sha == c["sha1_bin"], f"{label}: regenerated corpus differs from the one NeoX read"
        paths[label] = prefix
    return paths


def _config(case: dict, corpora: dict, tmp_path, **changes) -> str:  # type: ignore[type-arg]
    params = {}
    for k, v in {**case["params"], **changes}.items():
        if k in ("data_impl",) or v is None:
            continue
        if isinstance(v, str) and v in corpora:
            v = corpora[v]
        elif isinstance(v, list) and v and all(isinstance(x, str) and x in corpora for x in v):
            v = [corpora[x] for x in v]
        params[k] = v
    path = tmp_path / "case.yml"
    path.write_text(yaml.safe_dump(params))
    return str(path)


@pytest.mark.parametrize("name", sorted(GOLDEN["cases"]))
def test_plan_equals_real_neox(name, corpora, tmp_path):
    case = GOLDEN["cases"][name]
    cfg = load_neox_configs([_config(case, corpora, tmp_path)])
    plan = make_plan(plan_input_from_neox(cfg))
    epochs = case.get("train_epochs")
    if epochs is None:
        assert plan.consumed == case["num_samples"], "NeoX's sample counts from iterations"
    else:  # train_epochs mode: NeoX asks for no sample counts; update_iterations sets train_iters
        assert (plan.train_iters, plan.consumed["train"]) == (epochs["train_iters"], epochs["train_samples"])
    built = [d for d in case["datasets"] if d.get("built", True) and d.get("len") is not None]
    ours = list(plan.sources)
    # NeoX builds weight_by_num_documents datasets twice (first without indices); keep the last build per name
    last = {}
    for d in built:
        last[d["name"]] = d
    neox_ds = list(last.values())
    assert len(neox_ds) == len(ours), ([d["name"] for d in neox_ds], [(s.split, s.name) for s in ours])
    for d, s in zip(neox_ds, ours):
        assert d["name"].split("_")[0] == s.split
        got = (d["num_samples"], d["epochs"], d["len"], list(d["documents"]), d["tokens_per_epoch"])
        want = (s.samples_requested, s.epochs_built, s.length, list(s.document_range), s.tokens)
        assert got == want, f"{d['name']}: NeoX built {got}, planned {want}"
    for split, b in case.get("blends", {}).items():
        (ours_b,) = [x for x in plan.blends if x.split == split]
        assert b["len"] == ours_b.size
        assert b["draws_first_n"] == list(ours_b.draws), "the first N draws of the real blend"
        from neox_epoch.semantics import blend

        assert b["draws"] == blend.greedy_counts(list(ours_b.weights), ours_b.size), "draws over the whole blend"


def test_headline_one_epoch_becomes_two():
    """Real NeoX, one train path, train_iters for one pass: 2 epochs built, 25.04% never seen, 24.74% twice."""
    c = GOLDEN["cases"]["b_one_path_one_epoch"]
    hist = c["exposure"]["sources"][0]["histogram"]
    assert c["datasets"][0]["epochs"] == 2 and c["datasets"][0]["num_samples"] == 2316
    assert hist == {"0": 37031, "1": 74288, "2": 36584}
    total = sum(hist.values())
    assert round(hist["0"] / total, 4) == 0.2504 and round(hist["2"] / total, 4) == 0.2474


def test_headline_planner_predicts_spillover(corpora, tmp_path):
    """The planner predicts the 2 epochs and an expected unseen share close to the measured 25.04%."""
    case = GOLDEN["cases"]["b_one_path_one_epoch"]
    plan = make_plan(plan_input_from_neox(load_neox_configs([_config(case, corpora, tmp_path)])))
    train = [s for s in plan.sources if s.split == "train"][0]
    assert (train.samples_requested, train.epochs_built, train.samples_drawn) == (2316, 2, 2304)
    assert not train.tokens_unseen_exact
    assert abs(train.tokens_unseen / train.tokens - 0.2504) < 0.01
    assert any(w.code == "spillover" and "cross-epoch spillover" in w.text for w in plan.warnings)


@pytest.mark.parametrize("name", sorted(GOLDEN["cases"]))
def test_plan_unseen_equals_neox_exposure(name, corpora, tmp_path):
    """Tokens never seen per train source: the plan's figure against the exposure NeoX's own arrays give for
    the first train_iters * train_batch_size samples. Exact figures must be equal; expectations (jointly
    shuffled epochs drawn in part) within 4 standard deviations of a sample-level binomial, plus 2 samples."""
    case = GOLDEN["cases"][name]
    plan = make_plan(plan_input_from_neox(load_neox_configs([_config(case, corpora, tmp_path)])))
    seq = case["exposure"]["seq_length"]
    measured = [s["histogram"].get("0", 0) for s in case["exposure"]["sources"]]
    train = [s for s in plan.sources if s.split == "train"]
    assert len(train) == len(measured)
    for s, count in zip(train, measured):
        if s.tokens_unseen_exact:
            assert s.tokens_unseen == count, f"{s.name}: exact {s.tokens_unseen}, NeoX's arrays give {count}"
            continue
        p = min(1.0, s.samples_drawn / s.samples_built)
        q = (1 - p) ** s.epochs_built
        n = max(1, s.tokens // seq)
        tol = 4 * (n * q * (1 - q)) ** 0.5 * seq + 2 * seq
        assert abs(s.tokens_unseen - count) <= tol, f"{s.name}: expected ~{s.tokens_unseen}, NeoX gives {count}"


@pytest.mark.parametrize("name", EPOCH_CASES)
def test_train_epochs_iters_equal_neox_update_iterations(name, corpora, tmp_path):
    """train_epochs mode: one epoch per split, the loader (micro * dp, drop_last) and train_iters as NeoX's own
    update_iterations computed them; train_data_weights left out or written as all 1.0 plan alike."""
    case = GOLDEN["cases"][name]
    e = case["train_epochs"]
    plans = [make_plan(plan_input_from_neox(load_neox_configs([_config(case, corpora, tmp_path)])))]
    if case["mode"] == "train_data_paths":
        ones = [1.0] * len(case["params"]["train_data_paths"])
        d = tmp_path / "ones"
        d.mkdir()
        plans.append(
            make_plan(plan_input_from_neox(load_neox_configs([_config(case, corpora, d, train_data_weights=ones)])))
        )
    for plan in plans:
        assert plan.train_iters == e["train_iters"]
        train = [s for s in plan.sources if s.split == "train"]
        assert all(s.epochs_built == 1 and s.samples_requested is None for s in train)
        size = plan.blends[0].size if case["mode"] == "train_data_paths" else train[0].length
        assert size == e["train_dataset_len"]
        assert size // e["loader_batch"] == e["train_loader_len"] == case["loader_batches"]["train"]
        line = [a for a in plan.arithmetic if a.startswith("train_epochs:")]
        assert (
            line
            and f"({size} // {e['loader_batch']}) * {e['train_epochs']} // "
            f"{e['gradient_accumulation_steps']} = {e['train_iters']} "
            in line[0]
        )
        # the loader drops its last partial batch and is cycled: the samples trained on are one pass's full batches
        drawn = sum(s.samples_drawn for s in train)
        assert drawn == e["trained_samples_first_pass"] == case["exposure"]["samples"]


def test_train_epochs_cases_cover_the_brief():
    """train_epochs 1 and 3, gradient accumulation 1 and 2, both data modes, two paths without weights."""
    cases = [GOLDEN["cases"][n] for n in EPOCH_CASES]
    assert {c["train_epochs"]["train_epochs"] for c in cases} == {1, 3}
    assert {c["train_epochs"]["gradient_accumulation_steps"] for c in cases} == {1, 2}
    assert {c["mode"] for c in cases} == {"data_path", "train_data_paths"}
    assert any(
        len(c["params"].get("train_data_paths") or []) == 2 and c["params"]["train_data_weights"] is None for c in cases
    )
    for c in cases:
        e, p = c["train_epochs"], c["params"]
        assert p["train_iters"] is None and c["num_samples"] == {"train": None, "valid": None, "test": None}
        assert (
            p["train_batch_size"]
            == e["train_micro_batch_size_per_gpu"] * e["gradient_accumulation_steps"] * e["data_parallel_size"]
        )
        assert all(d["num_epochs_arg"] == 1 and d["epochs"] == 1 for d in c["datasets"] if d.get("built", True))


@pytest.mark.parametrize("name", sorted(GOLDEN["refused"]))
def test_planner_refuses_what_neox_refuses(name, corpora, tmp_path, capsys):
    """NeoX's validate_train_epochs refused these configs; the plan command exits 2 with one line naming the
    same reason (NeoX's own message quoted)."""
    case = GOLDEN["refused"][name]
    code = cli.main(["plan", _config(case, corpora, tmp_path)])
    out, err = capsys.readouterr()
    assert code == 2 and not out
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert case["refused"]["message"] in lines[0], (case["refused"], lines[0])
    assert "Traceback" not in err


@pytest.mark.neox
def test_live_neox_reproduces_fixture(tmp_path):
    """Re-run NeoX's own data code now; its numbers must equal the committed fixture."""
    py = frameworks.neox_python()
    env = dict(os.environ, NEOX_DIR=frameworks.neox_dir())
    out = tmp_path / "out"
    subprocess.run(
        [py, os.path.join(HERE, "..", "scripts", "neox_golden.py"), str(out)],
        check=True,
        capture_output=True,
        timeout=900,
        env=env,
    )
    live = json.load(open(out / "neox_golden.json", encoding="utf-8"))
    for name, case in GOLDEN["cases"].items():
        assert live["cases"][name]["datasets"] == case["datasets"], name
        assert live["cases"][name].get("blends") == case.get("blends"), name
        assert live["cases"][name].get("train_epochs") == case.get("train_epochs"), name
    assert live["refused"] == GOLDEN["refused"]
