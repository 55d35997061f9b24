"""The planner against numbers produced by running REAL GPT-NeoX data code (scripts/neox_golden.py).

The fixture tests/fixtures/neox/neox_golden.json records what NeoX's own build_train_valid_test_data_loaders
built for 14 cases (data_path + split, one train path, weighted and weight_by_num_documents blends, random
cases). The corpora are regenerated here from their recorded seeds (sha1-checked), planned with NeoX
semantics, and every request, epoch count, len, blend size and draw must be equal. scripts/neox_golden.py is
also re-run live on the real NeoX that tests/frameworks.py finds (NEOX_DIR/NEOX_PYTHON, else the vendored
copy and a venv built once) and must reproduce the fixture.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess

import frameworks
import pytest
import yaml

from neox_epoch.config import load_neox_configs, plan_input_from_neox
from neox_epoch.corpus import write_random_corpus
from neox_epoch.plan import make_plan

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "fixtures", "neox", "neox_golden.json")
GOLDEN = json.load(open(FIXTURE, encoding="utf-8"))


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


def _config(case: dict, corpora: dict, tmp_path) -> str:  # type: ignore[type-arg]
    params = {}
    for k, v in case["params"].items():
        if k in ("data_impl",):
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
    assert plan.consumed == case["num_samples"], "NeoX's sample counts from iterations"
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
        from neox_epoch import blend

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
    assert any("cross-epoch spillover" in w for w in plan.warnings)


@pytest.mark.neox
def test_live_neox_reproduces_fixture(tmp_path):
    """Re-run NeoX's own data code now; its numbers must equal the committed fixture."""
    py = frameworks.neox_python()
    env = dict(os.environ, NEOX_DIR=frameworks.neox_dir())
    out = tmp_path / "out"
    subprocess.run([py, os.path.join(HERE, "..", "scripts", "neox_golden.py"), str(out)], check=True,
                   capture_output=True, timeout=900, env=env)
    live = json.load(open(out / "neox_golden.json", encoding="utf-8"))
    for name, case in GOLDEN["cases"].items():
        assert live["cases"][name]["datasets"] == case["datasets"], name
        assert live["cases"][name].get("blends") == case.get("blends"), name
