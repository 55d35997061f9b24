"""Megatron-LM command lines: neox_epoch.formats.megatron_args against the real Megatron-LM (core_v0.16.1).

Fast unit tests of the parser run everywhere. The ``megatron_lm`` tests run Megatron-LM's own
parse_args/validate_args/update_train_iters/get_train_valid_test_num_samples and dataset builder
(tests/helpers/megatron_lm_truth.py, in a subprocess) on the command lines of Megatron-LM's examples/ (read from
its .sh scripts at test time) and on randomized command lines, and require the same train_iters,
global batch, samples per split and refusals, exactly.
"""

from __future__ import annotations

import json
import os
import random
import stat
import subprocess
import sys
from typing import Any

import frameworks
import numpy as np
import pytest
from paths import HELPERS

from neox_epoch.errors import ConfigError
from neox_epoch.formats import idx
from neox_epoch.formats.corpus import write_random_corpus
from neox_epoch.formats.megatron_args import parse_megatron_argv
from neox_epoch.formats.megatron_flags import megatron_lm_version
from neox_epoch.formats.megatron_launcher import split_launcher
from neox_epoch.formats.megatron_run import megatron_run
from neox_epoch.plan.from_megatron import megatron_input
from neox_epoch.plan.planner import make_plan
from neox_epoch.semantics import mcore, megatron_batches, megatron_lr
from neox_epoch.semantics import megatron_lm as megatron_lm_sem
from neox_epoch.semantics.megatron_lm import MegatronRefusal

MODEL = (
    "--num-layers 4 --hidden-size 64 --num-attention-heads 4 --max-position-embeddings 4096 "
    "--lr 1e-4 --tokenizer-type NullTokenizer --vocab-size 65000"
).split()


def argv(*extra: str) -> list[str]:
    """A small valid command line plus ``extra``."""
    return [
        *MODEL,
        "--seq-length",
        "128",
        "--micro-batch-size",
        "2",
        "--data-path",
        "data/web",
        "--split",
        "98,1,1",
        "--eval-interval",
        "10",
        *extra,
    ]


def refusal(tokens: list[str]) -> MegatronRefusal:
    """The refusal a command line gets (parse or run)."""
    with pytest.raises(MegatronRefusal) as info:
        megatron_run(parse_megatron_argv(tokens))
    return info.value


# ------------------------------------------------------------------------------------ fast unit tests


def test_table_is_megatron_lm_0_16_1() -> None:
    assert megatron_lm_version() == "0.16.1"


def test_defaults_are_megatron_lms() -> None:
    a = parse_megatron_argv(argv("--train-iters", "100", "--world-size", "8"))
    run = megatron_run(a)
    assert (a.eval_iters, a.eval_interval, a.seed, a.mid_level_dataset_surplus) == (100, 10, 1234, 0.005)
    assert a.data_parallel_size == 8 and a.global_batch_size == 16 and not a.global_batch_size_given
    assert run.num_samples == (1600, (100 // 10 + 1) * 100 * 16, 100 * 16)
    assert "--num-layers" in a.not_affecting_plan and "--seq-length" not in a.not_affecting_plan


def test_flag_equals_value_and_repeated_flags() -> None:
    a = parse_megatron_argv(argv("--train-iters=50", "--train-iters", "70", "--global-batch-size=32", "--world-size=4"))
    assert (a.train_iters, a.global_batch_size, a.world_size) == (70, 32, 4)


def test_unknown_flag_did_you_mean() -> None:
    err = refusal(argv("--train-iters", "5", "--micro-batchsize", "1"))
    assert "--micro-batchsize" in str(err) and 'did you mean "--micro-batch-size"' in str(err)
    assert err.stage == "parse_args" and "\n" not in str(err)


def test_start_eval_at_iter_is_not_a_0_16_1_flag() -> None:
    err = refusal(argv("--train-iters", "5", "--start-eval-at-iter", "10"))
    assert err.stage == "parse_args"
    assert "--start-eval-at-iter: not a Megatron-LM 0.16.1 flag: added after 0.16.1 (in Megatron-LM 0.19.2)" in str(err)


def test_tables_by_version() -> None:
    """One option table per Megatron-LM version, chosen from the megatron-core version planned."""
    assert (megatron_lm_version("0.16.1"), megatron_lm_version("0.19.2")) == ("0.16.1", "0.19.2")
    assert [
        megatron_lm_sem.rules_for(v).version for v in ("0.10.0", "0.16.1", "0.16.0", "0.19.0", "0.19.2", "0.20.1")
    ] == [
        "0.16.1",
        "0.16.1",
        "0.16.1",
        "0.19.2",
        "0.19.2",
        "0.19.2",
    ]
    a = parse_megatron_argv(argv("--train-iters", "10"), "0.19.2")
    assert (
        a.megatron_lm_version == "0.19.2"
        and parse_megatron_argv(argv("--train-iters", "10"), "0.10.0").megatron_lm_version == "0.16.1"
    )
    err = refusal_at("0.19.2", argv("--train-iters", "10", "--use-legacy-models"))
    assert "--use-legacy-models: not a Megatron-LM 0.19.2 flag: removed after 0.16.1 (not in 0.19.2)" in str(err)
    assert "Megatron-LM 0.19.2 validate_args refuses" in str(
        refusal_at("0.19.2", argv("--train-iters", "10", "--batch-size", "4"))
    )


def test_framework_version_note(
    tmp_path: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--framework-version 0.16.1 with megatron-core 0.19.2 installed: 0.16.1's rules (a ramp-up with
    --train-iters refused, as 0.16.1 refuses it; 0.19.2 ignores it) and one note saying so."""
    from neox_epoch import cli
    from neox_epoch.formats import detect

    monkeypatch.setattr(detect, "megatron_core_source", lambda paths=None: ("0.19.2", "site-packages"))
    prefix = str(tmp_path / "web")
    write_random_corpus(prefix, 1, 500, 50, 400)
    tokens = [
        "plan",
        "--framework-version",
        "0.16.1",
        *[prefix if t == "data/web" else t for t in argv("--train-iters", "20", "--world-size", "8")],
    ]
    assert cli.main(tokens) == 0
    out = capsys.readouterr().out
    assert (
        out.count(
            "note: --framework-version 0.16.1: planned with Megatron-LM 0.16.1's flags and rules, not "
            "Megatron-LM 0.19.2's (those of the megatron-core 0.19.2 installed, site-packages)"
        )
        == 1
    )
    assert cli.main([*tokens, "--rampup-batch-size", "4", "4", "64"]) == 2
    assert "Megatron-LM 0.16.1 validate_args refuses it" in capsys.readouterr().err


def refusal_at(version: str, tokens: list[str]) -> MegatronRefusal:
    """The refusal a command line gets under the rules of ``version``."""
    with pytest.raises(MegatronRefusal) as info:
        megatron_run(parse_megatron_argv(tokens, version))
    return info.value


def test_bad_value_is_one_line() -> None:
    err = refusal(argv("--train-iters", "many"))
    assert "invalid int value" in str(err) and "\n" not in str(err)


def test_torchrun_launcher_and_world_flags() -> None:
    launcher = ["torchrun", "--nproc_per_node", "8", "--nnodes=2", "--master_addr", "h", "pretrain_gpt.py"]
    a = parse_megatron_argv([*launcher, *argv("--train-iters", "10", "--tensor-model-parallel-size", "2")])
    assert (a.world_size, a.data_parallel_size, a.global_batch_size) == (16, 8, 16)
    assert split_launcher(launcher + ["--seed", "1"])[1] == ["--seed", "1"]
    b = parse_megatron_argv(argv("--train-iters", "10", "--nproc-per-node", "4", "--nnodes", "3"))
    assert b.world_size == 12
    with pytest.raises(ConfigError, match="elastic"):
        parse_megatron_argv(argv("--train-iters", "10", "--nnodes", "1:4"))


def test_a_py_value_is_not_the_script() -> None:
    tokens = ["--yaml-cfg", "cfg.py", "--seed", "3"]
    assert split_launcher(tokens) == ([], tokens)
    assert split_launcher(["python", "pretrain_gpt.py", *tokens]) == (["python"], tokens)


@pytest.mark.parametrize(
    "extra, flag",
    [
        (["--mock-data"], "--mock-data"),
        (["--sft"], "--sft"),
        (["--dataloader-type", "cyclic"], "--dataloader-type"),
        (["--dataloader-type", "external"], "--dataloader-type"),
    ],
)
def test_unplannable(extra: list[str], flag: str) -> None:
    tokens = argv("--train-iters", "10", *extra)
    if flag == "--mock-data":
        tokens = [t for t in tokens if t not in ("--data-path", "data/web")]
    err = refusal(tokens)
    assert err.stage == "neox-epoch" and str(err).startswith(flag) and "\n" not in str(err)


@pytest.mark.parametrize("prefix", ["s3://bucket/web", "msc://profile/web"])
def test_object_storage_refused(prefix: str) -> None:
    tokens = [prefix if t == "data/web" else t for t in argv("--train-iters", "10")]
    err = refusal(tokens)
    assert err.stage == "neox-epoch" and prefix in str(err)


def test_rampup_with_train_iters_quotes_megatron() -> None:
    err = refusal(argv("--train-iters", "10", "--rampup-batch-size", "4", "4", "100"))
    assert err.stage == "validate_args" and err.megatron_error == "AssertionError"
    assert err.megatron_message == "expected no batch-size rampup for iteration-based training"
    assert "expected no batch-size rampup for iteration-based training" in str(err)


def test_missing_eval_interval_is_megatrons_type_error() -> None:
    tokens = argv("--train-iters", "12")
    del tokens[tokens.index("--eval-interval") : tokens.index("--eval-interval") + 2]
    err = refusal(tokens)
    assert err.stage == "get_train_valid_test_num_samples" and err.megatron_error == "TypeError"
    assert megatron_run(parse_megatron_argv([*tokens, "--full-validation"])).num_samples[1] is None


@pytest.mark.parametrize(
    "extra",
    [
        ["--mid-level-dataset-surplus", "nan"],
        ["--train-iters", "-3"],
        ["--tensor-model-parallel-size", "0"],
        ["--lr-warmup-fraction", "inf"],
    ],
)
def test_values_validated(extra: list[str]) -> None:
    tokens = argv("--train-samples", "100", *extra) if "--train-iters" not in extra else argv(*extra)
    err = refusal(tokens)
    assert err.stage == "neox-epoch" and str(err).startswith(extra[0]) and "\n" not in str(err)


def test_args_files_are_read(tmp_path: Any) -> None:
    data = tmp_path / "data.txt"
    data.write_text("0.3 data/web\n0.7 data/code\n")
    tokens = [t for t in argv("--train-iters", "10") if t not in ("--data-path", "data/web")]
    a = parse_megatron_argv([*tokens, "--data-args-path", str(data)])
    assert a.blend == (("data/web", "data/code"), (0.3, 0.7))
    per = tmp_path / "per.json"
    per.write_text(json.dumps({"train": "1 data/web 2 data/code", "valid": ["data/v"], "test": None}))
    b_tokens = [t for t in tokens if t not in ("--split", "98,1,1")]
    b = parse_megatron_argv([*b_tokens, "--per-split-data-args-path", str(per)])
    assert b.blend_per_split == ((("data/web", "data/code"), (1.0, 2.0)), (("data/v",), None), None)
    with pytest.raises(ConfigError, match="cannot be read"):
        parse_megatron_argv([*tokens, "--data-args-path", str(tmp_path / "missing.txt")])


def test_update_train_iters_rampup() -> None:
    sched = megatron_batches.build_num_microbatches_calculator(64, 1, 8, False, (16, 16, 100))
    # consumed 0 -> 16, 16 -> 16, 32 -> 32 (steps = int(32 / 33.3) = 0 -> 16) ...
    sizes, consumed = [], 0
    while consumed <= 100:
        sizes.append(sched.current_global_batch_size(consumed))
        consumed += sizes[-1]
    assert sizes == [16, 16, 16, 32, 48]
    assert megatron_batches.update_train_iters(None, 1000, sched) == 5 + (1000 - 128) // 64


def test_rampup_plan_shows_requested_and_consumed(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 22 item 6: --train-samples 180000 with a ramp-up asks the builder for 180,000 (Megatron-LM 0.16.1's
    get_train_valid_test_num_samples) and its loop consumes 179,856 (the ramp summed over update_train_iters'
    1,296 iterations); the plan said 1296 * 192 = 248,832 train samples and 'train_iters * global_batch_size =
    1296 * 192 = 179856'."""
    from neox_epoch import cli

    prefix = str(tmp_path / "web")
    write_random_corpus(prefix, 1, 3000, 50, 2000)
    tokens = [
        "plan",
        "--framework-version",
        "0.16.1",
        "--data-path",
        prefix,
        "--split",
        "98,1,1",
        "--seq-length",
        "512",
        "--micro-batch-size",
        "2",
        "--world-size",
        "8",
        "--train-samples",
        "180000",
        "--rampup-batch-size",
        "16",
        "16",
        "30000",
        "--global-batch-size",
        "192",
        "--eval-interval",
        "100",
        "--eval-iters",
        "10",
        "--lr",
        "1e-4",
    ]
    assert cli.main([*tokens, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["train_iters"], out["train_samples"], out["consumed_samples"]["train"]) == (1296, 180000, 179856)
    assert cli.main(tokens) == 0
    text = capsys.readouterr().out
    assert "train_iters 1,296 -> 180,000 train samples requested, 179,856 consumed" in text
    assert "train samples requested = train_samples = 180000" in text
    assert "summed over 1296 iterations = 179856" in text and "1296 * 192" not in text
    assert "248,832" not in text and "248832" not in text


def test_gbs_not_divisible_is_the_calculators_refusal() -> None:
    err = refusal(argv("--train-iters", "10", "--world-size", "8", "--global-batch-size", "20"))
    assert err.stage == "num_microbatches_calculator"
    assert err.megatron_message == (
        "global batch size (20) is not divisible by micro batch size (2) times data parallel size (8)"
    )


# ------------------------------------------------------------------------- Megatron-LM 0.19.2's rules (pure)

STEP = ["--step-batch-size-schedule", "0:16 64K:32 200K:64", "--eval-iters", "2", "--world-size", "8"]


def test_0_19_step_schedule_numbers() -> None:
    """Megatron-LM 0.19.2's own code (tests/helpers/megatron_lm_truth.py on today's stack) gave, for this command line
    at
    8 GPUs with --train-samples 5000: train_iters 119, 5024 samples consumed, requests (5000, 320, 32); with
    --train-iters 50 and --eval-global-batch-size 32: 1088 consumed, requests (800, 384, 64), LR decay 800."""
    a = parse_megatron_argv(argv("--train-samples", "5000", "--start-eval-at-iter", "20", *STEP), "0.19.2")
    run = megatron_run(a)
    assert (a.global_batch_size, run.train_iters, run.num_samples) == (16, 119, (5000, 320, 32))
    assert megatron_batches.schedule_consumed(run.schedule, run.train_iters) == 5024
    b = megatron_run(
        parse_megatron_argv(argv("--train-iters", "50", "--eval-global-batch-size", "32", *STEP), "0.19.2")
    )
    assert (megatron_batches.schedule_consumed(b.schedule, 50), b.num_samples, b.scheduler.lr_decay_steps) == (
        1088,
        (800, 384, 64),
        800,
    )


def test_0_19_warnings_and_arithmetic(corpus: Any) -> None:
    """The step schedule's last iteration reads past --train-samples, and --start-eval-at-iter 20 (a multiple of
    --eval-interval 10) makes the loop evaluate 10 times plus once after training while the request counts 10."""
    mi = megatron_input(argv("--train-samples", "5000", "--start-eval-at-iter", "20", *STEP), "0.19.2")
    codes = {w.code: w.text for w in mi.warnings}
    assert "consume 5024 samples, 24 more than the 5000 asked of the builder" in codes["draws-past-request"]
    assert "asks the builder for 10 evaluations (320 samples) but the run makes 11" in codes["eval-past-request"]
    assert "the last 32 samples are read past the request" in codes["eval-past-request"]
    assert megatron_lm_sem.evaluations_run(119, 10, 21) == 10 and mi.inp.mcore.arithmetic is not None
    assert (
        "valid samples = max(0, train_iters // eval_interval + 1 - start_eval_at_iter // eval_interval) * "
        "eval_iters * eval_global_batch_size = max(0, 119 // 10 + 1 - 20 // 10) * 2 * 16 = 320"
    ) in mi.inp.mcore.arithmetic
    tokens = [
        corpus("web", docs=3000, max_len=400) if t == "data/web" else t
        for t in argv("--train-samples", "5000", "--start-eval-at-iter", "20", *STEP)
    ]
    plan = make_plan(megatron_input(tokens, "0.19.2").inp)
    assert (plan.train_samples, plan.consumed["train"]) == (5000, 5024)


def test_0_19_exact_mode_counts_the_eval_batch(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """Exact mode under 0.19.2 with --eval-global-batch-size 32 and --start-eval-at-iter 100: the exact run's
    requests follow get_train_valid_test_num_samples (valid = max(0, 551 // 100 + 1 - 1) * 10 * 32 = 1600, test
    10 * 32 = 320; the re-parsed flags must give the same), and the warnings are the exact run's (5 evaluations
    asked, 6 made)."""
    from neox_epoch import cli

    web, code = str(tmp_path / "web"), str(tmp_path / "code")
    write_random_corpus(web, 1, 3000, 50, 2000)
    write_random_corpus(code, 2, 1500, 50, 2000)
    tokens = [
        "plan",
        "--epochs",
        "1",
        "--framework-version",
        "0.19.2",
        "--force-version",
        "--data-path",
        "0.7",
        web,
        "0.3",
        code,
        "--split",
        "98,1,1",
        "--seq-length",
        "512",
        "--micro-batch-size",
        "2",
        "--world-size",
        "8",
        "--eval-interval",
        "100",
        "--eval-iters",
        "10",
        "--lr",
        "1e-4",
        "--eval-global-batch-size",
        "32",
        "--start-eval-at-iter",
        "100",
        "--train-iters",
        "100",
        "--lr-decay-iters",
        "100",
        "--json",
    ]
    assert cli.main(tokens) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["train_iters"], out["consumed_samples"]) == (551, {"train": 8816, "valid": 1600, "test": 320})
    assert any(
        "asks the builder for 5 evaluations (1600 samples) but the run makes 6" in w["text"] for w in out["warnings"]
    )


def test_schedule_fit_stops_on_a_batch_boundary() -> None:
    """The most whole batches of "0:16 64K:32 200K:64" (seq 128: 500 and 1562 samples) within a total, and
    update_train_iters on that total runs exactly those iterations and consumes exactly it."""
    sched = megatron_batches.build_num_microbatches_calculator(16, 2, 8, False, None, "0:16 64K:32 200K:64", 128)
    for total in (15, 16, 500, 511, 515, 1561, 1600, 5000):
        iters, samples = megatron_batches.schedule_fit(sched, total)
        assert samples <= total and samples + sched.current_global_batch_size(samples) > total
        if samples:
            assert megatron_batches.update_train_iters(None, samples, sched) == iters
            assert megatron_batches.schedule_consumed(sched, iters) == samples
    # 32 x 16 = 512; then 33 x 32 to 1568 (>= 1562); then 53 x 64 to 4960
    assert megatron_batches.schedule_fit(sched, 515) == (32, 512) and megatron_batches.schedule_fit(sched, 5000) == (
        118,
        4960,
    )


def test_0_19_rampup_is_ignored_and_batch_flags_refused() -> None:
    ramp = ["--rampup-batch-size", "4", "4", "64", "--world-size", "8"]
    assert refusal(argv("--train-iters", "10", *ramp)).stage == "validate_args"  # 0.16.1 refuses it here
    mi = megatron_input(argv("--train-iters", "10", *ramp), "0.19.2")
    assert mi.args.rampup_batch_size is None and mi.run.schedule.constant and mi.args.rampup_ignored
    assert any(w.code == "rampup-ignored" for w in mi.warnings)
    err = refusal_at("0.19.2", argv("--train-iters", "10", "--global-batch-size", "32", *STEP))
    assert err.megatron_message == "Cannot specify both --step-batch-size-schedule and --global-batch-size"
    assert str(err).startswith(
        "--global-batch-size: 32: Megatron-LM 0.19.2 validate_args refuses it"
    ) and "\n" not in str(err)
    err = refusal_at("0.19.2", argv("--train-iters", "10", "--decrease-batch-size-if-needed", *STEP))
    assert err.stage == "num_microbatches_calculator" and err.megatron_error == "ValueError"
    err = refusal_at("0.19.2", argv("--train-iters", "10", "--eval-global-batch-size", "20", "--world-size", "8"))
    assert err.megatron_message == (
        "eval_global_batch_size (20) must be divisible by eval_micro_batch_size (2) * data_parallel_size (8)"
    )
    shrink = ["--step-batch-size-schedule", "0:32 1K:16", "--world-size", "8"]
    err = refusal_at("0.19.2", argv("--train-iters", "10", *shrink))
    assert err.stage == "train" and err.megatron_message == (
        "Number of microbatches should not decrease; going from 2 to 1"
    )


def test_0_19_gtp_weight_remat() -> None:
    """--tensor-parallel-num-weight-shards 4 with tp 2: gtp_weight_remat_size 2 leaves dp = 16 // (2 * 2) = 4, and
    the calculator gets dp x 2 = 8, so the default global batch micro x dp = 8 steps in one microbatch."""
    a = parse_megatron_argv(
        argv(
            "--train-iters",
            "10",
            "--world-size",
            "16",
            "--tensor-model-parallel-size",
            "2",
            "--tensor-parallel-num-weight-shards",
            "4",
            "--global-batch-size",
            "32",
        ),
        "0.19.2",
    )
    assert (a.data_parallel_size, a.gtp_weight_remat_size, a.calculator_dp) == (4, 2, 8)
    err = refusal_at(
        "0.19.2",
        argv(
            "--train-iters",
            "10",
            "--world-size",
            "16",
            "--tensor-model-parallel-size",
            "2",
            "--tensor-parallel-num-weight-shards",
            "4",
        ),
    )
    assert err.megatron_message == (
        "global batch size (8) is not divisible by micro batch size (2) times data parallel size (8)"
    )


# ------------------------------------------------------------------------------ against Megatron-LM

EXAMPLES = {
    # script under examples/: positional arguments (DATA and TOKENIZER are filled in)
    "gpt3/train_gpt3_175b_distributed.sh": ["ckpt", "tb", "vocab.json", "merges.txt", "DATA"],
    "llama/train_llama3_8b_h100_fp8.sh": ["ckpt/x", "tb/x", "TOKENIZER", "DATA"],
    "mixtral/train_mixtral_8x7b_distributed.sh": ["ckpt", "TOKENIZER", "DATA"],
    "mamba/train.sh": ["DATA", "TOKENIZER"],
}
EXAMPLE_WORLDS = {"gpt3": (8, 128, 256), "llama": (8, 16, 64), "mixtral": (8, 16, 64), "mamba": (8, 16, 64)}
TOKENIZER_FLAGS = {
    "--tokenizer-type": 1,
    "--tokenizer-model": 1,
    "--vocab-file": 1,
    "--merge-file": 1,
    "--vocab-size": 1,
    "--tiktoken-pattern": 1,
}


def example_argv(tree: str, script: str, data: str, workdir: str, positional: list[str] | None = None) -> list[str]:
    """Run an example .sh with a stand-in ``torchrun`` (and ``python``, for ``python -m torch.distributed.run``) on
    PATH that records its argv; the arguments after the training script, with the tokenizer replaced by
    NullTokenizer (it only names cache files)."""
    bindir = os.path.join(workdir, "bin")
    os.makedirs(bindir, exist_ok=True)
    os.makedirs(os.path.join(workdir, "ckpt"), exist_ok=True)  # gptoss checks its checkpoint directory exists
    capture = os.path.join(workdir, "argv.bin")
    for name in ("torchrun", "python"):
        fake = os.path.join(bindir, name)
        with open(fake, "w") as f:
            f.write('#!/bin/bash\nprintf "%s\\0" "$@" > "$CAPTURE"\n')
        os.chmod(fake, os.stat(fake).st_mode | stat.S_IEXEC)
    open(os.path.join(workdir, "pretrain_gpt.py"), "w").close()  # the llama script checks it exists
    positional = [data if a == "DATA" else a for a in (positional if positional is not None else EXAMPLES[script])]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "SLURM_NNODES")}
    env.update(PATH=bindir + os.pathsep + env.get("PATH", ""), CAPTURE=capture)
    subprocess.run(
        ["bash", os.path.join(tree, "examples", script), *positional],
        cwd=workdir,
        env=env,
        check=True,
        capture_output=True,
    )
    with open(capture, "rb") as f:
        tokens = [t.decode() for t in f.read().split(b"\0")[:-1]]
    tokens = tokens[next(i for i, t in enumerate(tokens) if t.endswith(".py")) + 1 :]  # the script's arguments
    out: list[str] = []
    skip = 0
    for tok in tokens:
        if skip:
            skip -= 1
            continue
        if tok in TOKENIZER_FLAGS:
            skip = TOKENIZER_FLAGS[tok]
            continue
        out.append(tok)
    return [*out, "--tokenizer-type", "NullTokenizer", "--vocab-size", "65000"]


def random_argv(rng: random.Random, corpora: list[str], workdir: str, i: int) -> tuple[list[str], int]:
    """One randomized command line (plan flags varied, model flags valid) and its world size."""
    tp, pp, cp = rng.choice([1, 2]), rng.choice([1, 2]), rng.choice([1, 1, 2])
    world = rng.choice([8, 16, 64, 12])
    micro = rng.choice([1, 2, 4])
    dp = max(1, world // (tp * pp * cp))
    seq = rng.choice([64, 128, 256])
    tokens = [
        *MODEL,
        "--seq-length",
        str(seq),
        "--micro-batch-size",
        str(micro),
        "--tensor-model-parallel-size",
        str(tp),
        "--pipeline-model-parallel-size",
        str(pp),
        "--context-parallel-size",
        str(cp),
        "--seed",
        str(rng.randint(1, 9999)),
    ]
    gbs_choice = rng.random()
    if gbs_choice < 0.7:
        tokens += ["--global-batch-size", str(micro * dp * rng.choice([1, 2, 3]))]
    elif gbs_choice < 0.8:
        tokens += ["--global-batch-size", str(micro * dp + 1)]  # not a multiple: the calculator refuses
    data = rng.random()
    if data < 0.35:
        tokens += ["--data-path", rng.choice(corpora)]
    elif data < 0.6:
        tokens += ["--data-path"] + [x for c in rng.sample(corpora, 2) for x in (str(rng.randint(1, 9)), c)]
    elif data < 0.7:
        tokens += ["--data-path", *rng.sample(corpora, 2)]
    elif data < 0.85:
        tokens += [
            "--train-data-path",
            "0.4",
            corpora[0],
            "0.6",
            corpora[1],
            "--valid-data-path",
            corpora[2],
            "--test-data-path",
            corpora[2],
        ]
    else:
        path = os.path.join(workdir, f"data-args-{i}.txt")
        with open(path, "w") as f:
            f.write(f"3 {corpora[0]}\n1 {corpora[2]}\n")
        tokens += ["--data-args-path", path]
    if "--train-data-path" not in tokens and rng.random() < 0.9:
        tokens += ["--split", rng.choice(["90,5,5", "98,1,1", "80,15,5", "969,30,1", "99,1,0", "80,20,0"])]
    if rng.random() < 0.5:
        tokens += ["--train-iters", str(rng.randint(1, 40))]
        if rng.random() < 0.15:
            tokens += ["--rampup-batch-size", "4", "4", "64"]  # validate_args refuses a ramp here
        if rng.random() < 0.3:
            tokens += [rng.choice(["--lr-warmup-iters", "--lr-decay-iters"]), str(rng.randint(0, 30))]
        if rng.random() < 0.05:
            tokens += ["--lr-warmup-samples", "8"]
    else:
        tokens += ["--train-samples", str(rng.randint(50, 1500))]
        if rng.random() < 0.35:
            start = micro * dp
            tokens += ["--rampup-batch-size", str(start), str(start), str(rng.randint(0, 400))]
            if "--global-batch-size" not in tokens:
                tokens += ["--global-batch-size", str(start * 4)]
        if rng.random() < 0.3:
            tokens += ["--lr-warmup-samples", str(rng.randint(0, 200))]
        if rng.random() < 0.05:
            tokens += ["--lr-decay-iters", "5"]
    if rng.random() < 0.15:
        tokens += ["--lr-warmup-fraction", str(rng.choice([0.01, 0.1]))]
    if rng.random() < 0.9:
        tokens += ["--eval-interval", str(rng.randint(5, 50))]
    tokens += ["--eval-iters", str(rng.choice([0, 1, 2, 5]))]
    if rng.random() < 0.1:
        tokens += ["--full-validation"]
    if rng.random() < 0.07:
        tokens += ["--skip-train"]
    if rng.random() < 0.1:
        tokens += ["--decrease-batch-size-if-needed"]
    if rng.random() < 0.1 and "--rampup-batch-size" not in tokens:
        tokens += ["--phase-transition-iterations", "3,1"]
    return tokens, world


def ours(tokens: list[str], world: int, version: str = "0.16.1") -> dict[str, Any]:
    """Our parser's numbers or refusal for a command line (under Megatron-LM ``version``'s rules)."""
    out: dict[str, Any] = {"refusal": None}
    try:
        a = parse_megatron_argv([*tokens, "--world-size", str(world)], version)
        out.update(data_parallel_size=a.data_parallel_size, global_batch_size=a.global_batch_size)
        run = megatron_run(a)
        out["train_consumed"] = megatron_batches.schedule_consumed(run.schedule, run.train_iters)
        out.update(
            train_iters=run.train_iters,
            num_samples=list(run.num_samples),
            scheduler={
                "lr_warmup_steps": run.scheduler.lr_warmup_steps,
                "lr_decay_steps": run.scheduler.lr_decay_steps,
                "wd_incr_steps": run.scheduler.wd_incr_steps,
                "wsd_decay_steps": run.scheduler.wsd_decay_steps,
            },
        )
    except MegatronRefusal as err:
        out["refusal"] = {"stage": err.stage, "error": err.megatron_error, "message": err.megatron_message}
        out.update(err.known)
        if "num_samples" in out:
            out["num_samples"] = list(out["num_samples"])
        if isinstance(out.get("scheduler"), megatron_lr.SchedulerSteps):
            steps = out["scheduler"]
            out["scheduler"] = {
                "lr_warmup_steps": steps.lr_warmup_steps,
                "lr_decay_steps": steps.lr_decay_steps,
                "wd_incr_steps": steps.wd_incr_steps,
                "wsd_decay_steps": steps.wsd_decay_steps,
            }
    return out


def corpus_refusal(
    tokens: list[str], world: int, version: str = "0.16.1", num: list[int | None] | None = None
) -> str | None:
    """What the corpus (not the flags) makes Megatron-LM's builder refuse, from this project's megatron-core
    semantics: "never returns" (a split with no sequence asked for samples) or "empty source" (a blend
    without weights over a source with no sample in a split: BlendedDataset asserts every weight > 0)."""
    a = parse_megatron_argv([*tokens, "--world-size", str(world)], version)
    num = num if num is not None else list(megatron_run(a).num_samples)
    if a.blend is not None:
        routes = mcore.routes(a.blend[0], a.blend[1], a.split, num, version, a.mid_level_dataset_surplus)
    else:
        routes = mcore.routes(
            [], None, None, num, version, a.mid_level_dataset_surplus, blend_per_split=a.blend_per_split
        )
    for route in (r for r in routes if r is not None):
        lengths = []
        for prefix, bookends, request in zip(route.prefixes, route.bookends, route.requests):
            header = idx.read_header(prefix)
            lo, hi = mcore.split_range(bookends, header.sequence_count)
            if hi <= lo and request is not None:
                return "never returns"
            tokens_in_split = idx.range_token_sums(header, [(lo, hi)])[0] if hi > lo else 0
            lengths.append(mcore.build(tokens_in_split, a.seq_length, None).samples_built if hi > lo else 0)
        if route.blended and route.weights is None and min(lengths) <= 0:
            return "empty source"
    return None


def built_by_our_semantics(tokens: list[str], world: int, version: str = "0.16.1") -> dict[str, Any]:
    """Per split: (prefix, epochs, samples built) per GPTDataset and the blend size, from the product path:
    ``megatron_plan.megatron_input`` (the command line as Megatron-LM parses it) and ``make_plan``."""
    mi = megatron_input([*tokens, "--world-size", str(world)], version)
    plan = make_plan(mi.inp)
    sizes = {b.split: b.size for b in plan.blends}
    out: dict[str, Any] = {name: None for name in mlm_splits()}
    for name in mlm_splits():
        rows = [(s.prefix, s.epochs_built, s.samples_built) for s in plan.sources if s.split == name]
        if rows:
            out[name] = {"sources": rows, "blended": name in sizes, "size": sizes.get(name)}
    return out


def mlm_splits() -> tuple[str, str, str]:
    """The split names in Megatron's order."""
    return ("train", "valid", "test")


def compare_built(real: dict[str, Any], ours_built: dict[str, Any]) -> list[str]:
    """Differences between what Megatron-LM's builder built and this project's semantics (per source)."""
    diffs = []
    for name in mlm_splits():
        r, o = real.get(name), ours_built.get(name)
        if (r is None) != (o is None):
            diffs.append(f"{name}: megatron {r} != ours {o}")
            continue
        if r is None:
            continue
        datasets = r["datasets"] if r["type"] == "BlendedDataset" else [r]
        got = [(d["dataset_path"], d["epochs"], d["len"]) for d in datasets]
        if got != o["sources"]:
            diffs.append(f"{name}: megatron built {got} != ours {o['sources']}")
        size = r.get("size") if r.get("size") is not None else r["len"]  # size None: the whole (full validation)
        if r["type"] == "BlendedDataset" and o["size"] is not None and size != o["size"]:
            diffs.append(f"{name}: blend size megatron {size} != ours {o['size']}")
    return diffs


CORPUS_REFUSALS = {
    "builder would never return": "never returns",
    "Timeout": "never returns",
    "AssertionError": "empty source",
}


def mcore_version() -> str:
    """The megatron-core version whose dataset semantics apply (the tree's: 0.16.1)."""
    return megatron_lm_version()


def compare(
    truth: dict[str, Any], mine: dict[str, Any], tokens: list[str], world: int, version: str = "0.16.1"
) -> list[str]:
    """Differences between Megatron-LM's record and ours (empty: equal)."""
    diffs = []
    real = truth["refusal"]
    # the training loop's checks come after the builder: a corpus the builder refuses hides them from the truth
    after = mine["refusal"] is not None and mine["refusal"]["stage"] == "train"
    if (
        real is not None
        and real["stage"] == "builder"
        and real["error"] in CORPUS_REFUSALS
        and (mine["refusal"] is None or after)
    ):
        kind = corpus_refusal(tokens, world, version, mine.get("num_samples"))
        if kind != CORPUS_REFUSALS[real["error"]]:
            diffs.append(f"builder: megatron {real} but this project's semantics say {kind}")
        real = None if mine["refusal"] is None else mine["refusal"]  # the numbers before it must still agree
    if real != mine["refusal"]:
        diffs.append(f"refusal: megatron {real} != ours {mine['refusal']}")
    for key in ("data_parallel_size", "global_batch_size", "train_iters", "num_samples", "scheduler", "train_consumed"):
        if key in truth and truth[key] != mine.get(key):
            diffs.append(f"{key}: megatron {truth[key]} != ours {mine.get(key)}")
    return diffs


@pytest.fixture(scope="module")
def megatron_lm() -> str:
    """The Megatron-LM tree (tests/helpers/frameworks.py; the test skips with the reason when it cannot be had, which
    fails under CI=true)."""
    import megatron_lm_env as env

    return env.megatron_lm_dir()


def corpora_for(tmp_path: Any) -> list[str]:
    """Three small random corpora (700, 500 and 400 documents)."""
    corpora = []
    for j, docs in enumerate((700, 500, 400)):
        prefix = str(tmp_path / f"corpus{j}")
        write_random_corpus(prefix, 100 + j, docs, 1, 300)
        corpora.append(prefix)
    return corpora


def compare_all(
    cases: list[dict[str, Any]], truth: dict[str, Any], version: str, tmp_path: Any
) -> tuple[list[str], int]:
    """Each case against Megatron-LM's record (numbers, refusals, and what the builder built): the failures and
    how many cases were built and compared dataset by dataset; the report is written to MEGATRON_LM_REPORT."""
    report, failures = [], []
    built = 0
    for case, real in zip(cases, truth["cases"], strict=True):
        argv_ = case.get("ours_argv", case["argv"])  # the line as the user gives it (with ModelOpt flags)
        mine = ours(argv_, case["world_size"], version)
        diffs = compare(real, mine, argv_, case["world_size"], version)
        if not diffs and isinstance(real.get("splits"), dict) and mine["refusal"] is None:
            built += 1
            diffs = compare_built(real["splits"], built_by_our_semantics(case["argv"], case["world_size"], version))
        report.append(
            {
                "id": case["id"],
                "megatron": real.get("refusal") or real.get("num_samples"),
                "ours": mine.get("refusal") or mine.get("num_samples"),
                "equal": not diffs,
            }
        )
        if diffs:
            failures.append(f"{case['id']}: {'; '.join(diffs)}")
    with open(os.environ.get("MEGATRON_LM_REPORT", str(tmp_path / "report.json")), "w") as f:
        json.dump({"cases": report, "truth": truth}, f, indent=1)
    return failures, built


def truth_and_comparison(
    cases: list[dict[str, Any]], tmp_path: Any, version: str, timeout: float = 120.0
) -> tuple[dict[str, Any], int]:
    """Run the cases through Megatron-LM ``version``'s own code (tests/helpers/megatron_lm_truth.py), require that
    version
    and no difference from the plan; (the truth, how many cases the builder built)."""
    import megatron_lm_env as env

    for case in cases:
        case["cache_dir"] = str(tmp_path)
    truth = env.run_truth(cases, str(tmp_path / "work"), timeout=timeout)
    assert truth["megatron_lm_version"] == version == megatron_lm_version(version)
    failures, built = compare_all(cases, truth, version, tmp_path)
    assert not failures, "\n".join(failures)
    return truth, built


@pytest.mark.megatron_lm
@frameworks.needs_stack("neox")
def test_examples_and_random_command_lines_equal_megatron_lm(megatron_lm: str, tmp_path: Any) -> None:

    corpora = corpora_for(tmp_path)
    cases = []
    for script in EXAMPLES:
        tokens = example_argv(megatron_lm, script, corpora[0], str(tmp_path / script.split("/")[0]))
        for world in EXAMPLE_WORLDS[script.split("/")[0]]:
            # the examples' run lengths ask ~1e8 samples: compare everything up to the builder, and let
            # the builder's empty-split check run (building that many samples here is not the point)
            cases.append({"id": f"{script}@{world}", "argv": tokens, "world_size": world, "build": False})
    rng = random.Random(20261123)
    for i in range(24):
        tokens, world = random_argv(rng, corpora, str(tmp_path), i)
        cases.append({"id": f"random-{i}", "argv": tokens, "world_size": world, "build": True})
    truth, built = truth_and_comparison(cases, tmp_path, "0.16.1")
    refused = sum(1 for r in truth["cases"] if r["refusal"])
    assert 0 < refused < len(cases) and built >= 8  # refusals and real builds were both exercised


#: core_v0.19.0's examples that run pretrain_gpt.py (or pretrain_hybrid.py, same flags and data path): positional
#: arguments (DATA and TOKENIZER filled in), world sizes, and flags appended (the last one wins)
EXAMPLES_019: dict[str, tuple[list[str], tuple[int, ...], list[str]]] = {
    "gpt3/train_gpt3_175b_distributed.sh": (["ckpt", "tb", "vocab.json", "merges.txt", "DATA"], (8, 128, 256), []),
    "llama/train_llama3_8b_h100_fp8.sh": (["ckpt/x", "tb/x", "TOKENIZER", "DATA"], (8, 16, 64), []),
    "mixtral/train_mixtral_8x7b_distributed.sh": (["ckpt", "TOKENIZER", "DATA"], (8, 16, 64), []),
    "mamba/train.sh": (["DATA", "TOKENIZER"], (8, 16, 64), []),
    # PP is the world size in the script: 12 layers split over 4 stages instead, so 8/64/256 GPUs are valid
    "gptoss/02_train.sh": (
        ["--checkpoint-path", "ckpt", "--tokenizer", "TOKENIZER", "--data", "DATA"],
        (8, 64, 256),
        ["--pipeline-model-parallel-size", "4"],
    ),
}


def random_argv_019(rng: random.Random, corpora: list[str], workdir: str, i: int) -> tuple[list[str], int]:
    """A randomized command line with 0.19.2's new flags: a step batch-size schedule (thresholds in tokens, with
    K suffixes; sometimes not a multiple of micro x dp, shrinking, not starting at 0, or given with
    --global-batch-size), evaluation batches, --start-eval-at-iter, --tensor-parallel-num-weight-shards."""
    tokens, world = random_argv(rng, corpora, workdir, i)
    value = {t: tokens[k + 1] for k, t in enumerate(tokens[:-1]) if t.startswith("--")}
    micro, seq, tp = (
        int(value["--micro-batch-size"]),
        int(value["--seq-length"]),
        int(value["--tensor-model-parallel-size"]),
    )
    dp = max(1, world // (tp * int(value["--pipeline-model-parallel-size"]) * int(value["--context-parallel-size"])))
    if rng.random() < 0.5:
        if rng.random() < 0.85:
            tokens = _without_flag(tokens, "--global-batch-size", 1)
        unit = micro * dp
        sizes = sorted(rng.sample(range(1, 6), 3)) if rng.random() < 0.85 else [3, 1, 2]  # [3, 1, 2]: shrinks
        first = 0 if rng.random() < 0.9 else seq * 4
        cuts = sorted(rng.sample(range(1, 400), 2))
        steps = [f"{first}:{unit * sizes[0]}"] + [
            f"{c * seq / 1000 + rng.choice([0, 0.0005])}K:{unit * z}" for c, z in zip(cuts, sizes[1:])
        ]
        if rng.random() < 0.1:
            steps[-1] = steps[-1].split(":")[0] + f":{unit * sizes[-1] + 1}"  # not a multiple of micro x dp
        tokens += ["--step-batch-size-schedule", ",".join(steps) if rng.random() < 0.3 else " ".join(steps)]
    if rng.random() < 0.3:
        eval_micro = rng.choice([1, 2])
        tokens += [
            "--eval-micro-batch-size",
            str(eval_micro),
            "--eval-global-batch-size",
            str(eval_micro * dp * rng.choice([1, 2]) + (1 if rng.random() < 0.1 else 0)),
        ]
    if rng.random() < 0.35 and "--eval-interval" in value:
        interval = int(value["--eval-interval"])
        tokens += ["--start-eval-at-iter", str(rng.choice([0, interval, 2 * interval, interval + 3, 7, 500]))]
    if rng.random() < 0.1:
        tokens += ["--tensor-parallel-num-weight-shards", str(tp * rng.choice([1, 2, 3]))]
    return tokens, world


def example_variants(script: str, tokens: list[str]) -> dict[str, list[str]]:
    """An example's command line as its script passes it, and as a user would repair it: gpt3's step schedule
    reaches pretrain_gpt.py split into words (the script expands its array unquoted: parse_args exits), so also
    quoted (then refused: given with --global-batch-size) and quoted without --global-batch-size; gptoss passes
    ModelOpt options pretrain_gpt.py adds only when nvidia-modelopt is installed (it is not here: parse_args
    exits), so Megatron-LM gets its line without them and neox-epoch the line as given (they do not change the
    data: tests/formats/test_modelopt_flags.py)."""
    out = {script: tokens}
    if "--step-batch-size-schedule" in tokens:
        k = tokens.index("--step-batch-size-schedule") + 1
        end = next((j for j in range(k, len(tokens)) if tokens[j].startswith("--")), len(tokens))
        quoted = [*tokens[:k], " ".join(tokens[k:end]), *tokens[end:]]
        out[f"{script} schedule quoted"] = quoted
        out[f"{script} schedule quoted, without --global-batch-size"] = _without_flag(quoted, "--global-batch-size", 1)
    modelopt = [f for f in MODELOPT_FLAGS if f in tokens]
    if modelopt:
        for flag in modelopt:
            tokens = _without_flag(tokens, flag, 0)
        out[script] = tokens
    return out


#: ModelOpt options (megatron/post_training/arguments.py: add_modelopt_args, which core_v0.19.0's pretrain_gpt.py
#: passes to parse_args only when nvidia-modelopt imports) that examples/gptoss gives
MODELOPT_FLAGS = ("--export-force-local-attention", "--enable-gpt-oss")


def _without_flag(tokens: list[str], flag: str, nargs: int) -> list[str]:
    """``tokens`` without ``flag`` and its ``nargs`` values."""
    out, skip = [], 0
    for tok in tokens:
        if skip:
            skip -= 1
        elif tok == flag:
            skip = nargs
        else:
            out.append(tok)
    return out


@pytest.mark.megatron_lm
@frameworks.needs_stack("today")
def test_0_19_examples_and_random_command_lines_equal_megatron_lm_0_19_2(tmp_path: Any) -> None:
    """core_v0.19.0's example command lines (gpt3: refused, it gives --global-batch-size with
    --step-batch-size-schedule; and without --global-batch-size: the step schedule under --train-iters) and
    randomized ones with 0.19's flags, against Megatron-LM 0.19.2's own code (the megatron-core 0.19.2 wheel's
    megatron/training, core_v0.19.0's pretrain_gpt.py): the same train_iters, global batch, samples per split and
    consumed, LR lengths, refusals, and what the builder builds."""
    import megatron_lm_env as env

    tree = env.megatron_lm_dir()
    corpora = corpora_for(tmp_path)
    cases = []
    for script, (positional, worlds, extra) in EXAMPLES_019.items():
        name = script.split("/")[0]
        tokens = example_argv(tree, script, corpora[0], str(tmp_path / name), positional) + extra
        for label, argv_ in example_variants(script, tokens).items():
            mine = tokens if label == script else argv_  # gptoss: ours reads its ModelOpt flags
            cases += [
                {"id": f"{label}@{w}", "argv": argv_, "ours_argv": mine, "world_size": w, "build": False}
                for w in worlds
            ]
    rng = random.Random(20261126)
    for i in range(40):
        tokens, world = random_argv_019(rng, corpora, str(tmp_path), i)
        cases.append({"id": f"random-{i}", "argv": tokens, "world_size": world, "build": True})
    truth, built = truth_and_comparison(cases, tmp_path, "0.19.2", timeout=300)
    by_id = {c["id"]: r for c, r in zip(cases, truth["cases"])}
    gpt3 = "gpt3/train_gpt3_175b_distributed.sh"
    assert by_id[f"{gpt3}@128"]["refusal"] == {"stage": "parse_args", "error": "SystemExit", "message": "2"}
    assert by_id[f"{gpt3} schedule quoted@128"]["refusal"] == {
        "stage": "validate_args",
        "error": "ValueError",
        "message": "Cannot specify both --step-batch-size-schedule and --global-batch-size",
    }
    assert by_id[f"{gpt3} schedule quoted, without --global-batch-size@256"]["refusal"] is None
    stepped = [c for c in cases if "--step-batch-size-schedule" in c["argv"] and not by_id[c["id"]]["refusal"]]
    refused = sum(1 for r in truth["cases"] if r["refusal"])
    assert len(stepped) >= 8 and 0 < refused < len(cases) and built >= 8


# ------------------------------------------------------------------------ resume-check on Megatron-LM checkpoints

RESUME_BASE = [
    "--seq-length",
    "128",
    "--micro-batch-size",
    "2",
    "--split",
    "98,1,1",
    "--eval-interval",
    "1000",
    "--eval-iters",
    "1",
    "--train-iters",
    "200",
]


def _train_epochs(real: dict[str, Any]) -> list[int]:
    """The epochs the real builder gave each source of the train blend."""
    return [d["epochs"] for d in real["splits"]["train"]["datasets"]]


@pytest.mark.megatron_lm
@frameworks.needs_stack("neox")
@pytest.mark.parametrize("change", ["batch", "smaller", "blend", "none"])
def test_resume_check_on_a_megatron_lm_checkpoint(megatron_lm: str, tmp_path: Any, change: str) -> None:
    """A checkpoint at iteration 50 of global batch 8 (its args made and saved by Megatron-LM's own
    parse_args/validate_args/scheduler, tests/helpers/megatron_lm_checkpoint.py), resumed with the global batch doubled
    or
    the blend 0.7/0.3 made 0.5/0.5. Megatron-LM's sampler starts at consumed_train_samples = 400 whatever the
    batch; resume-check names as orders-change exactly the sources whose train index the real builder gives
    another number of epochs for the new command line, and lr-schedule exactly when the real scheduler's steps
    differ (OptimizerParamScheduler would refuse the checkpoint)."""
    import megatron_lm_env as env

    corpora = []
    for j, docs in enumerate((700, 300)):
        corpora.append(str(tmp_path / f"src{j}"))
        write_random_corpus(corpora[-1], 40 + j, docs, 1, 300)
    old = [*MODEL, *RESUME_BASE, "--global-batch-size", "8", "--data-path", "0.7", corpora[0], "0.3", corpora[1]]
    new = list(old)
    if change in ("batch", "smaller"):
        new[new.index("--global-batch-size") + 1] = "16" if change == "batch" else "4"
    elif change == "blend":
        new[new.index("0.7")], new[new.index("0.3")] = "0.5", "0.5"
    save = str(tmp_path / "ckpt")
    script = os.path.join(HELPERS, "megatron_lm_checkpoint.py")
    made = subprocess.run(
        [sys.executable, script, save, "50", "2", *old],
        env=frameworks.megatron_lm_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0, made.stderr[-3000:]
    cases = [
        {"id": name, "argv": argv_, "world_size": 2, "build": True, "cache_dir": str(tmp_path)}
        for name, argv_ in (("old", old), ("new", new))
    ]
    real_old, real_new = env.run_truth(cases, str(tmp_path / "work"))["cases"]
    r = subprocess.run(
        [sys.executable, "-m", "neox_epoch.cli", "resume-check", save, *new, "--world-size", "2", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode in (0, 1), r.stderr
    out = json.loads(r.stdout)
    assert (out["resumed_by"], out["consumed_samples"], out["start_sample"]) == ("Megatron-LM", 400, 400)
    assert out["skipped"] is None and out["repeated"] is None
    kinds = [f.split(":")[0] for f in out["findings"]]
    reordered = [
        f"train_{k}" for k, (a, b) in enumerate(zip(_train_epochs(real_old), _train_epochs(real_new))) if a != b
    ]
    assert [f.split(":")[1].strip() for f in out["findings"] if f.startswith("orders-change")] == reordered
    assert ("lr-schedule" in kinds) == (real_old["scheduler"] != real_new["scheduler"])
    assert [s["order_changed"] for s in out["sources"]] == [f"train_{k}" in reordered for k in range(2)]
    if change == "blend":
        # why: megatron-core's greedy draws 280/120 of the first 400 at 0.7/0.3 and 200/200 at 0.5/0.5, so the
        # resumed run starts 80 samples earlier in src0 (drawn again) and 80 further in src1 (never drawn)
        assert kinds[0] == "blend-changed"
        moves = {s["name"]: (s["skipped_samples"], s["repeated_samples"]) for s in out["sources"]}
        expected = {"src0": (0, 80), "src1": (80, 0)}
        assert moves == {n: (None, None) if f"train_{k}" in reordered else expected[n] for k, n in enumerate(moves)}
    elif change == "batch":
        assert "blend-changed" not in kinds and out["new_train_batch_size"] == 16
        assert [s["drawn_after_resume"] for s in out["sources"]] == [
            a - b for a, b in zip(mcore_greedy([0.7, 0.3], 400 + 150 * 16), mcore_greedy([0.7, 0.3], 400))
        ]
    elif change == "smaller":
        # why: the new run asks 200 x 4 = 800 train samples; 400 are consumed and 150 iterations of 4 need 600 more
        assert real_new["splits"]["train"]["len"] == 800
        assert (
            "runs-out: 150 iterations of 4 from sample 400 need 1000 samples and the new train dataset has 800"
            in out["findings"][kinds.index("runs-out")]
        )
    else:  # the same command line: the real builder gives the same epochs, so the resume continues exactly
        assert r.returncode == 0 and out["findings"] == [] and out["clean"]


@pytest.mark.megatron_lm
@frameworks.needs_stack("today")
def test_exact_step_schedule_flags_on_megatron_lm_0_19_2(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """Exact mode with a step schedule: the flags printed (--train-samples = the schedule's first batches that fit
    in one pass over each source, the verified weights), pasted after the command line, make Megatron-LM 0.19.2's
    own update_train_iters stop exactly there (train_consumed == the train request) and its own builder's blend
    draw exactly the targets."""
    import megatron_lm_env as env

    from neox_epoch import cli

    web, code = str(tmp_path / "web"), str(tmp_path / "code")
    write_random_corpus(web, 1, 900, 20, 700)
    write_random_corpus(code, 2, 500, 20, 700)
    tokens = [
        *MODEL,
        "--data-path",
        "0.7",
        web,
        "0.3",
        code,
        "--split",
        "98,1,1",
        "--seq-length",
        "256",
        "--micro-batch-size",
        "2",
        "--eval-interval",
        "50",
        "--eval-iters",
        "2",
        "--train-samples",
        "500",
        "--lr-warmup-samples",
        "50",
        "--step-batch-size-schedule",
        "0:16 80K:32 300K:64",
    ]
    assert (
        cli.main(
            [
                "plan",
                "--epochs",
                "1",
                "--framework-version",
                "0.19.2",
                "--force-version",
                *tokens,
                "--world-size",
                "8",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    settings = out["settings"]
    pasted = [*tokens, *settings["megatron_flags"].split()]
    real = env.run_truth(
        [{"id": "exact", "argv": pasted, "world_size": 8, "build": True, "cache_dir": str(tmp_path)}],
        str(tmp_path / "work"),
    )["cases"][0]
    assert real["refusal"] is None
    assert (real["train_iters"], real["train_consumed"], real["num_samples"][0]) == (
        out["train_iters"],
        settings["train_samples"],
        settings["train_samples"],
    )
    assert real["splits"]["train"]["draws"] == list(settings["targets"].values())
    assert out["consumed_samples"]["valid"] == real["num_samples"][1]


@pytest.mark.megatron_lm
@frameworks.needs_stack("today")
@pytest.mark.parametrize("batch", ["8", "16"])
def test_resume_check_override_ckpt_iteration_0_19(tmp_path: Any, batch: str) -> None:
    """A checkpoint at iteration 50 of global batch 8 whose args Megatron-LM 0.19.2's own parse_args/validate_args
    made (tests/helpers/megatron_lm_checkpoint.py: consumed_valid_samples = 4 evaluations (iterations 20, 30, 40 and 50,
    from --start-eval-at-iter 20) x eval_iters 1 x eval batch 16 = 64), resumed with
    --override-ckpt-iteration 30: load_checkpoint (megatron/training/checkpointing.py) restarts at iteration 30 with
    consumed = 30 x 8 = 240; with --global-batch-size 16 it raises RuntimeError (a finding)."""
    corpora = []
    for j, docs in enumerate((700, 300)):
        corpora.append(str(tmp_path / f"src{j}"))
        write_random_corpus(corpora[-1], 40 + j, docs, 1, 300)
    base = [
        *MODEL,
        *RESUME_BASE,
        "--eval-interval",
        "10",
        "--start-eval-at-iter",
        "20",
        "--eval-global-batch-size",
        "16",
        "--data-path",
        "0.7",
        corpora[0],
        "0.3",
        corpora[1],
    ]
    old = [*base, "--global-batch-size", "8"]
    save = str(tmp_path / "ckpt")
    script = os.path.join(HELPERS, "megatron_lm_checkpoint.py")
    made = subprocess.run(
        [sys.executable, script, save, "50", "2", *old],
        env=frameworks.megatron_lm_today_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0, made.stderr[-3000:]
    new = [*base, "--global-batch-size", batch, "--override-ckpt-iteration", "30"]
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "neox_epoch.cli",
            "resume-check",
            save,
            *new,
            "--world-size",
            "2",
            "--framework-version",
            "0.19.2",
            "--force-version",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode in (0, 1), r.stderr
    out = json.loads(r.stdout)
    kinds = [f.split(":")[0] for f in out["findings"]]
    assert f"override_ckpt_iteration * global_batch_size = 30 * {batch} = {30 * int(batch)}" in out["consumed_how"]
    assert (out["consumed_samples"], out["start_sample"]) == (30 * int(batch), 30 * int(batch))
    assert ("override-refused" in kinds) == (batch == "16")
    assert out["valid"]["drawn"] == 64 and out["valid"]["start_sample"] == 64


def mcore_greedy(weights: list[float], n: int) -> list[int]:
    """megatron-core's blend draws among its first ``n`` samples (its greedy over the float64-normalized weights)."""
    from neox_epoch.semantics import blend

    return blend.greedy_counts(blend.normalize(weights), n)


# ------------------------------------------------------------------ resume-check on random Megatron-LM resumes


def random_resume(rng: random.Random, corpora: list[str]) -> dict[str, Any]:
    """A saved run's command line and world, the iteration it stopped at, and the resumed run's command line and
    world with 0-3 changes among the global batch, train_iters, the blend, seq_length, the world size and the
    scheduler override."""
    micro, world, seq, iters = rng.choice([1, 2]), rng.choice([1, 2, 4]), rng.choice([64, 128]), rng.randint(40, 200)
    gbs = micro * world * rng.choice([1, 2, 3])
    sources = rng.sample(corpora, rng.choice([1, 2, 3]))
    weights = [round(rng.uniform(0.1, 1.0), 2) for _ in sources]
    split = rng.choice(["98,1,1", "90,5,5"])

    iteration = rng.randint(1, iters - 1)
    # evaluation from its own generator (the pairs' other draws stay as they were): often several before the save
    evaluation = random.Random(iters * 7919 + iteration)
    interval, eval_iters = evaluation.choice([7, 20, 1000]), evaluation.choice([1, 2])

    def argv(gbs: int, iters: int, seq: int, weights: list[float]) -> list[str]:
        data = sources if len(sources) == 1 else [x for w, c in zip(weights, sources) for x in (str(w), c)]
        return [
            *MODEL,
            "--micro-batch-size",
            str(micro),
            "--eval-interval",
            str(interval),
            "--eval-iters",
            str(eval_iters),
            "--split",
            split,
            "--seq-length",
            str(seq),
            "--global-batch-size",
            str(gbs),
            "--train-iters",
            str(iters),
            "--data-path",
            *data,
        ]

    old = argv(gbs, iters, seq, weights)
    # seq_length rarer: after it positions name other token spans, so fewer numbers are comparable
    kinds = ["batch", "batch", "iters", "seq", "world", "override"] + (["blend"] * 3 if len(sources) > 1 else [])
    changes = sorted(set(rng.sample(kinds, rng.choice([0, 1, 1, 2, 3]))))
    new_world = rng.choice([w for w in (1, 2, 4) if w != world]) if "world" in changes else world
    new_gbs = micro * new_world * rng.choice([1, 2, 3, 4]) if {"batch", "world"} & set(changes) else gbs
    if new_gbs % (micro * new_world):
        new_gbs = micro * new_world
    new = argv(
        new_gbs,
        rng.randint(iteration + 1, 2 * iters) if "iters" in changes else iters,
        rng.choice([s for s in (64, 128, 256) if s != seq]) if "seq" in changes else seq,
        [round(rng.uniform(0.1, 1.0), 2) for _ in sources] if "blend" in changes else weights,
    )
    new += ["--override-opt_param-scheduler"] if "override" in changes else []
    return {
        "old": old,
        "world": world,
        "iteration": iteration,
        "consumed": iteration * gbs,
        "new": new,
        "new_world": new_world,
        "changes": changes,
        "valid_consumed": iteration // interval * eval_iters * gbs,
        "eval": (interval, eval_iters),
        "micro": micro,
    }


def halved_batch_resume(corpora: list[str]) -> dict[str, Any]:
    """A pair where the validation loader runs out: global batch 8 for 4 evaluations (every 7 iterations to 30:
    32 validation samples drawn), resumed with 4: the new validation blend has (60 // 7 + 1) x 4 = 36 samples (a
    blend is the size asked; one dataset alone would be all the samples of its epochs), the 5 evaluations left
    need 20 from sample 32."""

    def command(gbs: int) -> list[str]:
        return [
            *MODEL,
            "--micro-batch-size",
            "2",
            "--eval-interval",
            "7",
            "--eval-iters",
            "1",
            "--split",
            "90,5,5",
            "--seq-length",
            "64",
            "--global-batch-size",
            str(gbs),
            "--train-iters",
            "60",
            "--data-path",
            "0.5",
            corpora[0],
            "0.5",
            corpora[1],
        ]

    return {
        "old": command(8),
        "world": 2,
        "iteration": 30,
        "consumed": 240,
        "new": command(4),
        "new_world": 2,
        "changes": ["batch"],
        "valid_consumed": 30 // 7 * 8,
        "eval": (7, 1),
        "micro": 2,
    }


def exposure_diffs(out: dict[str, Any], real_old: dict[str, Any], real_new: dict[str, Any]) -> list[str]:
    """resume-check --exposure's resumed histogram per source against the tokens real Megatron-LM trains: the saved
    build's samples before the resume plus the new build's the resumed sampler feeds, walked through both real
    GPTDatasets' arrays token by token (seq_length changes included)."""
    diffs = []
    for k, source in enumerate(out["sources"]):
        got = (out["exposure"] or {}).get(source["name"])
        trained = np.load(real_old["resume"]["tokens_before"][k]) + np.load(real_new["resume"]["tokens_after"][k])
        want = {str(t): int(n) for t, n in enumerate(np.bincount(trained)) if n}
        if got is None or got["resumed"] is None or got["resumed"]["tokens"] != want:
            diffs.append(
                f"{source['name']}: exposure {got and got['resumed'] and got['resumed']['tokens']} vs "
                f"the tokens trained {want}"
            )
    return diffs


def valid_diffs(pair: dict[str, Any], out: dict[str, Any], real_new: dict[str, Any], kinds: list[str]) -> list[str]:
    """resume-check's validation loader against real Megatron-LM's: the sampler's start, its refusal, and whether it
    yields the micro batches of the evaluations until the end (every eval_interval iterations and one after the
    last, training.py's loop; eval_iters x global_batch_size samples each)."""
    real = real_new.get("resume_valid")
    if real is None:
        return [] if out["valid"] is None else [f"valid {out['valid']} where Megatron-LM builds no validation loader"]
    interval, eval_iters = pair["eval"]
    evaluations = real_new["train_iters"] // interval - pair["iteration"] // interval + 1
    needed = (
        evaluations * eval_iters * real_new["global_batch_size"] // (pair["micro"] * real_new["data_parallel_size"])
    )
    diffs = []
    if out["valid"] is None or out["valid"]["start_sample"] != real["start"]:
        diffs.append(f"valid start {out['valid'] and out['valid']['start_sample']} vs Megatron-LM's {real['start']}")
    if ("valid-no-samples-left" in kinds) != (real["refusal"] is not None):
        diffs.append(f"valid-no-samples-left {'valid-no-samples-left' in kinds} vs the sampler's {real['refusal']}")
    runs_out = real["refusal"] is None and real["batches"] < needed
    if ("valid-runs-out" in kinds) != runs_out:
        diffs.append(f"valid-runs-out {'valid-runs-out' in kinds} vs {real['batches']} batches for {needed} needed")
    sources, index = (out["valid"] or {}).get("sources") or [], real.get("index")
    if real["refusal"] is None and index is not None and "--full-validation" not in pair["new"]:
        # per source: the real validation blend's samples among the saved run's draws and the resumed sampler's
        take = min(needed, real["batches"]) * pair["micro"] * real_new["data_parallel_size"]
        drawn = out["valid"]["drawn"]
        want = [
            np.bincount(index[a:b], minlength=len(sources) or 1).tolist()
            for a, b in ((0, drawn), (real["start"], real["start"] + take))
        ]
        got = [[v["drawn_before"] for v in sources], [v["resumed"] for v in sources]]
        if got != want:
            diffs.append(f"valid per source (drawn before, resumed) {got} vs the real blend's {want}")
    return diffs


def expected_resume(pair: dict[str, Any], real_old: dict[str, Any], real_new: dict[str, Any]) -> dict[str, Any]:
    """What real Megatron-LM does at the resume, from its own builds and sampler
    (tests/helpers/megatron_lm_truth.py)."""
    old_train, new_train = real_old["splits"]["train"], real_new["splits"]["train"]
    old_parts = old_train["datasets"] if old_train["type"] == "BlendedDataset" else [old_train]
    new_parts = new_train["datasets"] if new_train["type"] == "BlendedDataset" else [new_train]
    resumed = real_new["resume"]
    return {
        "orders": [k for k, (a, b) in enumerate(zip(old_parts, new_parts)) if a["order"] != b["order"]],
        "blend": old_train.get("weights") is not None
        and any(abs(a - b) > 1e-12 for a, b in zip(old_train["weights"], new_train["weights"])),
        # skipped: the new order's items the saved run never reached; repeated: the saved run's items the resumed
        # run draws again, at most what it draws (its items b .. b + after - 1 against the saved run's 0 .. a - 1)
        "moves": [
            (max(0, b - a), max(0, min(a, b + n) - b))
            for a, b, n in zip(real_old["resume"]["before"], resumed["before"], resumed["after"])
        ],
        "no_samples_left": resumed["refusal"] is not None,
        "runs_out": resumed["refusal"] is None and resumed["iterations"] < real_new["train_iters"] - pair["iteration"],
        "after": resumed["after"],
        "lr": real_old["scheduler"] != real_new["scheduler"] and "--override-opt_param-scheduler" not in pair["new"],
    }


@pytest.mark.megatron_lm
@frameworks.needs_stack("neox")
def test_resume_check_on_random_megatron_lm_resumes(
    megatron_lm: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """16 random resumes (a checkpoint's args saved by Megatron-LM's own code at a random iteration, resumed with
    random changes of batch, train_iters, blend, seq_length, world size or scheduler override) and one halved
    batch whose validation loader runs out. Each finding
    of resume-check equals what real Megatron-LM does, replayed by brute force from both real builds and its
    own pretraining sampler: orders-change exactly for the sources whose index arrays differ, blend-changed
    exactly when the built weights differ, each source's skip/repeat from both blends' dataset_index at the
    consumed samples, no-samples-left when the sampler asserts, runs-out when it feeds fewer iterations than
    train_iters asks, the draws after the resume from the sampler's positions, lr-schedule when the real
    scheduler differs; seq-length-changed exactly when seq_length changes (then positions name other spans); the
    validation loader's start, valid-no-samples-left and valid-runs-out as its real sampler gives them."""
    import megatron_lm_env as env

    corpora = []
    for j, docs in enumerate((700, 400, 250)):
        corpora.append(str(tmp_path / f"src{j}"))
        write_random_corpus(corpora[-1], 70 + j, docs, 1, 300)
    rng = random.Random(20261124)
    pairs = [random_resume(rng, corpora) for _ in range(16)] + [halved_batch_resume(corpora)]
    cases = []
    script = os.path.join(HELPERS, "megatron_lm_checkpoint.py")
    jobs = tmp_path / "checkpoints.json"  # (every checkpoint made by one process: Megatron-LM imported once)
    jobs.write_text(
        json.dumps([[str(tmp_path / f"ckpt{i}"), p["iteration"], p["world"], *p["old"]] for i, p in enumerate(pairs)])
    )
    made = subprocess.run(
        [sys.executable, script, "--jobs", str(jobs)],
        env=frameworks.megatron_lm_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert made.returncode == 0, made.stderr[-3000:]
    assert made.stdout.count("saved iteration") == len(pairs), made.stdout
    for i, pair in enumerate(pairs):
        pair["save"] = str(tmp_path / f"ckpt{i}")
        for name, argv_, world in (("old", pair["old"], pair["world"]), ("new", pair["new"], pair["new_world"])):
            cases.append(
                {
                    "id": f"{i}-{name}",
                    "argv": argv_,
                    "world_size": world,
                    "build": True,
                    "cache_dir": str(tmp_path),
                    "resume_at": pair["consumed"],
                    "resume_iteration": pair["iteration"],
                    "resume_valid_at": pair["valid_consumed"],
                    "tokens": True,
                }
            )
    truth = env.run_truth(cases, str(tmp_path / "work"))["cases"]
    failures, seen, compared, valid_seen = [], set(), set(), set()
    exposed: tuple[dict[str, Any], dict[str, Any]] | None = None
    for i, pair in enumerate(pairs):
        real_old, real_new = truth[2 * i], truth[2 * i + 1]
        assert real_old["refusal"] is None and real_new["refusal"] is None, (real_old["refusal"], real_new["refusal"])
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "neox_epoch.cli",
                "resume-check",
                pair["save"],
                *pair["new"],
                "--world-size",
                str(pair["new_world"]),
                "--json",
                "--exposure",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode in (0, 1), r.stderr
        out, want = json.loads(r.stdout), expected_resume(pair, real_old, real_new)
        kinds = [f.split(":")[0] for f in out["findings"]]
        seen.update(kinds)
        got = {
            "blend": "blend-changed" in kinds,
            "no_samples_left": "no-samples-left" in kinds,
            "runs_out": "runs-out" in kinds,
            "lr": "lr-schedule" in kinds,
            "seq": "seq-length-changed" in kinds,
        }
        diffs = [
            f"{k}: {got[k]} vs Megatron-LM {want[k]}"
            for k in ("blend", "no_samples_left", "runs_out", "lr")
            if got[k] != want[k]
        ]
        if got["seq"] != ("seq" in pair["changes"]):
            diffs.append(f"seq-length-changed: {got['seq']} for changes {pair['changes']}")
        if "seq" not in pair["changes"] and not want["no_samples_left"]:  # the same token spans, a resume that runs
            orders = [k for k, s in enumerate(out["sources"]) if s["order_changed"]]
            if orders != want["orders"]:
                diffs.append(f"orders-change {orders} vs index arrays differing {want['orders']}")
            moves = [(s["skipped_samples"], s["repeated_samples"]) for s in out["sources"]]
            compared |= {"orders"} if orders else set()
            compared |= {"moves"} if any(a or b for k, (a, b) in enumerate(want["moves"]) if k not in orders) else set()
            if [m for k, m in enumerate(moves) if k not in orders] != [
                m for k, m in enumerate(want["moves"]) if k not in orders
            ]:
                diffs.append(f"skip/repeat {moves} vs {want['moves']}")
        if not want["runs_out"] and not want["no_samples_left"]:
            drawn = [s["drawn_after_resume"] for s in out["sources"]]
            if drawn != want["after"]:
                diffs.append(f"drawn after the resume {drawn} vs the sampler's {want['after']}")
            diffs += exposure_diffs(out, real_old, real_new)
            compared.add("tokens")
            exposed = exposed or (pair, out)
        diffs += valid_diffs(pair, out, real_new, kinds)
        valid_seen.update(k for k in kinds if k.startswith("valid-"))
        valid_seen |= {"moved"} if out["valid"] and out["valid"]["start_sample"] else set()
        valid_seen |= (
            {"sources"}
            if (real_new.get("resume_valid") or {}).get("index") and out["valid"] and len(out["valid"]["sources"]) > 1
            else set()
        )  # a blend of several validation sources compared
        if (r.returncode == 0) != (not out["findings"]):
            diffs.append(f"exit {r.returncode} with findings {kinds}")
        if diffs:
            failures.append(f"pair {i} {pair['changes']}: " + "; ".join(diffs))
    assert not failures, "\n".join(failures)
    # the random pairs reached the findings that matter (a seed change that stops doing so must be noticed)
    assert {"orders-change", "blend-changed", "seq-length-changed", "lr-schedule"} <= seen, seen
    assert compared == {"orders", "moves", "tokens"}, compared  # orders and moves on the same token spans
    # the validation loader resumed past its start, was refused (random pairs) and ran out (the halved batch)
    assert {"moved", "valid-no-samples-left", "valid-runs-out", "sources"} <= valid_seen, valid_seen
    # sources larger than the window are summed window by window: with windows of 3,000 tokens, the same exposure
    from neox_epoch.cli import main
    from neox_epoch.resume import exposure as resume_exposure

    assert exposed is not None
    pair, out = exposed
    monkeypatch.setattr(resume_exposure, "WINDOW_TOKENS", 3000)
    main(["resume-check", pair["save"], *pair["new"], "--world-size", str(pair["new_world"]), "--json", "--exposure"])
    windowed = json.loads(capsys.readouterr().out)["exposure"]
    for name, got in out["exposure"].items():
        assert (windowed[name]["resumed"], windowed[name]["continued"]) == (got["resumed"], got["continued"]), name
        assert "windows of documents of at most 3000 tokens" in windowed[name]["note"], windowed[name]["note"]
