"""Every model config GPT-NeoX ships, planned at 1, 8, 16, 64 and 256 GPUs, against what NeoX itself made of it.

tests/fixtures/neox/shipped_configs.json was written by scripts/neox_config_sweep.py, which called NeoX's own
``NeoXArgs.from_ymls`` for each pairing (model config [+ configs/llama/train_config.yml] + configs/local_setup.yml
+ a world file naming a hostfile) and recorded whether NeoX accepted it and the batch and schedule it derived,
or the exception it stopped with. The fixture holds only each config's sha1: these tests copy NeoX's own config
files from its tree (tests/helpers/frameworks.py), check the sha1, lay out the hostfiles in a temporary directory, write
a
corpus (4,000 documents, its .bin sparse, sized so one pass over the train split holds two global batches of
the largest accepted pairing) at the data prefix the configs name, and run
``neox-epoch plan ... --json``. Where NeoX accepts, the plan's global batch and train_iters must equal NeoX's;
where NeoX refuses, ``plan`` must exit 2 with one line naming the same problem.

The sweep is re-run (tests/helpers/frameworks.py: NEOX_DIR/NEOX_PYTHON, else the vendored NeoX and a venv built once)
live and must reproduce the fixture.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from neox_epoch.cli import main
from neox_epoch.formats.corpus import write_sized_corpus

#: the configs are NeoX's own files, read from its tree (tests/helpers/frameworks.py): a framework test
pytestmark = pytest.mark.neox

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
FIXTURE = os.path.join(HERE, "fixtures", "neox", "shipped_configs.json")
SWEEP: dict[str, Any] = json.load(open(FIXTURE, encoding="utf-8"))
PAIRINGS: dict[str, Any] = SWEEP["pairings"]
#: the corpus at every data prefix: 4,000 documents of 250 tokens and up, sized so that the train split holds at
#: least two global batches of every accepted pairing (exact mode's --epochs 1 then has a whole batch to plan)
CORPUS = {"seed": 0, "num_documents": 4000, "min_len": 250}
#: how many global batches one pass over the train split holds, at least, for the largest accepted batch
BATCHES_PER_PASS = 2


def _train_fraction(split: str | None) -> float:
    """The share of documents NeoX's split gives the train split ("969,30,1" -> 0.969; no split: all)."""
    parts = [float(x) for x in (split or "1").split(",")]
    return parts[0] / sum(parts)


def corpus_sizes(seed: int) -> list[int]:
    """Document sizes for one prefix: the train split of every accepted pairing naming it holds BATCHES_PER_PASS
    global batches of seq_length + 1 tokens (10% margin on the mean)."""
    need, fraction = 0, 1.0
    for p in PAIRINGS.values():
        if p["accepted"]:
            n = p["neox"]
            need = max(need, BATCHES_PER_PASS * n["train_batch_size"] * (n["seq_length"] + 1))
            fraction = min(fraction, _train_fraction(n["split"] if n["data_path"] else None))
    docs, low = CORPUS["num_documents"], CORPUS["min_len"]
    high = max(low, int(2 * 1.1 * need / fraction / docs) - low)
    sizes = [int(x) for x in np.random.RandomState(seed).randint(low, high + 1, size=docs)]
    assert sum(sizes[: int(docs * fraction) - 1]) >= need, "the corpus is smaller than two global batches"
    return sizes


def _data_prefixes() -> set[str]:
    """Every data prefix an accepted pairing names (data_path, or train/valid/test_data_paths)."""
    prefixes: set[str] = set()
    for p in PAIRINGS.values():
        if not p["accepted"]:
            continue
        n = p["neox"]
        if n["data_path"]:
            prefixes.add(n["data_path"])
        for key in ("train_data_paths", "valid_data_paths", "test_data_paths"):
            prefixes.update(n[key] or [])
    return prefixes


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> str:  # type: ignore[no-untyped-def]
    """A directory laid out like the sweep's: configs/..., world_N.yml + hostfile_N, and the corpus."""
    import hashlib
    import shutil

    import frameworks

    root = tmp_path_factory.mktemp("neox_shipped")
    neox = frameworks.neox_dir()  # NeoX's own config files, from its tree (the fixture carries only their sha1)
    for rel, record in SWEEP["configs"].items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(os.path.join(neox, rel), path)
        assert hashlib.sha1(path.read_bytes()).hexdigest() == record["sha1"], f"{rel}: not the file the sweep read"
    for world in SWEEP["worlds"].values():
        (root / world["file"]).write_text(json.dumps(world["config"]) + "\n", encoding="utf-8")
        (root / world["hostfile"]).write_text("\n".join(world["hostfile_lines"]) + "\n", encoding="utf-8")
    prefixes = sorted(_data_prefixes())
    assert prefixes, "no accepted pairing names a data prefix"
    for i, prefix in enumerate(prefixes):
        assert not os.path.isabs(prefix), f"absolute data prefix {prefix} in the fixture"
        os.makedirs(root / os.path.dirname(prefix), exist_ok=True)
        write_sized_corpus(str(root / prefix), corpus_sizes(CORPUS["seed"] + i))
    return str(root)


def expected_terms(error: dict[str, str]) -> list[str]:
    """Words our one-line error must contain to name the problem NeoX stopped with."""
    kind, message = error["type"], error["message"]
    m = re.search(r"Conf file (\S+) has the following duplicate keys with previously loaded file: (\S+)", message)
    if m:
        return [f"{m.group(1)}: ", m.group(2), "already set in", "key given twice"]
    m = re.search(r"unexpected keyword argument '(\w+)'", message)
    if kind == "TypeError" and m:
        return [f"{m.group(1)}: ", "unknown NeoX config key"]
    if "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided" in message:
        return ["neither train_batch_size nor train_micro_batch_size_per_gpu is set"]
    m = re.search(r"\[\((\d+) / (\d+)\) / (\d+)\] must be a whole number", message)
    if m:
        g, pp, mp = m.groups()
        return [f"= {g} / ({pp} * {mp}) =", "is not a whole number"]
    m = re.search(
        r"(Train batch size|Micro batch size per gpu|Gradient accumulation steps): (-?\d+) has to be", message
    )
    if m:
        return [f"{m.group(1)}: {m.group(2)} has to be greater than 0"]
    if "train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size" in message:
        return ["train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size"]
    if "types cannot be validated" in message:  # validate_types logged the key and its words
        logged = " ".join(error.get("logged_errors") or [])  # type: ignore[arg-type]
        m = re.search(r"validate_types\(\) (\w+): '(.*)' (Not in accepted values)", logged)
        if m:  # the key as the file writes it (lr-decay-style), the value, NeoX's words
            return [f"{m.group(2)}'", m.group(3), "validate_types"]
        return ["validate_types"]
    if kind in ("ParserError", "ScannerError"):  # PyYAML's, before NeoX reads a key
        return ["is not valid YAML at line"]
    if "Length of attention config list must equal num_layers" in message:
        return ["Length of attention config list must equal num_layers", "covers"]
    raise AssertionError(f"no rule for NeoX's refusal {kind}: {message}; add one to expected_terms")


def run_plan(argv: list[str], capsys) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    """``neox-epoch <argv>`` in this process: exit code, stdout, stderr."""
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("key", sorted(PAIRINGS))
def test_shipped_config_plans_like_neox(key, run_dir, capsys, monkeypatch):  # type: ignore[no-untyped-def]
    """NeoX accepted: exit 0, the same train_batch_size and train_iters. NeoX refused: exit 2, one line, the same
    problem."""
    p = PAIRINGS[key]
    monkeypatch.chdir(run_dir)
    monkeypatch.delenv("DLTS_HOSTFILE", raising=False)
    code, out, err = run_plan(["plan", *p["files"], "--json"], capsys)
    if p["accepted"]:
        assert code == 0, f"NeoX accepts {key}; plan says: {err}"
        plan = json.loads(out)
        neox = p["neox"]
        assert plan["global_batch_size"] == neox["train_batch_size"], key
        assert plan["train_iters"] == neox["train_iters"], key
        assert plan["seq_length"] == neox["seq_length"], key
        assert any(f"NeoX counts {neox['global_num_gpus']} GPUs" in n for n in plan["config_notes"]), plan[
            "config_notes"
        ]
    else:
        assert code == 2, f"NeoX refuses {key} ({p['error']['message']}); plan exited {code}: {out[:200]} {err}"
        assert err.count("\n") == 1 and "Traceback" not in err, err
        for term in expected_terms(p["error"]):
            assert term in err, f"NeoX: {p['error']['type']}: {p['error']['message']}\nplan: {err}"


def test_fixture_is_the_whole_sweep():
    """240 pairings (48 model configs x 5 world sizes); the counts in the summary agree with the records; the
    paths are relative (to the NeoX tree / the run directory), never the machine's."""
    summary = SWEEP["summary"]
    accepted = sum(1 for p in PAIRINGS.values() if p["accepted"])
    assert (
        summary["pairings"] == len(PAIRINGS) == len({p["model"] for p in PAIRINGS.values()}) * len(SWEEP["world_sizes"])
    )
    assert summary["accepted"] == accepted and summary["refused"] == len(PAIRINGS) - accepted
    assert SWEEP["world_sizes"] == [1, 8, 16, 64, 256]
    text = open(FIXTURE, encoding="utf-8").read()
    assert "neox_sweep_" not in text, "the sweep's temporary run directory leaked into the fixture"
    for p in PAIRINGS.values():
        assert not any(os.path.isabs(f) for f in p["files"]), p["files"]
        if p["accepted"]:
            assert not any(os.path.isabs(f) for f in p["config_files_read"]), p["config_files_read"]
    assert all(not os.path.isabs(w["hostfile"]) for w in SWEEP["worlds"].values())


def test_world_files_are_what_users_write():
    """The world is a hostfile named by a `hostfile:` key: localhost slots=N below 8 GPUs, node{i} slots=8 above."""
    for n, world in SWEEP["worlds"].items():
        lines = world["hostfile_lines"]
        if int(n) < 8:
            assert lines == [f"localhost slots={n}"]
        else:
            assert lines == [f"node{i} slots=8" for i in range(int(n) // 8)]
    for p in PAIRINGS.values():
        if p["accepted"]:
            assert p["neox"]["global_num_gpus"] == p["world_size"], p["model"]


@pytest.mark.neox
def test_live_sweep_reproduces_fixture(tmp_path):
    """Re-run NeoX's from_ymls over every pairing now; the records must equal the committed fixture."""
    out = tmp_path / "shipped_configs.json"
    script = os.path.join(HERE, "..", "scripts", "neox_config_sweep.py")
    import frameworks

    r = subprocess.run(
        [
            frameworks.neox_python(),
            script,
            str(out),
            "--neox-dir",
            frameworks.neox_dir(),
            "--neox-commit",
            SWEEP["neox_commit"],
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    live = json.load(open(out, encoding="utf-8"))
    for key in ("configs", "worlds", "world_sizes", "summary", "pairing_rule"):
        assert live[key] == SWEEP[key], key
    assert live["pairings"].keys() == PAIRINGS.keys()
    for key, record in PAIRINGS.items():
        assert live["pairings"][key] == record, key


def test_sweep_script_without_neox_dir_is_one_line(tmp_path):
    """The sweep script itself: no NeoX checkout -> exit 2 and one line."""
    env = {k: v for k, v in os.environ.items() if k != "NEOX_DIR"}
    r = subprocess.run(
        [sys.executable, os.path.join(HERE, "..", "scripts", "neox_config_sweep.py"), str(tmp_path / "x.json")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "NEOX_DIR" in r.stderr


# ---------------------------------------------------------------- resume-check on the shipped configs


def _accepted_worlds() -> dict[str, list[str]]:
    """Per model config, its accepted pairings in world-size order."""
    by_model: dict[str, list[str]] = {}
    for key in sorted(PAIRINGS, key=lambda k: (PAIRINGS[k]["model"], int(k.rsplit("@", 1)[1]))):
        if PAIRINGS[key]["accepted"]:
            by_model.setdefault(PAIRINGS[key]["model"], []).append(key)
    return by_model


def _resume_pairs() -> list[tuple[str, str]]:
    """Each model saved and resumed on the same world, then moved to the next world up and back down."""
    out = []
    for keys in _accepted_worlds().values():
        out.append((keys[0], keys[0]))
        out += [(a, b) for a, b in zip(keys, keys[1:])] + [(keys[-1], keys[-2])] if len(keys) > 1 else []
    return out


def _stock_checkpoint(root: str, key: str, iteration: int) -> str:
    """A checkpoint as stock NeoX saves one through DeepSpeed for pairing ``key``: its config files copied into
    configs/ and DeepSpeed's saved world (dp, and the pipeline engine's model-parallel group: pp x mp)."""
    import io
    import pickle
    import zipfile

    p, neox = PAIRINGS[key], PAIRINGS[key]["neox"]
    model_parallel = max(1, neox["pipe_parallel_size"]) * neox["model_parallel_size"]
    saved = {
        "iteration": iteration,
        "dp_world_size": neox["global_num_gpus"] // model_parallel,
        "mp_world_size": model_parallel,
        "ds_config": {"train_batch_size": neox["train_batch_size"]},
    }
    save = os.path.join(root, "ckpt-" + re.sub(r"\W", "_", key))
    tag = os.path.join(save, f"global_step{iteration}")
    os.makedirs(os.path.join(tag, "configs"), exist_ok=True)
    with open(os.path.join(save, "latest"), "w", encoding="utf-8") as f:
        f.write(f"global_step{iteration}")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps(saved, protocol=2))
    with open(os.path.join(tag, "mp_rank_00_model_states.pt"), "wb") as f:
        f.write(buf.getvalue())
    for path in p["files"]:
        with (
            open(os.path.join(root, path), encoding="utf-8") as src,
            open(os.path.join(tag, "configs", os.path.basename(path)), "w", encoding="utf-8") as dst,
        ):
            dst.write(src.read())
    return save


@pytest.mark.parametrize("saved,resumed", _resume_pairs(), ids=lambda k: k.replace("configs/", ""))
def test_resume_check_on_the_shipped_configs(saved, resumed, run_dir, capsys, monkeypatch):  # type: ignore[no-untyped-def]
    """Stock NeoX stopped at iteration 100 and resumed on the same world, or on the next world size up or down
    (NeoX scales the global batch with the GPUs): resume-check plans both runs from NeoX's own config files and
    says what NeoX's shift_and_wrap_data_loaders does, with the batches NeoX's from_ymls derived (the fixture):
    the loader restarts at 100 x the new train_batch_size (100 x gas is below len(loader): the train dataset
    holds train_iters x train_batch_size samples), so a bigger batch skips the samples between and a smaller one
    trains them again; the same world resumes exactly (exit 0)."""
    monkeypatch.chdir(run_dir)
    monkeypatch.delenv("DLTS_HOSTFILE", raising=False)
    old, new = PAIRINGS[saved]["neox"]["train_batch_size"], PAIRINGS[resumed]["neox"]["train_batch_size"]
    ckpt = _stock_checkpoint(run_dir, saved, 100)
    code, out, err = run_plan(["resume-check", ckpt, *PAIRINGS[resumed]["files"], "--json"], capsys)
    assert code in (0, 1), err
    report = json.loads(out)
    assert (report["consumed_samples"], report["start_sample"]) == (100 * old, 100 * new)
    assert report["notes"] == ["the saved run's build from the config files in the checkpoint"], report["notes"]
    kinds = [f.split(":")[0] for f in report["findings"]]
    if new > old:
        assert kinds[0] == "skip" and report["skipped"] == [100 * old, 100 * new], report["findings"]
    elif new < old:
        assert kinds[0] == "repeat" and report["repeated"] == [100 * new, 100 * old], report["findings"]
    else:
        assert code == 0 and kinds == [] and report["clean"], report["findings"]
    assert set(kinds) <= {"skip", "repeat", "orders-change"}, kinds


# ---------------------------------------------------------------- exact mode's written configs, loaded by NeoX


def test_exact_mode_configs_load_back_in_neox(run_dir, tmp_path):  # type: ignore[no-untyped-def]
    """Every pairing NeoX accepts: `plan FILES --epochs 1 --write-config` (overlay) writes a file that NeoX's own
    from_ymls, given after the pairing's files (the neox_epoch block stripped as neox-epoch launch strips it),
    loads with the planned train_iters, lr_decay_iters and train_batch_size (one NeoX process for all). Where
    one pass over the small corpus is less than one global batch, exact mode refuses in one line."""
    import contextlib
    import io
    import shutil

    import frameworks

    from neox_epoch.neox.launch import strip_block_text

    jobs, planned, refused = {}, {}, []
    cwd = os.getcwd()
    os.chdir(run_dir)
    try:
        for key, p in PAIRINGS.items():
            if not p["accepted"]:
                continue
            name = re.sub(r"\W", "_", key) + "_exact.yml"
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main(["plan", *p["files"], "--epochs", "1", "--write-config", name, "--json"])
            if code != 0:
                refused.append(f"{key}: {err.getvalue().strip()}")
                continue
            plan = json.loads(out.getvalue())
            text, block = strip_block_text(open(name, encoding="utf-8").read(), name)
            os.makedirs("loaded", exist_ok=True)
            with open(os.path.join("loaded", name), "w", encoding="utf-8") as f:
                f.write(text)
            os.remove(name)
            jobs[key] = [*p["files"], os.path.join("loaded", name)]
            lr = {c["key"]: c["new"] for c in plan["settings"]["schedule"]}.get("lr_decay_iters")
            planned[key] = (plan["train_iters"], lr, plan["global_batch_size"], block)
        loaded = frameworks.neox_from_ymls(os.getcwd(), jobs, "loaded")
    finally:
        shutil.rmtree(os.path.join(run_dir, "loaded"), ignore_errors=True)
        os.chdir(cwd)
    wrong = []
    for key, (iters, lr, gbs, block) in planned.items():
        got = loaded[key]
        n = got.get("neox", {})
        if (
            not got["accepted"]
            or (n["train_iters"], n["train_batch_size"]) != (iters, gbs)
            or (lr is not None and n["lr_decay_iters"] != lr)
            or block.get("epochs") != 1
        ):
            wrong.append(f"{key}: planned {iters}, {lr}, {gbs}; NeoX: {got.get('error') or n}")
    assert not wrong, "\n".join(wrong[:20])
    print(f"shipped configs: {len(planned)} exact configs loaded back by NeoX")
    assert not refused, "\n".join(refused[:20])
    assert len(planned) == sum(1 for p in PAIRINGS.values() if p["accepted"])


def test_exact_mode_refuses_one_pass_under_one_batch(run_dir, tmp_path, capsys):  # type: ignore[no-untyped-def]
    """The refusal itself, on its own small case: pythia 160M at 256 GPUs (a global batch of 8,192 samples of 2,049
    tokens) over a corpus of 1,000 documents of 1,000 tokens (one pass about 470 samples): exact mode refuses."""
    import shutil

    p = PAIRINGS["configs/pythia/160M.yml@256"]
    assert p["accepted"] and p["neox"]["train_batch_size"] == 8192
    for rel in p["files"]:
        os.makedirs(os.path.dirname(str(tmp_path / rel)) or str(tmp_path), exist_ok=True)
        shutil.copyfile(os.path.join(run_dir, rel), tmp_path / rel)
    for name in ("hostfile_256",):
        if os.path.exists(os.path.join(run_dir, name)):
            shutil.copyfile(os.path.join(run_dir, name), tmp_path / name)
    prefix = tmp_path / p["neox"]["data_path"]
    os.makedirs(prefix.parent, exist_ok=True)
    write_sized_corpus(str(prefix), [1000] * 1000)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        code, out, err = run_plan(["plan", *p["files"], "--epochs", "1", "--write-config", "out.yml"], capsys)
    finally:
        os.chdir(cwd)
    assert code == 2 and out == "" and not os.path.exists(tmp_path / "out.yml")
    assert err.count("\n") == 1 and "samples are less than one global batch (8192)" in err, err
