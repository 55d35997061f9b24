"""The learning-rate schedule follows the plan (issue item 4): exact mode changes train_iters, and the keys
whose meaning is a length in iterations follow it, are warned about, or are said to follow by themselves.

The corpus: 95 documents of 1000 tokens and one of 1745 = 96,745 tokens. With seq_length 8, one epoch is
(96745 - 1) // 8 = 12,093 samples; NeoX's len is samples - 1 = 12,092, so one exact pass is 12,092 samples
= 3,023 iterations of 4 with no remainder (a shipped config's train_iters 320000 becomes 3023).
"""

from __future__ import annotations

import json
import logging
import os
from types import SimpleNamespace
from typing import Any

import optional
import pytest
import yaml

from neox_epoch.cli import main
from neox_epoch.formats.neox_config import EpochBlock
from neox_epoch.neox.hook_plan import apply_overwrite
from neox_epoch.neox.planning import make_run_plan
from neox_epoch.plan.schedule import NeoxScheduleKeys, neox_schedule, scale
from neox_epoch.plan.schedule_mcore import McoreScheduleKeys, mcore_schedule

DOCS = [1000] * 95 + [1745]
SHIPPED = {
    "seq_length": 8,
    "train_batch_size": 4,
    "train_micro_batch_size_per_gpu": 4,
    "train_iters": 320000,
    "lr_decay_iters": 320000,
    "warmup": 0.01,
    "save": "checkpoints",
    "checkpoint_factor": 10000,
    "eval_interval": 1000,
    "eval_iters": 10,
}


@pytest.fixture
def small(fixed_corpus: Any) -> str:
    return fixed_corpus("small", DOCS)


def neox_config(tmp_path: Any, prefix: str, name: str = "shipped.yml", **changes: Any) -> str:
    cfg = {"train_data_paths": [prefix], "valid_data_paths": [prefix], "test_data_paths": [prefix], **SHIPPED}
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    path = tmp_path / name
    path.write_text(json.dumps(cfg))
    return str(path)


def plan_json(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code = main(["plan", *args, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return dict(json.loads(out))


def entry(plan: dict[str, Any], key: str) -> dict[str, Any]:
    (e,) = [e for e in plan["settings"]["schedule"] if e["key"] == key]
    return dict(e)


def codes(plan: dict[str, Any]) -> list[str]:
    return [w["code"] for w in plan["warnings"]]


# ----------------------------------------------------------------------------------------------------------
# the shipped-like config through neox-epoch plan


def test_shipped_config_lr_decay_follows_the_new_train_iters(
    small: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The user report: 320000 -> 3023 with lr_decay_iters 320000 kept would warm up for 0.01 * 320000 = 3200
    iterations, longer than the run. lr_decay_iters equalled train_iters, so it follows it (3023), and the warmup,
    a fraction of the decay, becomes 0.01 * 3023 = 30.23 iterations."""
    plan = plan_json([neox_config(tmp_path, small), "--epochs", "1"], capsys)
    assert plan["train_iters"] == 3023 and plan["remainder"]["samples"] == 0
    assert entry(plan, "train_iters") == {
        "key": "train_iters",
        "old": 320000,
        "new": 3023,
        "action": "set",
        "why": "exact mode, 1 pass over every train source: train_iters = sum(targets) // global_batch_size = "
        "12092 // 4 = 3023",
    }
    decay = entry(plan, "lr_decay_iters")
    assert (decay["old"], decay["new"], decay["action"]) == (320000, 3023, "scaled")
    assert decay["why"].startswith("lr_decay_iters = 320000 * 3023 / 320000 = 3023")
    warm = entry(plan, "warmup")
    assert (warm["old"], warm["new"], warm["action"]) == (0.01, 0.01, "follows")
    assert "0.01 * 3023 = 30.23 warmup iterations (was 0.01 * 320000 = 3200)" in warm["why"]
    # checkpoint_factor 10000 > 3023: NeoX saves only after the last iteration; 10000 * 3023 / 320000 = 94.47
    ckpt = entry(plan, "checkpoint_factor")
    assert (ckpt["new"], ckpt["action"]) == (10000, "warned") and "rounded to 94" in ckpt["why"]
    # eval_interval 1000 <= 3023: evaluations at 1000, 2000, 3000 and one at the end
    assert entry(plan, "eval_interval")["why"] == "3 evaluations during the run, and one at the end"
    assert "checkpoint-interval" in codes(plan)
    assert "lr-schedule" not in codes(plan) and "warmup" not in codes(plan)
    assert plan["settings"]["neox_overlay"]["lr_decay_iters"] == 3023


def test_text_output_has_a_schedule_section(small: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """The text report shows each key as key: old -> new (action): why."""
    assert main(["plan", neox_config(tmp_path, small), "--epochs", "1"]) == 0
    out = capsys.readouterr().out
    section = out[out.index("schedule (") :]
    assert "train_iters: 320000 -> 3023 (set)" in section
    assert "lr_decay_iters: 320000 -> 3023 (scaled): lr_decay_iters = 320000 * 3023 / 320000 = 3023" in section


def test_unknown_old_train_iters_cannot_follow_lr_schedule_warning(
    small: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A block config without train_iters keeps lr_decay_iters 320000 (no ratio to scale it by): the run of 3023
    iterations would warm up for 0.01 * 320000 = 3200 iterations and never decay. Warned with code lr-schedule."""
    cfg = neox_config(tmp_path, small, train_iters=None, neox_epoch={"epochs": 1})
    plan = plan_json([cfg], capsys)
    decay = entry(plan, "lr_decay_iters")
    assert (decay["old"], decay["new"], decay["action"]) == (320000, 320000, "warned")
    (w,) = [w for w in plan["warnings"] if w["code"] == "lr-schedule"]
    assert "the warmup (3200 iterations) outlasts the run" in w["text"] and "set it to 3023" in w["text"]
    (warm,) = [w for w in plan["warnings"] if w["code"] == "warmup"]
    assert "0.01 * 320000 = 3200 warmup iterations are 106% of the 3023" in warm["text"]


def test_lr_decay_iters_absent_follows_by_itself(small: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """NeoX's get_learning_rate_scheduler uses train_iters when lr_decay_iters is None: nothing to change."""
    plan = plan_json([neox_config(tmp_path, small, lr_decay_iters=None), "--epochs", "1"], capsys)
    decay = entry(plan, "lr_decay_iters")
    assert (decay["old"], decay["new"], decay["action"]) == (None, None, "follows")
    assert plan["settings"]["neox_overlay"].keys() == {"train_iters", "neox_epoch"}


def test_config_warmup_check_is_replaced_by_the_schedule(
    small: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without exact mode nothing changes; warmup 0.2 of a 100-iteration decay is 20 > 10% of the run, once."""
    plan = plan_json([neox_config(tmp_path, small, train_iters=100, lr_decay_iters=None, warmup=0.2)], capsys)
    assert codes(plan).count("warmup") == 1 and "schedule" not in plan["settings"]


# ----------------------------------------------------------------------------------------------------------
# the NeoX rules as pure functions


def test_lr_decay_iters_keeps_its_ratio() -> None:
    """lr_decay_iters 300000 of 320000 (decay ends at 93.75% of the run) keeps that share: 2834.0625 -> 2834."""
    s = neox_schedule(NeoxScheduleKeys(lr_decay_iters=300000), 320000, 3023, "exact")
    assert s.overwrite() == {"train_iters": 3023, "lr_decay_iters": 2834}
    (c,) = [c for c in s.changes if c.key == "lr_decay_iters"]
    assert c.why.startswith("lr_decay_iters = 300000 * 3023 / 320000 = 2834.0625, rounded to 2834")
    assert scale(5, 1, 2) == (3, "5 * 1 / 2 = 2.5000, rounded to 3")  # half up, never 0
    assert scale(1, 1, 1000)[0] == 1


def test_lr_decay_fraction_follows_by_itself() -> None:
    """lr_decay_fraction: NeoX decays over floor(train_iters * fraction) = floor(3023 * 0.9) = 2720."""
    s = neox_schedule(NeoxScheduleKeys(lr_decay_fraction=0.9), 320000, 3023, "exact")
    assert s.overwrite() == {"train_iters": 3023}
    (c,) = [c for c in s.changes if c.key == "lr_decay_fraction"]
    assert c.action == "follows" and "= 2720 iterations" in c.why
    (w,) = [c for c in s.changes if c.key == "warmup"]
    assert "0.01 * 2720 = 27.2 warmup iterations" in w.why


def test_cosine_decay_shorter_than_the_run_rises_again() -> None:
    """NeoX's AnnealingLR.get_lr does not clamp the cosine after lr_decay_iters: cos(pi * n / end) climbs back
    for n > end. A kept ratio 300000/320000 ends the decay at 2834 of 3023: warned, code lr-schedule."""
    s = neox_schedule(NeoxScheduleKeys(lr_decay_iters=300000, lr_decay_style="cosine"), 320000, 3023, "exact")
    (w,) = [w for w in s.warnings if w.code == "lr-schedule"]
    assert "rises again for the last 189 iterations" in w.text


def test_checkpoint_resume_exit_and_extra_saves() -> None:
    """use_checkpoint_lr_scheduler with load takes the schedule from the checkpoint (lr-schedule); exit_interval
    2000 <= 3023 stops the run early (exit-interval); extra_save_iters past 3023 are never reached."""
    keys = NeoxScheduleKeys(
        lr_decay_iters=320000,
        saves=True,
        loads=True,
        use_checkpoint_lr_scheduler=True,
        exit_interval=2000,
        extra_save_iters=(0, 1000, 50000),
    )
    s = neox_schedule(keys, 320000, 3023, "exact")
    got = [w.code for w in s.warnings]
    assert got.count("lr-schedule") == 1 and "exit-interval" in got and "checkpoint-interval" in got
    (x,) = [c for c in s.changes if c.key == "extra_save_iters"]
    assert "[50000] lie past the run's last iteration 3023" in x.why
    # no save key: the checkpoint keys do nothing in NeoX, so nothing is said about them
    quiet = neox_schedule(NeoxScheduleKeys(checkpoint_factor=10000), 320000, 3023, "exact")
    assert not [c for c in quiet.changes if c.key == "checkpoint_factor"]


def test_train_epochs_is_replaced(small: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """train_epochs 2 in the config: NeoX would train len(loader) * 2 // gas = (12092 // 4) * 2 = 6046 iterations;
    exact mode sets train_iters and clears train_epochs; lr_decay_iters 6046 (= that run) follows to 3023."""
    cfg = neox_config(tmp_path, small, train_iters=None, train_epochs=2, lr_decay_iters=6046)
    plan = plan_json([cfg, "--epochs", "1"], capsys)
    assert entry(plan, "train_iters")["old"] == 6046
    assert (entry(plan, "train_epochs")["new"], entry(plan, "train_epochs")["action"]) == (None, "set")
    assert entry(plan, "lr_decay_iters")["new"] == 3023


# ----------------------------------------------------------------------------------------------------------
# Megatron-LM


def test_megatron_flags_follow(small: str, capsys: pytest.CaptureFixture[str]) -> None:
    """megatron-core has no len - 1: (96745 - 1) // 8 = 12093 samples = 3023 iterations of 4, 1 left over.
    --lr-decay-iters 320000 = --train-iters follows (3023); the absolute --lr-warmup-iters keeps its share:
    2000 * 3023 / 320000 = 18.89 -> 19 (Megatron-LM asserts warmup < decay); --save-interval 10000 > 3023."""
    plan = plan_json(
        [
            "--framework-version",
            "0.16.1",
            "--data-path",
            small,
            "--split",
            "100,0,0",
            "--seq-length",
            "8",
            "--global-batch-size",
            "4",
            "--micro-batch-size",
            "4",
            "--lr",
            "3e-4",
            "--eval-interval",
            "1000",
            "--eval-iters",
            "0",
            "--train-iters",
            "320000",
            "--lr-decay-iters",
            "320000",
            "--lr-warmup-iters",
            "2000",
            "--save-interval",
            "10000",
            "--epochs",
            "1",
        ],
        capsys,
    )
    # the flags to paste carry the schedule that follows the new length
    assert plan["settings"]["megatron_flags"] == (
        "--train-iters 3023 --mid-level-dataset-surplus 0 --lr-decay-iters 3023 --lr-warmup-iters 19"
    )
    assert plan["train_iters"] == 3023
    assert entry(plan, "--train-iters")["old"] == 320000
    assert entry(plan, "--lr-decay-iters")["why"].startswith("lr-decay-iters = 320000 * 3023 / 320000 = 3023")
    warm = entry(plan, "--lr-warmup-iters")
    assert (warm["new"], warm["action"]) == (19, "scaled") and "18.8938, rounded to 19" in warm["why"]
    assert entry(plan, "--save-interval")["action"] == "warned" and "checkpoint-interval" in codes(plan)


def test_megatron_sample_based_run(capsys: pytest.CaptureFixture[str], small: str) -> None:
    """--train-samples runs scale --lr-decay-samples: 1280000 -> 3023 * 4 = 12092 samples; --lr-warmup-fraction
    follows the decay (0.01 * 12092 = 120.92 samples)."""
    s = mcore_schedule(
        McoreScheduleKeys(lr_decay_samples=1280000, lr_warmup_fraction=0.01), None, 1280000, 3023, 4, "exact"
    )
    assert s.overwrite() == {"--train-samples": 12092, "--lr-decay-samples": 12092}
    (w,) = [c for c in s.changes if c.key == "--lr-warmup-fraction"]
    assert w.action == "follows" and "0.01 * 12092 = 120.92 samples" in w.why


def test_megatron_schedule_flags_refused_with_neox_configs(
    small: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """NeoX configs carry NeoX keys; a Megatron-LM flag next to them would be silently ignored."""
    assert main(["plan", neox_config(tmp_path, small), "--lr-decay-iters", "5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--lr-decay-iters: a Megatron-LM flag" in err


# ----------------------------------------------------------------------------------------------------------
# the hooks and neox-epoch launch


def neox_values(prefix: str, **changes: Any) -> dict[str, Any]:
    return {
        "train_data_paths": [prefix],
        "valid_data_paths": [prefix],
        "test_data_paths": [prefix],
        "train_data_weights": [1.0],
        **SHIPPED,
        **changes,
    }


def test_run_plan_overwrites_the_schedule_and_logs_it(small: str, caplog: pytest.LogCaptureFixture) -> None:
    """The hooks set train_iters and lr_decay_iters on NeoX's args before NeoX builds its scheduler (pretrain
    builds the data loaders before setup_model_and_optimizer), and log old -> new with the reason."""
    rp = make_run_plan(neox_values(small), EpochBlock(epochs=1))
    assert rp.overwrite() == {"train_iters": 3023, "lr_decay_iters": 3023}
    args = SimpleNamespace(**neox_values(small))
    with caplog.at_level(logging.INFO, logger="neox_epoch"):
        apply_overwrite(args, rp)
    assert (args.train_iters, args.lr_decay_iters) == (3023, 3023)
    text = caplog.text
    assert "train_iters 320000 -> 3023: exact mode, 1 pass over every train source" in text
    assert "lr_decay_iters 320000 -> 3023: lr_decay_iters = 320000 * 3023 / 320000 = 3023" in text
    # a worker started by neox-epoch launch sees the values already overwritten: nothing changes twice
    again = make_run_plan(neox_values(small, train_iters=3023, lr_decay_iters=3023), EpochBlock(epochs=1))
    assert again.overwrite() == {"train_iters": 3023}


@optional.needs("deepspeed")  # launch's preflight reads DeepSpeed's version and removed keys
def test_launch_passes_the_schedule_as_overwrite_values(
    small: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """neox-epoch launch's from_ymls wrapper hands NeoX the changed keys with train_iters (the same overwrite
    mechanism), and prints every change on stderr."""
    from neox_epoch.neox import launch
    from neox_epoch.neox.block import ENV_VAR

    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    monkeypatch.setenv(ENV_VAR, "")
    monkeypatch.setattr(launch, "STATE", launch.LaunchState())
    cfg = tmp_path / "run.yml"
    cfg.write_text(yaml.safe_dump({**neox_values(small), "global_num_gpus": 1, "neox_epoch": {"epochs": 1}}))
    overwrite: dict[str, Any] = {}
    launch.apply_block([str(cfg)], overwrite)
    assert overwrite == {"train_iters": 3023, "lr_decay_iters": 3023}
    err = capsys.readouterr().err
    assert "neox_epoch: train_iters: 320000 -> 3023 (set): exact mode" in err
    assert "neox_epoch: lr_decay_iters: 320000 -> 3023 (scaled)" in err
    assert "neox_epoch: warning: checkpoint_factor 10000 > train_iters 3023" in err
    assert [e["key"] for e in launch.STATE.schedule][:2] == ["train_iters", "lr_decay_iters"]
    assert os.path.isfile(str(cfg))
