"""neox_epoch.mcore on the real megatron-core builder, and the end-to-end exact epoch under the real launcher.

* Unit: ``exact_config`` on tiny corpora (weighted blends with whole and fractional passes, one prefix,
  blend_per_split): the real ``BlendedMegatronDatasetBuilder`` given the returned config and sizes draws
  exactly the plan's targets; ``verify_build`` accepts that build and rejects a tampered plan or a build
  with the user's original config; ``install`` logs on rank 0 and verifies inside ``build()``.
* End to end: ``deepspeed --num_gpus 2 examples/mcore_deepspeed_exact_epoch.py`` on CPU (gloo, real
  deepspeed 0.19.8 and megatron-core), once through (with a DeepSpeed config that ``neox-epoch check-batch``
  first rejected, exit 2, and then fixed with ``--fix``), and once stopped mid-epoch at a checkpoint and
  resumed. The report's token counts are checked against numbers computed here from the .idx files alone.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import optional
import pytest

optional.require("megatron.core")

from exposure_util import count_gpt_exposure  # noqa: E402
from mcore_live import init_gloo, null_tokenizer  # noqa: E402

from neox_epoch.demo import write_demo_corpus  # noqa: E402
from neox_epoch.errors import NeoxEpochError, PlanError  # noqa: E402
from neox_epoch.formats import idx  # noqa: E402
from neox_epoch.formats.runlog import JSONL_NAME  # noqa: E402
from neox_epoch.mcore import BuildMismatchError, ExactSetup, exact_config, install, plan_lines, verify_build  # noqa: E402
from neox_epoch.semantics import mcore as mcore_semantics  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "mcore_deepspeed_exact_epoch.py")


# ---------------------------------------------------------------------------------------------------------
# unit: exact_config / verify_build / install on the real builder


def gpt_config(
    prefixes: list[str], weights: list[float] | None, split: str | None, seq: int, cache: str, **extra: Any
) -> Any:
    from megatron.core.datasets.gpt_dataset import GPTDatasetConfig

    kw: dict[str, Any] = dict(
        random_seed=1234,
        sequence_length=seq,
        blend=(prefixes, weights) if split is not None else None,
        split=split,
        path_to_cache=cache,
        tokenizer=null_tokenizer(),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=False,
        **extra,
    )
    return GPTDatasetConfig(**kw)


def build(config: Any, sizes: Any) -> list[Any]:
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset

    init_gloo()
    return BlendedMegatronDatasetBuilder(GPTDataset, list(sizes), lambda: True, config).build()


@pytest.mark.parametrize(
    ("docs", "weights", "epochs", "seq", "gbs"),
    [
        ([150, 90, 60], [0.5, 0.3, 0.2], {"s0": 1, "s1": 2, "s2": 0.5}, 32, 8),
        ([200, 80], [1.0, 1.0], 1, 16, 6),
        ([120], [1.0], 1, 32, 4),  # one prefix WITH a weight: blended path, surplus 0
    ],
)
def test_exact_config_real_builder_draws_the_targets(
    corpus: Any, tmp_path: Path, docs: list[int], weights: list[float], epochs: Any, seq: int, gbs: int
) -> None:
    prefixes = [corpus(f"s{k}", 40 + k, n, 1, 300) for k, n in enumerate(docs)]
    config = gpt_config(prefixes, weights, "90,5,5", seq, str(tmp_path / "cache"))
    setup = exact_config(config, epochs, gbs, eval_interval=10, eval_iters=1)
    assert isinstance(setup, ExactSetup)
    assert setup.config.mid_level_dataset_surplus == 0.0
    assert config.mid_level_dataset_surplus == 0.005, "the user's config is not modified"
    assert setup.train_samples == setup.train_iters * gbs == setup.sizes[0]
    assert setup.sizes[1:] == ((setup.train_iters // 10 + 1) * gbs, gbs)
    targets = [int(s.target_samples or 0) for s in setup.plan.sources if s.split == "train"]
    if len(prefixes) > 1:
        assert setup.config.blend == (prefixes, setup.plan.settings["weights"])
        assert list(setup.plan.settings["targets"].values()) == targets  # type: ignore[attr-defined]
    train, valid, test = build(setup.config, setup.sizes)
    n = setup.train_samples
    got = np.bincount(np.asarray(train.dataset_index[:n]), minlength=len(prefixes)).tolist()
    assert got == targets, "the real builder draws exactly the integer targets"
    for k, ds in enumerate(train.datasets):  # each draw is a distinct sample of the built epochs
        ids = np.asarray(train.dataset_sample_index[:n])[np.asarray(train.dataset_index[:n]) == k]
        assert len(set(ids.tolist())) == len(ids) == targets[k] and int(ids.max()) < len(ds)
    draws = verify_build([train, valid, test], setup)
    assert draws["train"] == targets
    # the whole-pass sources are drawn to their last whole sample, less the reported remainder
    per_epoch = [s.samples_per_epoch for s in setup.plan.sources if s.split == "train"]
    want = epochs if isinstance(epochs, dict) else {f"s{k}": epochs for k in range(len(prefixes))}
    whole = [
        mcore_semantics.build(s.tokens, seq, None).samples_per_epoch for s in setup.plan.sources if s.split == "train"
    ]
    assert whole == per_epoch
    full = [
        (int(w) * s.tokens - 1) // seq if float(w).is_integer() else int(w * pe)
        for w, s, pe in zip(want.values(), [s for s in setup.plan.sources if s.split == "train"], per_epoch)
    ]
    assert sum(full) - sum(targets) == setup.plan.remainder_samples < gbs


def test_one_prefix_without_weight_is_direct_and_exact(corpus: Any, tmp_path: Path) -> None:
    (prefix,) = [corpus("solo", 7, 100, 1, 300)]
    config = gpt_config([prefix], None, "100,0,0", 32, str(tmp_path / "cache"))
    setup = exact_config(config, 1.0, 4)
    assert setup.config.blend == ([prefix], None)
    train, valid, test = build(setup.config, setup.sizes)
    assert valid is None and test is None
    assert not hasattr(train, "dataset_index") and len(train) == setup.plan.sources[0].samples_per_epoch
    assert verify_build([train, valid, test], setup) == {"train": [setup.train_samples]}
    assert setup.train_samples == len(train) - setup.plan.remainder_samples


def test_blend_per_split_train_weights_replaced(corpus: Any, tmp_path: Path) -> None:
    a, b, v = corpus("a", 1, 80, 1, 300), corpus("b", 2, 60, 1, 300), corpus("v", 3, 30, 1, 300)
    config = gpt_config(
        [], None, None, 32, str(tmp_path / "cache"), blend_per_split=[([a, b], [2.0, 1.0]), ([v], None), None]
    )
    setup = exact_config(config, {"a": 1, "b": 1}, 8, eval_interval=5, eval_iters=1)
    assert setup.config.blend_per_split[0] == ([a, b], setup.plan.settings["weights"])
    assert setup.config.blend_per_split[1] == ([v], None)
    datasets = build(setup.config, setup.sizes)
    assert datasets[2] is None
    targets: dict[str, int] = setup.plan.settings["targets"]  # type: ignore[assignment]
    assert verify_build(datasets, setup)["train"] == list(targets.values())


def test_verify_build_catches_a_tampered_plan_and_the_unfixed_config(corpus: Any, tmp_path: Path) -> None:
    prefixes = [corpus("x", 5, 120, 1, 300), corpus("y", 6, 70, 1, 300)]
    config = gpt_config(prefixes, [1.0, 1.0], "100,0,0", 32, str(tmp_path / "cache"))
    setup = exact_config(config, 1, 8)
    datasets = build(setup.config, setup.sizes)
    verify_build(datasets, setup)
    plan = setup.plan
    src = [s for s in plan.sources if s.split == "train"]
    tampered = dataclasses.replace(
        plan, sources=(dataclasses.replace(src[0], samples_drawn=src[0].samples_drawn + 1), *plan.sources[1:])
    )
    with pytest.raises(BuildMismatchError, match=r"the first \d+ samples draw \[") as err:
        verify_build(datasets, tampered)
    assert isinstance(err.value, NeoxEpochError)
    longer = dataclasses.replace(
        plan, sources=(dataclasses.replace(src[0], length=src[0].length + 3), *plan.sources[1:])
    )
    with pytest.raises(BuildMismatchError, match="length built"):
        verify_build(datasets, longer)
    # the user's own config (float weights 1:1, surplus 0.005) builds something else than the exact plan
    stock = build(config, setup.sizes)
    with pytest.raises(BuildMismatchError, match="ExactSetup.config"):
        verify_build(stock, setup)
    with pytest.raises(BuildMismatchError, match="expected \\(train, valid, test\\)"):
        verify_build(datasets[:1], setup)


def test_install_logs_on_rank_zero_and_verifies_inside_build(
    corpus: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder

    prefixes = [corpus("p", 8, 90, 1, 300), corpus("q", 9, 50, 1, 300)]
    setup = exact_config(gpt_config(prefixes, [3.0, 1.0], "100,0,0", 32, str(tmp_path / "cache")), 1, 4)
    original = BlendedMegatronDatasetBuilder.build
    with caplog.at_level(logging.INFO, logger="neox_epoch.mcore"):
        uninstall = install(setup)
        try:
            build(setup.config, setup.sizes)
            bad = dataclasses.replace(
                setup, plan=dataclasses.replace(setup.plan, consumed={**setup.plan.consumed, "train": 5})
            )
            uninstall()
            uninstall = install(bad)
            with pytest.raises(BuildMismatchError):
                build(setup.config, setup.sizes)
        finally:
            uninstall()
    assert BlendedMegatronDatasetBuilder.build is original
    text = caplog.text
    for line in plan_lines(setup.plan):
        assert line in text
    assert "p: " in text and "samples per epoch" in text and "epoch(s) built" in text and "passes" in text
    assert "build verified" in text
    caplog.clear()
    monkeypatch.setenv("RANK", "1")
    import torch.distributed as dist

    monkeypatch.setattr(dist, "get_rank", lambda *a, **k: 1)
    with caplog.at_level(logging.INFO, logger="neox_epoch.mcore"):
        install(setup)()
    assert caplog.text == "", "only rank 0 logs"


def test_exact_config_bad_input(corpus: Any, tmp_path: Path) -> None:
    prefixes = [corpus("m", 1, 40, 1, 300), corpus("n", 2, 40, 1, 300)]
    config = gpt_config(prefixes, [1.0, 1.0], "100,0,0", 32, str(tmp_path / "cache"))
    with pytest.raises(PlanError, match="unknown source"):
        exact_config(config, {"m": 1, "zzz": 1}, 4)
    with pytest.raises(NeoxEpochError, match="global_batch_size"):
        exact_config(config, 1, 0)
    with pytest.raises(NeoxEpochError, match="less than one global batch"):
        exact_config(config, 0.01, 4096)


# ---------------------------------------------------------------------------------------------------------
# end to end: the real deepspeed launcher on CPU

E2E_SOURCES = ["web", "code", "books"]
E2E_SPLIT = "30,0,70"
E2E_SEQ = 64
E2E_GBS = 16
STOP_AT = 100


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def deepspeed_command() -> list[str]:
    script = os.path.join(os.path.dirname(sys.executable), "deepspeed")
    return [script] if os.path.exists(script) else [sys.executable, "-m", "deepspeed.launcher.runner"]


def launch(ds_config: str, data_dir: str, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_SIZE", "CUDA_VISIBLE_DEVICES", "MASTER_ADDR")}
    env["DS_ACCELERATOR"] = "cpu"
    cmd = [
        *deepspeed_command(),
        "--num_gpus",
        "2",
        "--master_port",
        str(free_port()),
        EXAMPLE,
        "--ds-config",
        ds_config,
        "--data-dir",
        data_dir,
        "--out",
        str(out),
        "--sources",
        ",".join(E2E_SOURCES),
        "--split",
        E2E_SPLIT,
        "--seq-length",
        str(E2E_SEQ),
        "--expected-world",
        "2",
        *extra,
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc


def expected_numbers(data_dir: str) -> dict[str, Any]:
    """What one exact pass must give, from the .idx files alone (megatron-core's split rounding, (T-1)//L)."""
    per_source = {}
    for name in E2E_SOURCES:
        header = idx.read_header(os.path.join(data_dir, f"{name}_text_document"))
        lengths = np.asarray(idx.sizes_memmap(header), dtype=np.int64)
        lo, hi = mcore_semantics.split_range(mcore_semantics.split_matrix(E2E_SPLIT)[0], len(lengths))  # type: ignore[arg-type]
        tokens = int(lengths[lo:hi].sum())
        per_source[name] = {"tokens": tokens, "samples": (tokens - 1) // E2E_SEQ}
    total_samples = sum(s["samples"] for s in per_source.values())
    remainder = total_samples % E2E_GBS
    tokens = sum(s["tokens"] for s in per_source.values())
    partial = sum(s["tokens"] - s["samples"] * E2E_SEQ for s in per_source.values())
    return {
        "sources": per_source,
        "train_iters": total_samples // E2E_GBS,
        "remainder_samples": remainder,
        "train_tokens": tokens,
        "final_partial_tokens": partial,
        "seen_once": tokens - remainder * E2E_SEQ - partial,
    }


def run_files(out: Path) -> dict[str, Any]:
    """report.json, the counters' JSONL and the records (sample, source, source sample, crc32, iteration)."""
    return {
        "report": json.loads((out / "report.json").read_text()),
        "jsonl": [json.loads(x) for x in (out / JSONL_NAME).read_text().splitlines()],
        "records": json.loads((out / "neox_epoch_consumed.json").read_text())["records"],
    }


def drawn_after(records: list[list[int]], sources: int) -> np.ndarray:
    """Per-source samples the model really received after each iteration: row k = after iteration k."""
    last = max(r[4] for r in records)
    per_iteration = np.zeros((last + 1, sources), dtype=np.int64)
    for _, src, _, _, it in records:
        per_iteration[it, src] += 1
    return np.cumsum(per_iteration, axis=0)


def pass_crossings(records: list[list[int]], samples_per_epoch: dict[str, int]) -> list[tuple[int, str, int, int]]:
    """(iteration, source, pass, sample) where the recorded draws, in blend order, reach each source's next pass."""
    seen = dict.fromkeys(samples_per_epoch, 0)
    out = []
    for n, src, _, _, it in sorted(records):
        name = E2E_NAMES[src]
        seen[name] += 1
        if seen[name] > samples_per_epoch[name] and (seen[name] - 1) % samples_per_epoch[name] == 0:
            out.append((it, name, 1 + (seen[name] - 1) // samples_per_epoch[name], n))
    return out


E2E_NAMES = [f"{name}_text_document" for name in E2E_SOURCES]


@pytest.fixture(scope="module")
def e2e(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The check-batch mismatch flow, then the full run with the fixed config, then stop + resume, then two passes
    stopped at global batch 16 and resumed at global batch 32."""
    from neox_epoch.cli import main

    base = tmp_path_factory.mktemp("e2e")
    data_dir = str(base / "data")
    write_demo_corpus(data_dir)
    bad = base / "ds_bad.json"
    bad.write_text(
        json.dumps(
            {
                "train_batch_size": E2E_GBS,
                "train_micro_batch_size_per_gpu": 4,
                "gradient_accumulation_steps": 4,
                "steps_per_print": 1000000,
            }
        )
    )
    fixed = str(base / "ds_fixed.json")
    check = subprocess.run(
        [sys.executable, "-m", "neox_epoch.cli", "check-batch", str(bad), "--num_gpus", "2"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "DS_ACCELERATOR": "cpu"},
    )
    fix_code = main(["check-batch", str(bad), "--num_gpus", "2", "--fix", fixed])
    full = launch(fixed, data_dir, base / "full")
    first = launch(fixed, data_dir, base / "resumed", "--stop-at-iter", str(STOP_AT))
    stopped = {
        "report_exists": (base / "resumed" / "report.json").exists(),
        "checkpoint": sorted(os.listdir(base / "resumed" / "checkpoints")),
        "log": first.stdout,
    }
    second = launch(fixed, data_dir, base / "resumed", "--resume")
    bigger = base / "ds_32.json"  # the resume's DeepSpeed config: micro 4 x grad accumulation 4 x dp 2 = 32
    bigger.write_text(
        json.dumps(
            {
                "train_batch_size": 32,
                "train_micro_batch_size_per_gpu": 4,
                "gradient_accumulation_steps": 4,
                "steps_per_print": 1000000,
            }
        )
    )
    launch(fixed, data_dir, base / "rebatched", "--epochs", "2", "--stop-at-iter", str(STOP_AT))
    check_resume = [
        sys.executable,
        "-m",
        "neox_epoch.cli",
        "resume-check",
        str(base / "rebatched" / "checkpoints"),
        str(bigger),
        "--world-size",
        "2",
        "--cache",
        str(base / "rebatched" / "index_cache"),
    ]
    resume_check = subprocess.run([*check_resume, "--json", "--exposure"], capture_output=True, text=True, cwd=ROOT)
    rebatched = launch(str(bigger), data_dir, base / "rebatched", "--epochs", "2", "--resume")
    return {
        "check": check,
        "fix_code": fix_code,
        "fixed": json.loads(Path(fixed).read_text()),
        "full": json.loads((base / "full" / "report.json").read_text()),
        "full_log": full.stdout,
        "resumed": json.loads((base / "resumed" / "report.json").read_text()),
        "resume_log": second.stdout,
        "stopped": stopped,
        "expected": expected_numbers(data_dir),
        "files": {k: run_files(base / k) for k in ("full", "resumed", "rebatched")},
        "rebatched_log": rebatched.stdout,
        "dirs": {k: base / k for k in ("full", "resumed", "rebatched")},
        "resume_check": resume_check,
    }


@pytest.mark.slow
def test_check_batch_mismatch_exits_2_and_the_fixed_config_runs_the_example(e2e: dict[str, Any]) -> None:
    check = e2e["check"]
    assert check.returncode == 2, check.stderr
    assert "16 != micro * grad_accum * dp = 4 * 4 * 2 = 32" in check.stderr
    assert "gradient_accumulation_steps 4 -> 2" in check.stderr and "--fix" in check.stderr
    assert e2e["fix_code"] == 1
    fixed = e2e["fixed"]
    assert (
        fixed["train_batch_size"],
        fixed["train_micro_batch_size_per_gpu"],
        fixed["gradient_accumulation_steps"],
    ) == (16, 4, 2)
    assert e2e["full"]["global_batch_size"] == 16 and e2e["full"]["gradient_accumulation_steps"] == 2


@pytest.mark.slow
def test_full_run_trains_every_train_token_exactly_once(e2e: dict[str, Any]) -> None:
    r, want = e2e["full"], e2e["expected"]
    assert r["world_size"] == 2 and r["megatron_core_version"] and r["deepspeed_version"] == "0.19.8"
    assert r["plan"]["train_iters"] == want["train_iters"] == 380
    assert r["plan"]["train_samples"] == 380 * 16 == r["consumed"]["samples"] == r["consumed"]["distinct"] == 6080
    assert r["plan"]["remainder_samples"] == want["remainder_samples"] == 1
    assert r["plan"]["remainder_tokens"] == 64
    assert r["consumed"]["duplicates"] == 0
    t = r["tokens"]
    assert t["train_tokens"] == want["train_tokens"] == 389252
    assert (
        t["seen_once"]
        == want["seen_once"]
        == 389120
        == t["train_tokens"] - t["remainder_tokens"] - t["final_partial_tokens"]
    )
    assert t["seen_more_than_once"] == 0
    assert t["never_seen"] == 132 == t["remainder_tokens"] + t["final_partial_tokens"]
    assert t["final_partial_tokens"] == want["final_partial_tokens"] == 68
    for s, name in zip(r["sources"], E2E_SOURCES):
        w = want["sources"][name]
        assert s["train_tokens"] == w["tokens"] and s["samples_per_epoch"] == w["samples"]
        assert s["samples_consumed"] == s["distinct_samples_consumed"] == s["samples_drawn_planned"]
        assert s["samples_consumed"] == w["samples"] - s["remainder_samples"]
        assert s["tokens_seen_once"] == s["samples_consumed"] * E2E_SEQ
        assert s["tokens_never_seen"] == s["never_seen_expected"] and s["max_times_seen"] == 1
        assert s["epochs_built"] == 1
    assert r["cross_check"] == {"samples_checked": 6080, "mismatches": 0}
    assert all(r["checks"].values()) and r["exactly_one_pass"] is True
    assert "neox-epoch: web_text_document: " in e2e["full_log"] and "build verified" in e2e["full_log"]


@pytest.mark.slow
def test_stop_mid_epoch_and_resume_is_still_exactly_one_pass(e2e: dict[str, Any]) -> None:
    stopped, r, full = e2e["stopped"], e2e["resumed"], e2e["full"]
    assert not stopped["report_exists"], "a stopped run proves nothing yet"
    assert stopped["checkpoint"] == [f"iter_{STOP_AT}", "latest"]
    assert "resumed from" in e2e["resume_log"] and f"at iteration {STOP_AT}" in e2e["resume_log"]
    assert r["launches"] == [
        {
            "start_iter": 0,
            "end_iter": STOP_AT,
            "samples": STOP_AT * 16,
            "global_batch_size": 16,
            "start_consumed": 0,
            "end_consumed": STOP_AT * 16,
        },
        {
            "start_iter": STOP_AT,
            "end_iter": 380,
            "samples": (380 - STOP_AT) * 16,
            "global_batch_size": 16,
            "start_consumed": STOP_AT * 16,
            "end_consumed": 380 * 16,
        },
    ]
    for key in ("plan", "consumed", "tokens", "sources", "cross_check", "checks", "consumed_digest"):
        assert r[key] == full[key], key
    assert r["exactly_one_pass"] is True
    # the checkpoint carried the optimizer state and the sample counter: the same model, bit for bit
    assert r["model_checksum"] == full["model_checksum"] and r["final_loss"] == full["final_loss"]


# ---------------------------------------------------------------------------------------------------------
# live counters under the real launcher: JSONL equal to what the model received


def check_counters_equal_records(files: dict[str, Any]) -> list[dict[str, Any]]:
    """Every counters record's per-source samples and consumed_samples equal the recorded draws after that
    iteration; returns the counters records."""
    drawn = drawn_after(files["records"], len(E2E_NAMES))
    counters = [r for r in files["jsonl"] if r["event"] == "counters"]
    for r in counters:
        assert [r["sources"][n]["samples"] for n in E2E_NAMES] == drawn[r["iteration"]].tolist(), r["iteration"]
        assert r["consumed_samples"] == int(drawn[r["iteration"]].sum()), r["iteration"]
    return counters


@pytest.mark.slow
def test_live_counters_equal_the_drawn_samples_in_one_run_and_across_a_resume(e2e: dict[str, Any]) -> None:
    """One pass, global batch 16, counters every 10 iterations: the JSONL says what the model received."""
    full = e2e["files"]["full"]
    counters = check_counters_equal_records(full)
    assert [r["iteration"] for r in counters] == list(range(10, 381, 10))
    assert [r["event"] for r in full["jsonl"]] == ["plan", *["counters"] * 38, "final"]  # one pass: no pass 2 starts
    final = full["jsonl"][-1]
    assert final["complete"] is True and final["iteration"] == 380 and final["consumed_samples"] == 6080
    planned = {s["name"]: s["samples_drawn_planned"] for s in full["report"]["sources"]}
    assert {k: v["samples"] for k, v in final["sources"].items()} == planned
    assert sum(planned.values()) == 6080 and all(v["pass"] == 1 for v in final["sources"].values())
    # stopped at 100 and resumed with the same batch: the second launch continues the records, none twice
    resumed = e2e["files"]["resumed"]
    counters = check_counters_equal_records(resumed)
    assert [r["iteration"] for r in counters] == list(range(10, 381, 10))
    events = [r["event"] for r in resumed["jsonl"]]
    # (the stop saved a checkpoint: state_dict() recorded the counters' state after the launch's final record)
    assert events == ["plan", *["counters"] * 10, "final", "checkpoint", "plan", "resume", *["counters"] * 28, "final"]
    saved = resumed["jsonl"][12]["counters"]
    assert (resumed["jsonl"][12]["iteration"], saved["iteration"], saved["consumed_samples"]) == (100, 100, 1600)
    # same batch, same data: the same counters at every logged iteration as the uninterrupted run
    assert [{**r, "time": 0} for r in counters] == [{**r, "time": 0} for r in full["jsonl"] if r["event"] == "counters"]


@pytest.mark.slow
def test_two_passes_stopped_at_batch_16_and_resumed_at_batch_32_count_exactly(e2e: dict[str, Any]) -> None:
    """Megatron-core's resume story for a changed global batch: the checkpoint keeps consumed_samples (1600
    after 100 iterations of 16) and the counters' state; the resume plans and builds the same data (planned
    with batch 16), the sampler continues at sample 1600 with 32 per iteration, the counters continue at
    1600 samples and every record equals what the model received."""
    files = e2e["files"]["rebatched"]
    r = files["report"]
    assert r["global_batch_size"] == 32 and r["plan_global_batch_size"] == 16 and r["epochs"] == 2.0
    # two passes: 2 epochs of 12161 samples (+1 where epochs' leftovers add up), planned for batch 16: 760 x 16
    assert (r["plan"]["train_iters"], r["plan"]["train_samples"], r["plan"]["remainder_samples"]) == (760, 12160, 3)
    # (12160 - 1600) / 32 = 330 iterations after the resume: iteration 430 ends at sample 12160, none left over
    assert r["launches"] == [
        {
            "start_iter": 0,
            "end_iter": 100,
            "samples": 1600,
            "global_batch_size": 16,
            "start_consumed": 0,
            "end_consumed": 1600,
        },
        {
            "start_iter": 100,
            "end_iter": 430,
            "samples": 10560,
            "global_batch_size": 32,
            "start_consumed": 1600,
            "end_consumed": 12160,
        },
    ]
    assert r["consumed"] == {"samples": 12160, "distinct": 12160, "duplicates": 0, "expected": 12160}
    assert all(r["checks"].values()) and r["exact_passes"] is True
    t = r["tokens"]
    # every train token twice except 264: the 3 remainder samples (192 tokens) and 72 tokens in no sample
    assert (t["train_tokens"], t["seen_passes_times"], t["seen_more_than_passes"], t["shortfall"]) == (
        389252,
        388988,
        0,
        264,
    )
    assert (t["remainder_tokens"], t["leftover_tokens"], t["never_seen"]) == (192, 72, 0)
    counters = check_counters_equal_records(files)
    assert [c["iteration"] for c in counters] == [*range(10, 101, 10), *range(110, 431, 10)]
    assert [c["consumed_samples"] for c in counters if c["iteration"] in (100, 110, 430)] == [1600, 1920, 12160]
    events = [x["event"] for x in files["jsonl"]]
    assert events[:13] == ["plan", *["counters"] * 10, "final", "checkpoint"] and events[13:15] == ["plan", "resume"]
    resume = files["jsonl"][14]
    # 100 iterations x 16 = 1600 samples before the stop, of which the blend gave web 771, code 485, books 344
    assert (resume["iteration"], resume["consumed_samples"]) == (100, 1600)
    assert [resume["sources"][n]["samples"] for n in E2E_NAMES] == [771, 485, 344]
    assert resume["global_batch_size_planned"] == 16
    # each source starts pass 2 after its 1st-pass samples (web 2931, code 1843, books 1307) at blend samples
    # 6082, 6081, 6083: iteration 241 = 100 + ceil((6084 - 1600) / 32) at 32 per iteration after the resume,
    # where iteration x the first batch (6082 // 16 + 1 = 381) would put it
    spe = {s["name"]: s["samples_per_epoch"] for s in r["sources"]}
    assert spe == dict(zip(E2E_NAMES, [2931, 1843, 1307]))
    starts = [
        (x["iteration"], x["source"], x["pass"], x["sample"]) for x in files["jsonl"] if x["event"] == "pass_start"
    ]
    assert (
        starts
        == pass_crossings(files["records"], spe)
        == [
            (241, "code_text_document", 2, 6081),
            (241, "web_text_document", 2, 6082),
            (241, "books_text_document", 2, 6083),
        ]
    )
    final = files["jsonl"][-1]
    assert final["event"] == "final" and final["complete"] is True and final["iteration"] == 430
    assert {k: (v["samples"], v["pass"]) for k, v in final["sources"].items()} == dict(
        zip(E2E_NAMES, [(5861, 2), (3686, 2), (2613, 2)])
    )
    assert "resumed from" in e2e["rebatched_log"] and "global batch 32, was 16" in e2e["rebatched_log"]


@pytest.mark.slow
def test_resume_check_predicts_the_batch_change_the_run_then_draws(e2e: dict[str, Any], tmp_path: Path) -> None:
    """resume-check on the checkpoint saved at iteration 100 of batch 16, with the DeepSpeed config of 32, before
    the resume: it starts at the 1600 consumed, runs to iteration 430 = 100 + (12160 - 1600) // 32 with nothing
    left over (clean, exit 0), and each source's draws after the resume, read from the built blend, are the
    recorded samples of the resumed launch: their source samples are exactly items drawn_before .. + drawn."""
    check = e2e["resume_check"]
    assert check.returncode == 0, check.stderr
    out = json.loads(check.stdout)
    assert (out["resumed_by"], out["consumed_samples"], out["start_sample"]) == ("megatron-core", 1600, 1600)
    assert (out["old_train_batch_size"], out["new_train_batch_size"], out["findings"]) == (16, 32, [])
    assert out["notes"][0] == "the run ends at iteration 430 = 100 + (12160 - 1600) // 32"
    records = e2e["files"]["rebatched"]["records"]
    for k, source in enumerate(out["sources"]):
        after = sorted(r[2] for r in records if r[1] == k and r[4] > STOP_AT)
        assert source["name"] == E2E_NAMES[k] and (source["skipped_samples"], source["repeated_samples"]) == (0, 0)
        assert after == list(range(source["drawn_before"], source["drawn_before"] + source["drawn_after_resume"]))
    assert [s["drawn_before"] for s in out["sources"]] == [771, 485, 344]
    assert [s["drawn_after_resume"] for s in out["sources"]] == [5861 - 771, 3686 - 485, 2613 - 344]
    # --exposure: the audit's count of each source's input tokens over the whole run, from the cache before the
    # resume, equals the tokens of the items both launches recorded, walked through the built index arrays
    cache = e2e["dirs"]["rebatched"] / "index_cache"
    for k, name in enumerate(E2E_NAMES):
        got = out["exposure"][name]
        items = [r[2] for r in records if r[1] == k]
        counts = count_gpt_exposure(_cached_dataset(cache / got["index"]), items, E2E_SEQ)
        assert got["resumed"]["tokens"] == {str(t): n for t, n in histogram_all(counts).items()}, name
        assert got["continued"] == got["resumed"], name  # 32 divides the 10560 left, as 16 does
    # OLD from the run's JSONL instead of the checkpoint: the counters' record of iteration 100 (state_dict() wrote it
    # while the checkpoint was saved; the resumed launch appended later ones) gives the same answer
    run_dir = e2e["dirs"]["rebatched"]
    from_log = subprocess.run(
        [
            sys.executable,
            "-m",
            "neox_epoch.cli",
            "resume-check",
            str(run_dir),
            str(run_dir.parent / "ds_32.json"),
            "--world-size",
            "2",
            "--cache",
            str(cache),
            "--json",
            "--exposure",
            "--iteration",
            str(STOP_AT),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert from_log.returncode == 0, from_log.stderr
    logged = json.loads(from_log.stdout)
    assert logged["checkpoint"] == f"{run_dir / 'neox_epoch.jsonl'} (iteration {STOP_AT})"
    assert {**logged, "checkpoint": None} == {**out, "checkpoint": None}
    # a global batch of 28 (micro 2 x accumulation 7 x dp 2) leaves 10560 % 28 = 4 samples undrawn: exit 1
    odd = tmp_path / "ds_28.json"
    odd.write_text(
        json.dumps({"train_batch_size": 28, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 7})
    )
    argv = [
        sys.executable,
        "-m",
        "neox_epoch.cli",
        "resume-check",
        str(e2e["dirs"]["rebatched"] / "checkpoints"),
        str(odd),
        "--world-size",
        "2",
    ]
    r = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    assert (
        r.returncode == 1
        and "finding: remainder: the last 4 of the train dataset's 12160 samples are never drawn ((12160 - 1600) % 28)"
        in r.stdout
    )
    assert "the run ends at iteration 477 = 100 + (12160 - 1600) // 28" in r.stdout
    with_cache = subprocess.run(
        [*argv, "--cache", str(cache), "--exposure", "--json"], capture_output=True, text=True, cwd=ROOT
    )
    exposed = json.loads(with_cache.stdout)["exposure"]
    lost = sum(e["continued"]["token_exposures"] - e["resumed"]["token_exposures"] for e in exposed.values())
    assert with_cache.returncode == 1 and lost == 4 * E2E_SEQ  # the 4 samples continuing with 16 would draw
    # the cache of another run (the one-pass build) is not this run's blend: one line, exit 2
    other = subprocess.run(
        [*argv, "--cache", str(e2e["dirs"]["resumed"] / "index_cache")], capture_output=True, text=True, cwd=ROOT
    )
    assert other.returncode == 2 and other.stderr.count("\n") == 1
    assert "no train BlendedDataset of 12160 samples over ['web_text_document', " in other.stderr


def _cached_dataset(stem: Path) -> Any:
    """The index arrays of a GPTDataset in megatron-core's cache (stem: the files without their role suffix) and its
    documents' lengths, shaped as exposure_util walks a GPTDataset."""
    import types

    arrays = {role: np.load(f"{stem}-{role}.npy") for role in ("document_index", "sample_index", "shuffle_index")}
    described = json.loads(Path(f"{stem}-description.txt").read_text())
    lengths = np.asarray(idx.sizes_memmap(idx.read_header(described["dataset_path"])))
    return types.SimpleNamespace(
        **arrays, indices=np.unique(arrays["document_index"]), dataset=types.SimpleNamespace(sequence_lengths=lengths)
    )


def histogram_all(counts: dict[int, np.ndarray]) -> dict[int, int]:
    """{times seen: tokens} over every token of the documents, the times some token was seen (the audit's JSON)."""
    found = np.bincount(np.concatenate([c for c in counts.values()]) if counts else np.zeros(0, np.int64))
    return {times: int(n) for times, n in enumerate(found) if n}


@pytest.mark.slow
def test_report_draws_the_real_megatron_core_run(e2e: dict[str, Any], tmp_path: Path) -> None:
    """neox-epoch report on the run stopped at batch 16 and resumed at 32 (the counters' JSONL of the real
    megatron-core build): the resume at iteration 100 marked with the batch change, each source's last point
    and pass-2 start what the recorded draws give (test_two_passes_stopped_at_batch_16_and_resumed_at_batch_32
    _count_exactly), and the page one file."""
    page = tmp_path / "run.html"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "neox_epoch.cli",
            "report",
            str(e2e["dirs"]["rebatched"]),
            "--json",
            "--html",
            str(page),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert (j["complete"], j["last_iteration"], j["train_iters"]) == (True, 430, 430)
    assert [
        (x["from_iteration"], x["to_iteration"], x["train_iters"], x["train_batch_size"], x["status"])
        for x in j["launches"]
    ] == [(0, 100, 760, 16, "stopped early"), (100, 430, 430, 32, "complete")]
    (resume,) = j["resumes"]
    assert (resume["iteration"], resume["consumed_samples"], resume["changed"]) == (
        100,
        1600,
        {"train_batch_size": [16, 32]},
    )
    last = {x["name"]: (x["points"][-1]["samples"], x["points"][-1]["pass"]) for x in j["sources"]}
    assert last == dict(zip(E2E_NAMES, [(5861, 2), (3686, 2), (2613, 2)]))
    starts = {x["name"]: [(b["iteration"], b["sample"]) for b in x["pass_starts"]] for x in j["sources"]}
    assert starts == dict(zip(E2E_NAMES, [[(241, 6082)], [(241, 6081)], [(241, 6083)]]))
    assert "resume @ 100: train_batch_size 16 → 32" in page.read_text(encoding="utf-8")
