"""The learning-rate schedule over a staged run (neox_epoch.plan.stage_schedule): warmup once, the decay on the
stage boundaries the stage plan's ``decay`` names, checked against the frameworks' own schedulers run on CPU:
GPT-NeoX's ``get_learning_rate_scheduler`` / ``AnnealingLR`` (tests/helpers/neox_lr_truth.py, NeoX's Python) and
Megatron-LM's ``get_optimizer_param_scheduler`` / megatron-core's ``OptimizerParamScheduler``
(tests/helpers/megatron_lm_truth.py, stepped by the global batch per iteration as train_step does).

NeoX corpora as tests/neox/test_neox_stages_plan.py (a 96, b 64, c 48 samples per pass, global batch 4: stages
0..24, 24..52, 52..92); megatron-core corpora as tests/mcore/test_mcore_stages.py (a 123, b 82, c 76 samples per epoch,
global batch 4: stages 0..31, 31..67, 67..125)."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path
from typing import Any

import frameworks
import pytest

from neox_epoch.cli import main
from neox_epoch.errors import ConfigError
from neox_epoch.formats.neox_config import EpochBlock
from neox_epoch.formats.stage_config import StagesConfig
from neox_epoch.plan.stage_schedule import mcore_lr, mcore_stage_schedule, neox_lr
from neox_epoch.plan.stages import plan_stages
from tests.neox.test_neox_stages_plan import STAGES, _corpus

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/


def _neox_config(tmp: Path, decay: dict[str, str] | None, **keys: Any) -> Path:
    for k, (name, n) in enumerate({"a": 96, "b": 64, "c": 48}.items()):
        if not (tmp / f"{name}.bin").exists():
            _corpus(str(tmp / name), 11 + k, n)
    block: dict[str, Any] = {"stages": STAGES, "max_passes": 2}
    if decay is not None:
        block["decay"] = decay
    cfg = {
        "seq_length": 128,
        "train_micro_batch_size_per_gpu": 2,
        "global_num_gpus": 2,
        "num_gpus": 2,
        "train_data_paths": [str(tmp / n) for n in "abc"],
        "train_data_weights": [1, 1, 1],
        "valid_data_paths": [str(tmp / "a")],
        "test_data_paths": [str(tmp / "a")],
        "valid_data_weights": [1],
        "test_data_weights": [1],
        "eval_interval": 1000,
        "eval_iters": 0,
        "optimizer": {"type": "Adam", "params": {"lr": 0.001}},
        "min_lr": 0.0001,
        **keys,
        "neox_epoch": block,
    }
    path = tmp / f"staged-{len(list(tmp.glob('staged-*.yml')))}.yml"
    path.write_text(json.dumps(cfg))
    return path


def _plan_json(path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["plan", str(path), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _neox_truth(args: dict[str, Any], at: list[int]) -> dict[str, Any]:
    proc = subprocess.run(
        [
            frameworks.neox_python(),
            os.path.join(HERE, "helpers", "neox_lr_truth.py"),
            json.dumps({"args": args, "at": at}),
        ],
        cwd=frameworks.neox_dir(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_neox_decay_until_a_stage_equals_neox_scheduler(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """decay until stage 'two': lr_decay_iters 52 (stage two's end) in the overlay; NeoX's own scheduler, built from
    the config with that key, gives the plan's rate at every stage's first iteration, bit for bit. Without decay
    (cosine): the decay runs over train_iters 92, as NeoX's default."""
    until = _plan_json(_neox_config(tmp_path, {"until_stage": "two"}, warmup=0.1, lr_decay_style="linear"), capsys)
    assert until["settings"]["neox_overlay"]["lr_decay_iters"] == 52
    assert until["settings"]["neox_overlay"]["neox_epoch"]["decay"] == {"until_stage": "two"}
    sched = until["stages"]["lr_schedule"]
    assert sched["settings"] == {"lr_decay_iters": 52} and sched["warmup_iters"] == 5.2
    assert [(p["iteration"], p["lr"]) for p in sched["points"]] == [
        (0, 0.001 / 5.2),
        (24, 0.001 * (46.8 - 18.8) / 46.8),
        (52, 0.0001),
        (91, 0.0001),
    ]
    plain = _plan_json(_neox_config(tmp_path, None, warmup=0.01, lr_decay_style="cosine"), capsys)
    psched = plain["stages"]["lr_schedule"]
    assert (
        psched["settings"] == {}
        and psched["decay_end"] == 92
        and "lr_decay_iters" not in plain["settings"]["neox_overlay"]
    )
    for data, style, warmup in ((until, "linear", 0.1), (plain, "cosine", 0.01)):
        s = data["stages"]["lr_schedule"]
        args = {
            "train_iters": 92,
            "lr_decay_iters": data["settings"]["neox_overlay"].get("lr_decay_iters"),
            "lr_decay_fraction": None,
            "warmup": warmup,
            "lr": 0.001,
            "min_lr": 0.0001,
            "lr_decay_style": style,
        }
        real = _neox_truth(args, [p["iteration"] for p in s["points"]])
        assert real["end_iter"] == s["decay_end"] and real["warmup_iter"] == s["warmup_iters"]
        assert {str(p["iteration"]): p["lr"] for p in s["points"]} == real["lr_at"]
    assert [p["iteration"] for p in psched["points"]] == [0, 24, 52, 91]


def test_neox_refuses_a_decay_from_a_later_stage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _neox_config(tmp_path, {"from_stage": "three"})
    assert main(["plan", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "neox_epoch.decay.from_stage 'three': GPT-NeoX's AnnealingLR" in err and "remove from_stage" in err


def test_decay_config_errors() -> None:
    ok = StagesConfig.from_mapping({"stages": STAGES, "decay": {"from_stage": "two", "until_stage": "three"}})
    assert ok.decay is not None and ok.decay.to_mapping() == {"from_stage": "two", "until_stage": "three"}
    assert "decay" not in ok.to_mapping()  # not in the data fingerprint
    cases = [
        ({"from_stage": "tree"}, "decay.from_stage: 'tree' is not a stage (did you mean"),
        ({"from_stage": "three", "until_stage": "two"}, "decay: from_stage 'three' comes after until_stage 'two'"),
        ({"until": "two"}, "decay: unknown key 'until'"),
        ("two", "decay: expected a mapping"),
    ]
    for decay, text in cases:
        with pytest.raises(ConfigError, match=None) as err:
            StagesConfig.from_mapping({"stages": STAGES, "decay": decay})
        assert text in str(err.value), str(err.value)
    with pytest.raises(ConfigError) as err2:
        EpochBlock.from_mapping({"epochs": 1, "decay": {"until_stage": "two"}}, "x.yml")
    assert "decay: places the learning-rate decay on stage boundaries; it needs stages" in str(err2.value)


def test_pure_schedulers_match_their_sources() -> None:
    """neox_lr / mcore_lr on hand-computed values (the real classes are run in the other tests)."""
    assert neox_lr(0, 1.0, 10, 100, "linear") == 0.1  # NeoX: max(1, num_iters) / warmup_iter
    assert neox_lr(120, 1.0, 10, 100, "cosine") > neox_lr(100, 1.0, 10, 100, "cosine")  # not clamped
    assert mcore_lr(0, 1.0, 0.1, 10, 100, "linear") == 0.0
    assert mcore_lr(60, 1.0, 0.0, 0, 100, "WSD", 40, "linear") == 1.0
    assert mcore_lr(80, 1.0, 0.0, 0, 100, "WSD", 40, "linear") == 0.5
    plan = plan_stages(StagesConfig.from_mapping({"stages": STAGES}), {"a": 96, "b": 64, "c": 48}, 4)
    with pytest.raises(ConfigError, match="inside the warmup"):
        mcore_stage_schedule(
            plan, StagesConfig.from_mapping({"stages": STAGES, "decay": {"from_stage": "two"}}).decay, warmup_iters=30
        )


def test_mcore_wsd_from_a_stage_equals_megatron_lm(tmp_path: Path) -> None:
    """exact_stages with decay from stage s3 (WSD) and with decay until s2 (cosine): the flags it gives, run through
    Megatron-LM's own get_optimizer_param_scheduler (this stack's: core_v0.16.1 or 0.19.2) and stepped as train_step
    steps it, give the plan's rates."""
    import megatron_lm_env as env
    import optional

    optional.require("megatron.core")
    from neox_epoch.formats.corpus import write_random_corpus
    from neox_epoch.mcore import exact_stages
    from tests.mcore.test_mcore_stages import ISSUE, gpt_config

    prefixes = []
    for name, seed, docs in (("a", 1, 40), ("b", 2, 30), ("c", 3, 20)):
        prefixes.append(str(tmp_path / name))
        write_random_corpus(prefixes[-1], seed, docs)
    model = (
        "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --max-position-embeddings 32 --lr 1e-3 "
        "--min-lr 1e-5 --tokenizer-type NullTokenizer --vocab-size 65000 --seq-length 32 --micro-batch-size 1 "
        "--split 100,0,0 --eval-iters 0 --eval-interval 1000 --seed 1234 --global-batch-size 4"
    ).split()
    runs = {
        "wsd": ({"from_stage": "s3"}, {"warmup_iters": 3, "wsd_style": "linear"}),
        "until": ({"until_stage": "s2"}, {"warmup_fraction": 0.1, "style": "cosine"}),
    }
    cases, schedules = [], {}
    for label, (decay, opts) in runs.items():
        setup = exact_stages(gpt_config(prefixes, str(tmp_path / "cache")), {**ISSUE, "decay": decay}, 4)
        sched = setup.lr_schedule(lr=1e-3, min_lr=1e-5, **opts)
        schedules[label] = sched
        own = (
            ["--lr-warmup-iters", str(opts["warmup_iters"]), "--lr-wsd-decay-style", "linear"]
            if "warmup_iters" in opts
            else ["--lr-warmup-fraction", "0.1", "--lr-decay-style", "cosine"]
        )
        flags = [str(x) for k, v in sched.settings.items() for x in (k, v)]
        argv = [*model, "--train-iters", str(setup.train_iters), "--data-path", *prefixes, *own, *flags]
        cases.append(
            {
                "id": label,
                "argv": argv,
                "world_size": 1,
                "cache_dir": str(tmp_path),
                "build": False,
                "lr_at": [it for _, it, _ in sched.points],
            }
        )
    assert schedules["wsd"].settings == {
        "--lr-decay-iters": 125,
        "--lr-decay-style": "WSD",
        "--lr-wsd-decay-iters": 58,
        "--lr-wsd-decay-style": "linear",
    }
    assert [(it, lr) for _, it, lr in schedules["wsd"].points] == [
        (0, 0.0),
        (31, 0.001),
        (67, 0.001),
        (124, 1e-05 + (1 - 57 / 58) * (0.001 - 1e-05)),
    ]
    assert schedules["until"].settings == {"--lr-decay-iters": 67}
    assert [it for _, it, _ in schedules["until"].points] == [0, 31, 67, 124]
    truth = {c["id"]: c for c in env.run_truth(cases, str(tmp_path / "work"), timeout=300)["cases"]}
    for label, sched in schedules.items():
        real = truth[label]
        assert real["refusal"] is None, real["refusal"]
        for key in ("lr_warmup_steps", "lr_decay_steps", "wsd_decay_steps"):
            assert real["scheduler"][key] == sched.scheduler[key], (label, key)
        assert real["scheduler"]["lr_at"] == {str(it): lr for _, it, lr in sched.points}, label


@frameworks.needs_stack("today")
def test_megatron_lm_phases_decay_from_a_phase_equals_megatron_lm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exact phases (the issue's passes, global batch 3: phases of 41, 68, 78 iterations) with --decay-from-phase 3:
    every phase's flags carry one WSD schedule in samples; phase 3's launch line, run through Megatron-LM's own
    get_optimizer_param_scheduler, gives the plan's rate at each phase's first iteration."""
    import megatron_lm_env as env

    from neox_epoch.formats.corpus import write_random_corpus
    from neox_epoch.plan.phases import exact_phases, without
    from tests.megatron_lm.test_megatron_phases import line

    monkeypatch.chdir(tmp_path)
    for name, seed, docs in (("a", 1, 40), ("b", 2, 30), ("c", 3, 20)):
        write_random_corpus(str(tmp_path / name), seed, docs)
    d = {n: str(tmp_path / n) for n in "abc"}
    version = "0.19.2"
    base = line(
        "--train-samples",
        "504",
        "--phase-transition-iterations",
        "31,67",
        "--data-path",
        d["a"],
        "--lr-warmup-samples",
        "9",
        "--lr-wsd-decay-style",
        "cosine",
        gbs=3,
    )
    exact, _ = exact_phases(
        base,
        {2: ["--data-path", d["a"], d["b"]], 3: ["--data-path", d["b"], d["c"]]},
        version,
        {1: {"a": 1.0}, 2: {"a": 1.0, "b": 1.0}, 3: {"b": 1.0, "c": 2.0}},
        {"from": 3},
    )
    sched = exact[0].lr_schedule
    assert sched is not None and all(p.lr_schedule == sched for p in exact)
    wanted = "--lr-decay-samples 561 --lr-decay-style WSD --lr-wsd-decay-samples 234 --lr-wsd-decay-style cosine"
    assert all(wanted in p.flags for p in exact)
    last = 0.5 * (math.cos(math.pi * 231 / 234) + 1.0) * 1e-4  # 186 * 3 = 558 samples, 231 into the 234 of WSD
    assert [(it, lr) for _, it, lr in sched.points] == [(0, 0.0), (41, 1e-4), (109, 1e-4), (186, last)]
    phase3 = without(base, ["--data-path"]) + exact[2].flags.split()
    phase3 = [t.replace("82.0", "82").replace("152.0", "152") for t in phase3]
    case = {
        "id": "phase-3",
        "argv": phase3,
        "world_size": 1,
        "cache_dir": str(tmp_path),
        "build": False,
        "lr_at": [it for _, it, _ in sched.points],
    }
    real = env.run_truth([case], str(tmp_path / "work"), timeout=300)["cases"][0]
    assert real["refusal"] is None, real["refusal"]
    assert real["scheduler"]["lr_decay_steps"] == 561 and real["scheduler"]["wsd_decay_steps"] == 234
    assert real["scheduler"]["lr_warmup_steps"] == 9
    assert real["scheduler"]["lr_at"] == {str(it): lr for _, it, lr in sched.points}


def test_hooks_set_lr_decay_iters_on_the_boundary(tmp_path: Path) -> None:
    """The hooks' plan (neox_epoch.neox.planning.make_run_plan, from NeoX's parsed values) with decay until stage
    'two': train_iters 92 and lr_decay_iters 52 among the keys they set on NeoX's args before its scheduler is
    built, as plan --write-config writes them."""
    from neox_epoch.neox.planning import make_run_plan

    path = _neox_config(tmp_path, {"until_stage": "two"}, warmup=0.1)
    cfg = json.loads(path.read_text())
    block = EpochBlock.from_mapping(cfg.pop("neox_epoch"), str(path))
    values = {**cfg, "train_batch_size": 4}
    rp = make_run_plan(values, block)
    assert rp.overwrite()["train_iters"] == 92 and rp.overwrite()["lr_decay_iters"] == 52
    plain = make_run_plan(values, EpochBlock.from_mapping({"stages": STAGES}, str(path)))
    assert "lr_decay_iters" not in plain.overwrite()
