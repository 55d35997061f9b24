"""The same answers on GPT-NeoX's stack (numpy 1.x) and on the stack users install today (numpy 2.x).

Each command runs as ``python -m neox_epoch.cli ...`` under both interpreters (tests/helpers/stacks.py: the environment
variable NEOX_EPOCH_STACK_PYTHONS, or .venv and .venv-today) on the same files, with this checkout's code
(PYTHONPATH): ``plan --json`` of a NeoX config and of a Megatron-LM command line with ``--data-cache-path``,
``audit --json`` of a cache built by the real megatron-core and of the index files real GPT-NeoX wrote
(tests/fixtures/neox), ``resume-check --json --exposure`` of a run stopped at a checkpoint and resumed with another
batch size, and ``report --json`` of a run log written by the hooks' own writers. Their stdout must be the same
bytes and their exit codes the same; a few numbers in each are checked against where they come from.

The corpora are real .bin/.idx files (neox_epoch.formats.corpus.write_random_corpus); the megatron-core cache is built
by BlendedMegatronDatasetBuilder in the "neox" stack (megatron-core 0.16.1, a verified version;
tests/helpers/mcore_live.py).
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
from dataclasses import asdict
from typing import Any

import pytest
import stacks
import yaml
from run_logs import blend_values, launch

from neox_epoch.formats.corpus import write_random_corpus
from neox_epoch.formats.neox_config import EpochBlock
from neox_epoch.formats.runlog import JsonlSink
from neox_epoch.neox.planning import make_run_plan
from neox_epoch.neox.resume_state import ResumeState
from neox_epoch.semantics import TrainBuild

ROOT = stacks.ROOT
HERE = os.path.join(ROOT, "tests")
NEOX_FIXTURES = os.path.join(HERE, "fixtures", "neox")
#: the megatron-core version the Megatron-LM plans mirror on both stacks (the installed ones differ)
MCORE = "0.16.1"
SEQ, GBS = 32, 8

BUILD_MCORE = """
import sys
sys.path.insert(0, sys.argv[1])
from mcore_live import build
data, cache = sys.argv[2], sys.argv[3]
# the Megatron-LM command line below: 40 iterations of 8, valid (40 // 20 + 1) * 1 * 8, test 1 * 8
build([data + "/web", data + "/code"], [2.0, 1.0], "90,5,5", [320, 24, 8], 32, cache, seed=1234)
# another corpus's index in the same cache: the plan warns that the cache holds other data
build([data + "/books"], None, "90,5,5", [40, 8, 8], 32, cache, seed=1234)
"""


def _env() -> dict[str, str]:
    """This checkout's code in every interpreter (each has the package installed from elsewhere, maybe)."""
    return dict(os.environ, PYTHONPATH=ROOT, DS_ACCELERATOR="cpu")


def _stopped_run(log_dir: str, values: dict[str, Any], block: EpochBlock, iteration: int) -> None:
    """The checkpoint record the hooks write (hook_resume.save_state) for a run of ``values`` stopped at ``iteration``
    with its first batch shape (one loader batch per iteration), its builds those the plan asks NeoX for."""
    rp = make_run_plan(values, block)
    state = ResumeState(
        iteration=iteration,
        consumed_samples=iteration * rp.train_batch_size,
        train_batch_size=rp.train_batch_size,
        loader_batch=rp.train_batch_size,
        samples_total=rp.train_iters * rp.train_batch_size,
        train_iters=rp.train_iters,
        builds={
            f"train_{k}": TrainBuild(s.samples_requested, s.epochs_built, s.samples_built)
            for k, s in enumerate(rp.train)
        },
        drawn=[s.samples_drawn for s in rp.train],
        blend_weights=list(rp.weights or []),
        blend_samples=[s.samples_drawn for s in rp.train],
        greedy_weights=list(rp.weights or []),
        seq_length=rp.plan.seq_length,
        eval_interval=int(values["eval_interval"]),
        eval_iters=int(values["eval_iters"]),
    )
    sink = JsonlSink(log_dir)
    sink.write(
        {"event": "checkpoint", "iteration": iteration, "tag": f"global_step{iteration}", "state": asdict(state)}
    )


def test_stacks_from_the_variable(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """name=python pairs (relative to the repository or absolute); a stack whose interpreter is not an executable
    file is not found; a name that is no stack is an error naming the variable."""
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    monkeypatch.setenv(stacks.ENV, f" neox={python} , today=tests/helpers/stacks.py")
    assert stacks.stack_pythons() == {"neox": str(python)}  # tests/helpers/stacks.py is no executable
    monkeypatch.setenv(stacks.ENV, f"neox={python},today={os.path.relpath(python, ROOT)}")
    assert stacks.stack_pythons() == {"neox": str(python), "today": os.path.join(ROOT, os.path.relpath(python, ROOT))}
    monkeypatch.setenv(stacks.ENV, f"neox={python},tody={python}")
    with pytest.raises(
        ValueError,
        match="NEOX_EPOCH_STACK_PYTHONS: 'tody=.*': expected name=python with a name of "
        r"\['neox', 'today'\]",
    ):
        stacks.stack_pythons()


PROBE = """
import importlib.util, json, numpy
kernels = [m for m in ("neox_epoch._exposure", "neox_epoch._greedy") if importlib.util.find_spec(m)]
print(json.dumps({"numpy": numpy.__version__, "kernels": kernels}))
"""


@pytest.fixture(scope="module")
def pythons() -> dict[str, str]:
    """Both stacks, checked to be what they are named: numpy 1.x under "neox", 2.x under "today" (else the
    comparison proves nothing), each with this checkout's C extensions built for it (else the audit's exposure
    differs by design)."""
    found = stacks.require_stacks()
    for name, python in sorted(found.items()):
        r = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=120, env=_env(), cwd=ROOT)
        assert r.returncode == 0, f"{name} stack ({python}) does not import numpy: {r.stderr[-2000:]}"
        probe = json.loads(r.stdout)
        major = int(probe["numpy"].split(".")[0])
        assert major == (1 if name == "neox" else 2), (
            f"{stacks.ENV}: the {name} stack ({python}) has numpy {probe['numpy']}; expected numpy "
            f"{'1.x (GPT-NeoX pins numpy<2)' if name == 'neox' else '2.x'}"
        )
        assert len(probe["kernels"]) == 2, (
            f"the {name} stack ({python}) lacks this checkout's C extensions (it has {probe['kernels']}): run "
            f"{python} setup.py build_ext --inplace (or {python} -m pip install -e .)"
        )
    return found


@pytest.fixture(scope="module")
def inputs(pythons: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The files every command reads, written once: corpora, configs, a megatron-core cache, run logs."""
    d = tmp_path_factory.mktemp("stacks")
    data = d / "data"
    for seed, (name, docs) in enumerate([("web", 120), ("code", 40), ("books", 30)], start=1):
        write_random_corpus(str(data / name), seed, docs, 5, 200)
    prefixes = [str(data / "web"), str(data / "code")]
    values = blend_values(prefixes, [2.0, 1.0], SEQ, GBS)
    (d / "neox.yml").write_text(yaml.safe_dump(values))
    # the stopped run resumed with twice the batch for the rest of its 560 samples, on one GPU
    (d / "resumed.yml").write_text(
        yaml.safe_dump({**values, "train_batch_size": 2 * GBS, "train_iters": 35, "global_num_gpus": 1})
    )
    block = EpochBlock(epochs={"web": 1, "code": 2})
    _stopped_run(str(d / "stopped"), values, block, 30)
    # a run log as the hooks write it: 30 iterations of 8, resumed at 30 with 16 per iteration
    launch(str(d / "run"), values, block, 0, 30, 5)
    launch(str(d / "run"), {**values, "train_batch_size": 2 * GBS}, block, 30, None, 5)
    r = subprocess.run(
        [pythons["neox"], "-c", BUILD_MCORE, os.path.join(HERE, "helpers"), str(data), str(d / "mcore_cache")],
        capture_output=True,
        text=True,
        timeout=600,
        env=_env(),
        cwd=str(d),
    )
    assert r.returncode == 0, f"megatron-core build in the neox stack failed: {r.stderr[-3000:]}"
    return {"dir": str(d), "data": str(data)}


#: the one note only today's stack prints for --framework-version 0.16.1: megatron-core 0.19.2 is installed there
VERSION_NOTE = (
    "--framework-version 0.16.1: planned with Megatron-LM 0.16.1's flags and rules, not Megatron-LM "
    "0.19.2's (those of the megatron-core 0.19.2 installed, "
)


def _without_version_note(stdout: bytes) -> bytes:
    """Today's plan JSON without VERSION_NOTE (which must be there), re-serialized as the plan prints it."""
    plan = json.loads(stdout)
    notes = [n for n in plan["notes"] if n.startswith(VERSION_NOTE)]
    assert len(notes) == 1, f"today's stack should note the version it does not plan with: {plan['notes']}"
    plan["notes"].remove(notes[0])
    return (json.dumps(plan, indent=1) + "\n").encode()


def _same(
    pythons: dict[str, str], argv: list[str], cwd: str, code: int = 0, version_note: bool = False
) -> dict[str, Any]:
    """Run ``argv`` under both stacks: the same exit code ``code``, byte-identical stdout; return it parsed.
    ``version_note``: today's stack adds VERSION_NOTE (the installed megatron-core is another version), and only it."""
    out = {}
    for name, python in sorted(pythons.items()):
        r = subprocess.run(
            [python, "-m", "neox_epoch.cli", *argv], capture_output=True, timeout=600, env=_env(), cwd=cwd
        )
        assert r.returncode == code, f"{name} stack ({python}): exit {r.returncode}: {r.stderr.decode()[-3000:]}"
        out[name] = r.stdout
    if version_note:
        assert VERSION_NOTE.encode() not in out["neox"]
        out["today"] = _without_version_note(out["today"])
    if out["neox"] != out["today"]:
        diff = difflib.unified_diff(
            out["neox"].decode().splitlines(), out["today"].decode().splitlines(), "neox", "today", n=1, lineterm=""
        )
        pytest.fail(f"{argv[0]}: stdout differs between the stacks:\n" + "\n".join(list(diff)[:40]))
    return dict(json.loads(out["neox"]))


def _train(plan: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in plan["sources"] if s["split"] == "train"}


def test_plan_of_a_neox_config(pythons: dict[str, str], inputs: dict[str, str]) -> None:
    """web 1 pass, code 2 passes: samples per epoch (tokens - 1) // 32, targets in exact mode, 565 // 8 = 70."""
    plan = _same(pythons, ["plan", "neox.yml", "--source-epochs", "web=1", "code=2", "--json"], inputs["dir"])
    train = _train(plan)
    assert [(train[n]["tokens"], train[n]["samples_per_epoch"]) for n in ("web", "code")] == [(10748, 335), (3724, 116)]
    assert (10748 - 1) // SEQ == 335 and (3724 - 1) // SEQ == 116
    assert (plan["train_iters"], plan["consumed_samples"]) == (70, {"train": 560, "valid": 8, "test": 8})
    assert [train[n]["samples_drawn"] for n in ("web", "code")] == [331, 229] and 331 + 229 == 70 * GBS


def test_plan_of_a_megatron_lm_command_line_with_its_cache(pythons: dict[str, str], inputs: dict[str, str]) -> None:
    """The plan reads the cache with the audit: the books index is another corpus's (cache-foreign), the blend's
    own indexes are fresh (no cache-stale); the train split's samples per epoch equal the built index's."""
    data = inputs["data"]
    argv = [
        "plan",
        "--framework-version",
        MCORE,
        "--data-path",
        "2",
        f"{data}/web",
        "1",
        f"{data}/code",
        "--split",
        "90,5,5",
        "--seq-length",
        str(SEQ),
        "--micro-batch-size",
        "2",
        "--world-size",
        "4",
        "--global-batch-size",
        str(GBS),
        "--lr",
        "3e-4",
        "--train-iters",
        "40",
        "--eval-interval",
        "20",
        "--eval-iters",
        "1",
        "--seed",
        "1234",
        "--data-cache-path",
        "mcore_cache",
        "--json",
    ]
    plan = _same(pythons, argv, inputs["dir"], version_note=MCORE == "0.16.1")
    assert plan["consumed_samples"] == {"train": 320, "valid": 24, "test": 8}
    assert [w["code"] for w in plan["warnings"] if w["code"].startswith("cache")] == ["cache-foreign"]
    assert f"({data}/books)" in next(w["text"] for w in plan["warnings"] if w["code"] == "cache-foreign")
    train = _train(plan)
    assert [(train[n]["samples_per_epoch"], train[n]["samples_drawn"]) for n in ("web", "code")] == [
        (308, 213),
        (102, 107),
    ]
    audit = _same(pythons, ["audit", "mcore_cache", "--consumed", "320", "--json", "--no-progress"], inputs["dir"])
    built = {(os.path.basename(i["data_prefix"]), i["split"]): i for i in audit["indexes"]}
    assert [built[(n, "train")]["samples_per_epoch"] for n in ("web", "code")] == [308, 102]


def test_audit_of_a_megatron_core_cache(pythons: dict[str, str], inputs: dict[str, str]) -> None:
    """Every index megatron-core built is fresh; the train blend's first 320 draws are 213 of web and 107 of code,
    the draws the Megatron-LM plan of the same command line predicts; code's second pass starts at its 102 + 205th
    blend draw."""
    audit = _same(pythons, ["audit", "mcore_cache", "--consumed", "320", "--json", "--no-progress"], inputs["dir"])
    assert audit["findings"] == [] and all(i["findings"] == [] for i in audit["indexes"])
    # why sorted: the cache's file names (and so the order) are hashes of descriptions holding this run's paths
    assert (len(audit["indexes"]), sorted(b["split"] for b in audit["blends"])) == (9, ["test", "train", "valid"])
    train = next(b for b in audit["blends"] if b["split"] == "train")
    assert (train["consumed_samples"], train["size"]) == (320, 321)
    got = [
        (s["draws_consumed"], s["samples_per_epoch"], s["epochs"], s["second_pass_sample"]) for s in train["sources"]
    ]
    assert got == [(213, 308, 1, None), (107, 102, 2, 307)]


def test_audit_of_a_neox_cache(pythons: dict[str, str], inputs: dict[str, str]) -> None:
    """The index files real GPT-NeoX wrote: samples and tokens equal what NeoX reported building
    (tests/fixtures/neox/neox_golden.json); 600 samples of 64 tokens are 38400 token exposures."""
    cache = os.path.join(NEOX_FIXTURES, "neox_cache")
    audit = _same(pythons, ["audit", cache, "--consumed", "600", "--json", "--no-progress"], inputs["dir"])
    a = next(i for i in audit["indexes"] if os.path.basename(i["data_prefix"]) == "corpus_a")
    assert (a["epochs"], a["samples"], a["tokens"], a["documents"]) == (2, 4621, 147903, 1000)
    assert a["exposure"]["token_exposures"] == 600 * 64 and a["exposure"]["tokens"] == {
        "0": 111980,
        "1": 33446,
        "2": 2477,
    }
    assert all(i["findings"] == [] for i in audit["indexes"])


def test_resume_check_with_another_batch_size(pythons: dict[str, str], inputs: dict[str, str]) -> None:
    """Stopped at 30 x 8 = 240 samples, resumed with 16 per iteration: stock NeoX starts at 30 x 16 = 480."""
    argv = ["resume-check", "stopped", "resumed.yml", "--exposure", "--json"]
    out = _same(pythons, argv, inputs["dir"], code=1)
    assert (out["iteration"], out["consumed_samples"], out["start_sample"]) == (30, 240, 480)
    assert out["skipped"] == [240, 480]  # samples 240..479 are never trained
    code = out["sources"][1]
    assert (code["name"], code["skipped_samples"], code["skipped_tokens"]) == ("code", 62, 62 * SEQ)
    # the exposure of each source over the whole run: its draws times 32 tokens, resumed and continued alike
    exposure = out["exposure"]
    assert [
        (exposure[n]["resumed"]["token_exposures"], exposure[n]["continued"]["token_exposures"])
        for n in ("web", "code")
    ] == [(195 * SEQ, 195 * SEQ), (125 * SEQ, 125 * SEQ)]
    assert exposure["web"]["resumed"]["tokens"] == {"0": 5122, "1": 5043, "2": 552, "3": 31}


def test_report_of_a_resumed_run(pythons: dict[str, str], inputs: dict[str, str]) -> None:
    """30 iterations of 8, then the run re-planned for 16 per iteration (560 // 16 = 35 iterations) resumed at 30;
    web ends at the 331 samples the plan draws from it."""
    out = _same(pythons, ["report", "run", "--json"], inputs["dir"])
    launches = [(x["from_iteration"], x["to_iteration"], x["train_batch_size"], x["status"]) for x in out["launches"]]
    assert launches == [(0, 30, 8, "stopped early"), (30, 35, 16, "complete")]
    web = out["sources"][0]
    assert (web["name"], web["samples_per_epoch"], web["points"][-1]["samples"]) == ("web", 335, 331)
