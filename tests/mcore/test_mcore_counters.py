"""neox_epoch.mcore.live_counters on datasets built by the real megatron-core BlendedMegatronDatasetBuilder.

The counters must say, at every consumed-samples position, exactly what the built blend's ``dataset_index``
says (the ground truth here is ``bincount(dataset_index[:consumed])`` of the real array), whatever global
batches got there; pass starts are the blend positions of each source's first sample of the next pass;
state saved at one global batch continues exactly at another, and a state from a differently built
dataset is refused in one line naming both numbers. The runs under the real deepspeed launcher are in
tests/test_mcore_e2e.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import optional
import pytest

optional.require("megatron.core")

from mcore_live import init_gloo, null_tokenizer  # noqa: E402

from neox_epoch.errors import ConfigError, NeoxEpochError  # noqa: E402
from neox_epoch.formats.runlog import JSONL_NAME, checkpoint_records  # noqa: E402
from neox_epoch.mcore import CountersStateError, LiveCounters, exact_config, live_counters  # noqa: E402

EPOCHS = {"s0": 1, "s1": 2, "s2": 0.5}
GBS = 8


def gpt_config(prefixes: list[str], weights: list[float] | None, cache: str) -> Any:
    from megatron.core.datasets.gpt_dataset import GPTDatasetConfig

    return GPTDatasetConfig(
        random_seed=1234,
        sequence_length=32,
        blend=(prefixes, weights),
        split="100,0,0",
        path_to_cache=cache,
        tokenizer=null_tokenizer(),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=False,
    )


def build_train(setup: Any) -> Any:
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset

    init_gloo()
    return BlendedMegatronDatasetBuilder(GPTDataset, list(setup.sizes), lambda: True, setup.config).build()[0]


@pytest.fixture
def blend(corpus: Any, tmp_path: Path) -> dict[str, Any]:
    prefixes = [corpus(f"s{k}", 40 + k, n, 1, 300) for k, n in enumerate([150, 90, 60])]
    config = gpt_config(prefixes, [0.5, 0.3, 0.2], str(tmp_path / "cache"))
    setup = exact_config(config, EPOCHS, GBS)
    train = build_train(setup)
    return {"config": config, "setup": setup, "train": train, "index": np.asarray(train.dataset_index)}


def truth(index: np.ndarray, consumed: int) -> list[int]:
    return np.bincount(index[:consumed], minlength=3).tolist()


class TensorBoardLike:
    """The SummaryWriter protocol the counters use: add_scalar(tag, value, step)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float, int]] = []

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self.calls.append((tag, value, step))


class WandbLike:
    """The W&B run protocol the counters use: log(dict, step=)."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, float], int]] = []

    def log(self, data: dict[str, float], step: int | None = None) -> None:
        self.calls.append((dict(data), int(step)))  # type: ignore[arg-type]


def schedule() -> list[int]:
    """Global batch per iteration: 8 for 50 iterations, 16 for 79, then one of 24 (a ramp / resize): 1688."""
    return [8] * 50 + [16] * 79 + [24]


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (path / JSONL_NAME).read_text().splitlines()]


def test_counts_equal_the_built_dataset_index_at_every_position(blend: dict[str, Any]) -> None:
    """Any consumed-samples position, any block size: the per-source draws of dataset_index[:consumed]."""
    setup, train, index = blend["setup"], blend["train"], blend["index"]
    # the plan: s0 713 samples per epoch (1 pass), s1 420 x 2 passes, s2 135 of 283 (0.5 pass minus the remainder)
    assert (setup.train_iters, setup.train_samples, len(train)) == (211, 1688, 1688)
    for block in (1, 16, 100, 4096):
        c = LiveCounters(train, setup, block=block, active=False)
        assert [c.counts_at(n) for n in range(len(train) + 1)] == [truth(index, n) for n in range(len(train) + 1)]
    assert c.counts_at(1688) == [713, 840, 135]
    # s1 starts pass 2 with its draw number 420 (0-based), at blend position 845 of the real index
    assert c.pass_starts() == [("s1", 2, 845)] and int(np.flatnonzero(index == 1)[420]) == 845
    assert c.passes_at(1688) == {
        "s0": {"samples": 713, "passes": 1.0, "pass": 1},
        "s1": {"samples": 840, "passes": 2.0, "pass": 2},
        "s2": {"samples": 135, "passes": 0.477032, "pass": 1},
    }


def test_step_with_a_changing_global_batch_records_exact_counts(blend: dict[str, Any], tmp_path: Path) -> None:
    """Records keyed on consumed samples stay exact when the global batch changes between iterations."""
    tb, wb = TensorBoardLike(), WandbLike()
    c = live_counters(
        blend["train"], blend["setup"], log_dir=str(tmp_path / "tb"), writer=tb, log_interval=10, active=True
    )
    c2 = live_counters(
        blend["train"], blend["setup"], log_dir=str(tmp_path / "wb"), writer=wb, log_interval=10, active=True
    )
    consumed, seen = 0, []
    for it, gbs in enumerate(schedule(), start=1):
        consumed += gbs
        seen.append(consumed)
        c.step(it, consumed)
        c2.step(it, consumed)
    assert consumed == 1688
    report = c.final()
    c2.final()
    recs = jsonl(tmp_path / "tb")
    assert [r["event"] for r in recs[:1]] == ["plan"] and recs[0]["iteration"] == 0
    assert recs[0]["train_batch_size"] == 8 and recs[0]["train_samples"] == 1688
    counters = [r for r in recs if r["event"] == "counters"]
    assert [r["iteration"] for r in counters] == list(range(10, 131, 10))
    for r in counters:
        assert r["consumed_samples"] == seen[r["iteration"] - 1]
        assert [r["sources"][f"s{k}"]["samples"] for k in range(3)] == truth(blend["index"], r["consumed_samples"])
    # 400 samples after 50 iterations of 8, then 16 per iteration: iteration 78 (400 + 28 * 16 = 848 > 845) draws
    # s1's first sample of pass 2; iteration x batch (78 * 8 = 624) would have put it elsewhere
    starts = [r for r in recs if r["event"] == "pass_start"]
    assert [(r["iteration"], r["source"], r["pass"], r["sample"], r["consumed_samples"]) for r in starts] == [
        (78, "s1", 2, 845, 848)
    ]
    assert report["complete"] is True and report["consumed_samples"] == 1688 and report["iteration"] == 130
    assert {k: v["samples"] for k, v in report["sources"].items()} == {"s0": 713, "s1": 840, "s2": 135}
    assert report["sources"]["s1"]["planned_passes"] == 2.0 and recs[-1] == {**report, "time": recs[-1]["time"]}
    assert ("neox_epoch/pass_start/s1", 2.0, 78) in tb.calls
    assert ("neox_epoch/passes/s1", round(truth(blend["index"], 400)[1] / 420, 6), 50) in tb.calls
    assert {t for t, _, _ in tb.calls} == {
        f"neox_epoch/{k}/s{i}" for k in ("passes", "samples", "pass") for i in range(3)
    } | {"neox_epoch/pass_start/s1"}
    assert ({"neox_epoch/pass_start/s1": 2.0}, 78) in wb.calls
    at_130 = [d for d, step in wb.calls if step == 130 and "neox_epoch/samples/s0" in d]
    assert at_130 == [
        {
            **{f"neox_epoch/passes/s{i}": p for i, p in enumerate([1.0, 2.0, 0.477032])},
            **{f"neox_epoch/samples/s{i}": float(n) for i, n in enumerate([713, 840, 135])},
            **{f"neox_epoch/pass/s{i}": float(p) for i, p in enumerate([1, 2, 1])},
        }
    ]


def test_resume_with_another_global_batch_continues_exactly(blend: dict[str, Any], tmp_path: Path) -> None:
    """State saved after 50 iterations of 8 samples, resumed on a rebuilt dataset (from the index cache) with
    16 per iteration: the counts continue at consumed samples 400, not at iteration x the new batch (800)."""
    first = live_counters(blend["train"], blend["setup"], log_dir=str(tmp_path), log_interval=10, active=True)
    for it in range(1, 51):
        first.step(it, it * 8)
    state = json.loads(json.dumps(first.state_dict()))  # what a checkpoint keeps: plain JSON
    assert state["consumed_samples"] == 400 and state["iteration"] == 50
    assert list(state["samples"].values()) == truth(blend["index"], 400)
    # state_dict() also recorded it in the JSONL, where resume-check reads OLD without the checkpoint
    from neox_epoch.resume.mcore import checkpoint_from_log

    log = str(tmp_path / JSONL_NAME)
    logged = checkpoint_from_log(log, checkpoint_records(log), None)
    assert logged is not None and (logged.framework, logged.iteration) == ("megatron-core", 50)
    assert logged.values["neox_epoch_counters"] == state
    with pytest.raises(ConfigError, match=r"no checkpoint record for iteration 49; recorded: \[50\]"):
        checkpoint_from_log(log, checkpoint_records(log), 49)
    second = live_counters(
        build_train(blend["setup"]), blend["setup"], log_dir=str(tmp_path), log_interval=10, active=True
    )
    second.load_state_dict(state)
    for it in range(51, 131):  # (1688 - 400) // 16 = 80 iterations of 16; the last 8 samples are no full batch
        second.step(it, 400 + (it - 50) * 16)
    report = second.final()
    recs = jsonl(tmp_path)
    resume = [r for r in recs if r["event"] == "resume"]
    assert len(resume) == 1 and resume[0]["iteration"] == 50 and resume[0]["consumed_samples"] == 400
    assert [resume[0]["sources"][f"s{k}"]["samples"] for k in range(3)] == truth(blend["index"], 400)
    counters = [r for r in recs if r["event"] == "counters"]
    assert [r["iteration"] for r in counters] == [*range(10, 51, 10), *range(60, 131, 10)]
    for r in counters:
        assert [r["sources"][f"s{k}"]["samples"] for k in range(3)] == truth(blend["index"], r["consumed_samples"])
    assert [(r["iteration"], r["sample"]) for r in recs if r["event"] == "pass_start"] == [(78, 845)]
    assert report["consumed_samples"] == 1680 and report["complete"] is False and report["iteration"] == 130
    assert {k: v["samples"] for k, v in report["sources"].items()} == dict(
        zip(["s0", "s1", "s2"], truth(blend["index"], 1680))
    )


def test_a_state_from_another_build_is_refused_in_one_line(blend: dict[str, Any], corpus: Any) -> None:
    """A checkpoint's counters state against a dataset planned for other epochs (another blend): refused,
    naming the source and both draw counts; the other malformed uses are refused too."""
    first = live_counters(blend["train"], blend["setup"], active=False)
    for it in range(1, 51):
        first.step(it, it * 8)
    state = first.state_dict()
    other_setup = exact_config(blend["config"], {"s0": 1, "s1": 1, "s2": 0.5}, GBS)
    other = live_counters(build_train(other_setup), other_setup, active=False)
    saved, now = truth(blend["index"], 400), other.counts_at(400)
    assert (saved, now) == ([169, 199, 32], [224, 132, 44])  # the s1 x 2 blend draws s1 far more often early on
    with pytest.raises(CountersStateError) as err:
        other.load_state_dict(state)
    msg = str(err.value)
    assert msg == (
        "counters state: s0 had 169 samples drawn at consumed_samples 400 in the checkpoint, this train "
        "dataset draws 224 there; rebuild it with the checkpoint's plan (exact_config with "
        "global_batch_size 8, the same blend and epochs) or start the counters without the state"
    )
    assert "\n" not in msg and isinstance(err.value, NeoxEpochError)
    with pytest.raises(CountersStateError, match="format None, expected 'neox_epoch.mcore.counters/1'"):
        other.load_state_dict({"consumed_samples": 400})
    with pytest.raises(
        CountersStateError, match=r"sources \['s0', 's1'\], this train dataset has \['s0', 's1', 's2'\]"
    ):
        other.load_state_dict({**state, "samples": {"s0": 1, "s1": 2}})
    with pytest.raises(CountersStateError, match="consumed_samples 1689, this train dataset has 1272 samples"):
        other.load_state_dict({**state, "consumed_samples": 1689})
    with pytest.raises(CountersStateError, match="consumed_samples 392 at iteration 51 is below the 400"):
        first.step(51, 392)
    with pytest.raises(CountersStateError, match="exceeds the train dataset's 1688 samples"):
        first.step(51, 1700)
    with pytest.raises(ConfigError, match="log_interval: 0"):
        live_counters(blend["train"], blend["setup"], log_interval=0)
    with pytest.raises(ConfigError, match="neither add_scalar"):
        live_counters(blend["train"], blend["setup"], writer=object(), active=True)
    with pytest.raises(ConfigError, match="3 source dataset"):
        live_counters(
            blend["train"],
            exact_config(gpt_config(blend["config"].blend[0][:2], [1.0, 1.0], blend["config"].path_to_cache), 1, GBS),
        )


def test_direct_dataset_and_inactive_rank(corpus: Any, tmp_path: Path) -> None:
    """One prefix without a weight: megatron-core reads the GPTDataset itself; two passes start pass 2 at its
    samples_per_epoch-th sample. A rank that does not log writes nothing but keeps the same state."""
    prefix = corpus("solo", 7, 80, 1, 300)
    setup = exact_config(gpt_config([prefix], None, str(tmp_path / "cache")), 2, 4)
    train = build_train(setup)
    assert not hasattr(train, "dataset_index")
    spe = setup.plan.sources[0].samples_per_epoch
    c = live_counters(train, setup, log_dir=str(tmp_path / "r0"), log_interval=5, active=True)
    quiet = live_counters(train, setup, log_dir=str(tmp_path / "r1"), log_interval=5, active=False)
    assert c.pass_starts() == [("solo", 2, spe)]
    for it in range(1, setup.train_iters + 1):
        c.step(it, it * 4)
        quiet.step(it, it * 4)
    assert c.final()["sources"]["solo"]["samples"] == setup.train_samples == quiet.final()["sources"]["solo"]["samples"]
    starts = [r for r in jsonl(tmp_path / "r0") if r["event"] == "pass_start"]
    assert [(r["iteration"], r["sample"]) for r in starts] == [(spe // 4 + 1, spe)]
    assert not (tmp_path / "r1").exists() and quiet.state_dict() == c.state_dict()
    assert [(m.iteration, m.sample) for m in quiet.markers] == [(spe // 4 + 1, spe)]


def test_neox_and_megatron_core_write_the_same_records_and_tags(corpus: Any, tmp_path: Path) -> None:
    """One report reads both: on the same run (one source, two passes, batch 4 every iteration) NeoX's
    PassCounters and megatron-core's LiveCounters write the same counters, pass_start and final records (the
    megatron-core ones carry consumed_samples / train_samples besides) and the same scalar tags and values."""
    from neox_epoch.neox.counters import JsonlSink, counters_for

    prefix = corpus("solo", 7, 80, 1, 300)
    setup = exact_config(gpt_config([prefix], None, str(tmp_path / "cache")), 2, 4)
    spe, iters = setup.plan.sources[0].samples_per_epoch, setup.train_iters
    neox_scalars: list[tuple[str, float, int]] = []
    neox = counters_for(
        ["solo"],
        [spe],
        [[spe]],
        [2.0],
        None,
        train_batch_size=4,
        train_iters=iters,
        log_interval=5,
        sink=JsonlSink(str(tmp_path / "neox")),
        scalar=lambda k, v, i: neox_scalars.append((k, v, i)),
    )
    tb = TensorBoardLike()
    mcore = live_counters(
        build_train(setup), setup, log_dir=str(tmp_path / "mcore"), writer=tb, log_interval=5, active=True
    )
    neox.start(0)
    for it in range(1, iters + 1):
        neox.step(it)
        mcore.step(it, it * 4)
    neox.final(iters)
    mcore.final()

    def shape(records: list[dict[str, Any]], drop: tuple[str, ...]) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if k not in ("time", *drop)} for r in records if r["event"] != "plan"]

    assert shape(jsonl(tmp_path / "mcore"), ("train_samples",)) == [
        {**r, "consumed_samples": iters * 4}
        if r["event"] == "final"
        else {**r, "consumed_samples": r["iteration"] * 4}
        if r["event"] == "pass_start"
        else r
        for r in shape(jsonl(tmp_path / "neox"), ())
    ]
    assert [r["event"] for r in jsonl(tmp_path / "mcore") if r["event"] == "pass_start"] == ["pass_start"]
    assert sorted(tb.calls) == sorted(neox_scalars)
