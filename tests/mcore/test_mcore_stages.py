"""neox_epoch.mcore.exact_stages / build_stages on the real megatron-core builder, and the counters over them.

The issue's three stages (1: a 1 pass; 2: a 0.5, b 1; 3: b 1, c 2) at seq_length 32, seed 1234, global batch 4,
on the corpora of tests/plan/test_stages.py (a 123, b 82, c 76 samples per epoch). The ground truth is the real
GPTDatasets: each source built once more here, independently, by ``BlendedMegatronDatasetBuilder`` (weights
None: one epoch), and the samples every stage trains must be exactly the planned ranges of those datasets'
samples, token for token.
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

from neox_epoch.errors import ConfigError, PlanError  # noqa: E402
from neox_epoch.formats.corpus import write_random_corpus  # noqa: E402
from neox_epoch.formats.runlog import JSONL_NAME  # noqa: E402
from neox_epoch.mcore import CountersStateError, build_stages, exact_stages, live_counters  # noqa: E402

ISSUE = {
    "stages": [
        {"name": "s1", "passes": {"a": 1}},
        {"name": "s2", "passes": {"a": 0.5, "b": 1}},
        {"name": "s3", "passes": {"b": 1, "c": 2}},
    ]
}
GBS = 4


def gpt_config(prefixes: list[str], cache: str, seed: int = 1234) -> Any:
    from megatron.core.datasets.gpt_dataset import GPTDatasetConfig

    return GPTDatasetConfig(
        random_seed=seed,
        sequence_length=32,
        blend=(prefixes, None),
        split="100,0,0",
        path_to_cache=cache,
        tokenizer=null_tokenizer(),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=False,
    )


@pytest.fixture
def corpora(tmp_path: Path) -> dict[str, str]:
    out = {}
    for name, seed, docs in (("a", 1, 40), ("b", 2, 30), ("c", 3, 20)):
        out[name] = str(tmp_path / name)
        write_random_corpus(out[name], seed, docs)
    return out


def reference(prefix: str, cache: str) -> Any:
    """The source's GPTDataset as megatron-core builds it alone (one prefix, weights None, sizes None)."""
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset

    return BlendedMegatronDatasetBuilder(
        GPTDataset, [None, None, None], lambda: True, gpt_config([prefix], cache)
    ).build()[0]


def test_stages_are_the_planned_ranges_of_the_real_per_source_datasets(corpora: dict[str, str], tmp_path: Path) -> None:
    init_gloo()
    names = ["a", "b", "c"]
    setup = exact_stages(gpt_config([corpora[n] for n in names], str(tmp_path / "cache")), ISSUE, GBS)
    assert [s.samples_per_epoch for s in setup.plan.sources] == [123, 82, 76]
    assert (setup.train_iters, setup.train_samples, setup.boundaries) == (125, 500, (31, 67))
    staged = build_stages(setup)
    assert len(staged) == 500 and [len(d) for d in staged.datasets] == [123, 82, 76]
    refs = [reference(corpora[n], str(tmp_path / f"ref-{n}")) for n in names]
    planned = {  # stage -> source -> (first draw, draws): tests/plan/test_stages.py's plan of the same stages
        "s1": {"a": (0, 124)},
        "s2": {"a": (124, 60), "b": (0, 84)},
        "s3": {"b": (84, 80), "c": (0, 152)},
    }
    first = 0
    for stage in setup.stages_plan.stages:
        rows = range(first, first + stage.samples)
        got = {
            n: [int(staged.dataset_sample_index[i]) for i in rows if names[staged.dataset_index[i]] == n] for n in names
        }
        want = {
            n: [p % len(refs[k]) for p in range(*_span(planned[stage.name].get(n, (0, 0))))]
            for k, n in enumerate(names)
        }
        assert got == want, stage.name
        for i in rows[::7]:  # the tokens trained are the reference dataset's sample, token for token
            k, sample = int(staged.dataset_index[i]), int(staged.dataset_sample_index[i])
            item = staged[i]
            assert item["dataset_id"] == k
            assert np.array_equal(item["tokens"], refs[k][sample]["tokens"])
        first += stage.samples
    # every sample of a source once before any twice: a's 123 then sample 0 again (stage 1's 124th draw)
    a_order = staged.draw_index[staged.dataset_index == 0]
    assert a_order.tolist() == list(range(184))
    assert sorted(np.asarray(staged.dataset_sample_index)[staged.dataset_index == 0][:123].tolist()) == list(range(123))
    c_order = np.asarray(staged.dataset_sample_index)[staged.dataset_index == 2]
    # no sample past its passes (issue 35: c drew 154 = 2 x 76 + 2, samples 0 and 1 a third time): c 2 passes,
    # b 2 passes, a 1.5 passes = 184 whole samples (123 + 61: none three times)
    assert np.bincount(c_order, minlength=76).tolist() == [2] * 76
    b_order = np.asarray(staged.dataset_sample_index)[staged.dataset_index == 1]
    assert np.bincount(b_order, minlength=82).tolist() == [2] * 82
    a_counts = np.bincount(np.asarray(staged.dataset_sample_index)[staged.dataset_index == 0], minlength=123)
    assert int(np.max(a_counts)) == 2 and a_counts.sum() == 184


def _span(start_draws: tuple[int, int]) -> tuple[int, int]:
    start, draws = start_draws
    return start, start + draws


def test_counters_show_stage_and_cumulative_passes_and_guard_the_fingerprint(
    corpora: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    init_gloo()
    config = gpt_config([corpora[n] for n in "abc"], str(tmp_path / "cache"))
    setup = exact_stages(config, ISSUE, GBS)
    staged = build_stages(setup)
    scalars: list[tuple[str, float, int]] = []

    class Writer:
        def add_scalar(self, tag: str, value: float, step: int) -> None:
            scalars.append((tag, value, step))

    run = tmp_path / "run"
    c = live_counters(staged, setup, log_dir=str(run), writer=Writer(), log_interval=10, active=True)
    for it in range(1, 41):
        c.step(it, it * GBS)
    state = json.loads(json.dumps(c.state_dict()))
    assert state["format"] == "neox_epoch.mcore.counters/1" and state["stage"] == "s2"
    assert state["samples"] == {"a": 124 + 15, "b": 21, "c": 0}  # 36 samples into s2: 60:84 of a and b
    fp = state["fingerprint"]
    assert [s["name"] for s in fp["sources"]] == ["a", "b", "c"] and fp["seed"] == 1234 and fp["seq_length"] == 32
    recs = [json.loads(line) for line in (run / JSONL_NAME).read_text().splitlines()]
    starts = [r for r in recs if r["event"] == "stage_start"]
    assert [(r["stage"], r["name"], r["iteration"], r["planned_iteration"], r["consumed_samples"]) for r in starts] == [
        (2, "s2", 32, 31, 128)
    ]
    assert starts[0]["sources"]["a"] == {"samples": 124, "passes": round(124 / 123, 6), "pass": 2}
    assert [(r["stage"], r["stage_name"]) for r in recs if r["event"] == "counters"] == [
        (1, "s1"),
        (1, "s1"),
        (1, "s1"),
        (2, "s2"),
    ]
    assert ("neox_epoch/stage", 2.0, 32) in scalars
    # a's pass 2 starts at its 124th draw, the last sample of stage 1 (blend position 123)
    assert ("a", 2, 123) in c.pass_starts()
    # the report page shows the stage (and its JSON lists it)
    from neox_epoch.cli import main

    assert main(["report", str(run), "--json", "--html", str(tmp_path / "report.html")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["stages"] == {"started": [{"iteration": 32, "stage": 2, "name": "s2"}]}
    assert "<h2>Stages</h2>" in (tmp_path / "report.html").read_text()

    # resume on the same data: exact continuation through the end; cumulative passes = the plan
    again = live_counters(staged, setup, active=False)
    again.load_state_dict(state)
    for it in range(41, 126):
        again.step(it, it * GBS)
    final = again.final()
    assert {k: v["samples"] for k, v in final["sources"].items()} == {"a": 184, "b": 164, "c": 152}
    assert {k: v["passes"] for k, v in final["sources"].items()} == {"a": round(184 / 123, 6), "b": 2.0, "c": 2.0}
    assert final["complete"] is True

    # a later stage changed (s3: c 1 instead of 2): not what the checkpoint trained, the resume goes on
    later = {"stages": [*ISSUE["stages"][:2], {"name": "s3", "passes": {"b": 1, "c": 1}}]}
    setup2 = exact_stages(config, later, GBS)
    live_counters(build_stages(setup2), setup2, active=False).load_state_dict(state)

    # stage 2 changed (the checkpoint is in it): refused in one line
    changed = {"stages": [ISSUE["stages"][0], {"name": "s2", "passes": {"a": 1, "b": 1}}, ISSUE["stages"][2]]}
    setup3 = exact_stages(config, changed, GBS)
    with pytest.raises(CountersStateError) as err:
        live_counters(build_stages(setup3), setup3, active=False).load_state_dict(state)
    assert str(err.value).startswith("counters state: the data changed since the checkpoint: stage 2 ")
    assert "\n" not in str(err.value)

    # resume-check prints the fingerprint comparison (from the run log's checkpoint record, the run's cache)
    from neox_epoch.resume.mcore import fingerprint_lines

    cache = str(tmp_path / "cache")
    assert fingerprint_lines(state, cache) == (
        [],
        ["data fingerprint: unchanged since the checkpoint (sources a, b, c, seq_length 32, seed 1234, 3 stages)"],
    )
    ds_config = tmp_path / "ds.json"
    ds_config.write_text(
        json.dumps({"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1})
    )

    # another corpus under the same name: refused, naming the source and the numbers
    write_random_corpus(corpora["b"], 9, 30)
    assert fingerprint_lines(state, cache) == (
        [
            "data-changed: the data changed since the checkpoint: source 'b' tokens "
            "2,639 -> 3,465 (the counters refuse this resume unless "
            "data_change_intended)"
        ],
        [],
    )
    capsys.readouterr()
    assert main(["resume-check", str(run), str(ds_config), "--world-size", "1", "--cache", cache, "--json"]) == 1
    checked = json.loads(capsys.readouterr().out)
    assert checked["findings"][0].startswith("data-changed: the data changed since the checkpoint: source 'b' tokens")
    assert checked["notes"][-1].startswith("a staged run (saved in stage s2)")
    setup4 = exact_stages(config, ISSUE, GBS)
    with pytest.raises(CountersStateError) as err:
        live_counters(staged, setup4, active=False).load_state_dict(state)
    assert str(err.value) == (
        "counters state: the data changed since the checkpoint: source 'b' tokens 2,639 -> "
        "3,465; resume on the data the checkpoint trained on, or load_state_dict(state, "
        "data_change_intended=True) if the change is intended"
    )
    # an old state (saved before the fingerprint) is still read
    old = {k: v for k, v in state.items() if k not in ("fingerprint", "stage")}
    live_counters(staged, setup, active=False).load_state_dict(old)


def test_errors_are_one_line(corpora: dict[str, str], tmp_path: Path) -> None:
    config = gpt_config([corpora[n] for n in "abc"], str(tmp_path / "cache"))
    with pytest.raises(
        ConfigError, match=r"^stages: source 'd' is not in the train blend.*the train sources are a, b, c"
    ):
        exact_stages(config, {"stages": [{"name": "x", "passes": {"d": 1}}]}, GBS)
    with pytest.raises(
        PlanError, match=r"^source 'a': the stages ask 1.5 passes \(s1: 1, s2: 0.5\), over max_passes 1; "
    ):
        exact_stages(config, {**ISSUE, "max_passes": 1}, GBS)


def test_blend_per_split_builds_the_same_stages(corpora: dict[str, str], tmp_path: Path) -> None:
    """A config with blend_per_split (train entry only) plans and builds the same stages as blend + split 100,0,0."""
    from megatron.core.datasets.gpt_dataset import GPTDatasetConfig

    init_gloo()
    config = GPTDatasetConfig(
        random_seed=1234,
        sequence_length=32,
        blend_per_split=[([corpora[n] for n in "abc"], None), None, None],
        path_to_cache=str(tmp_path / "cache"),
        tokenizer=null_tokenizer(),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=False,
    )
    per_split = build_stages(exact_stages(config, ISSUE, GBS))
    plain = build_stages(exact_stages(gpt_config([corpora[n] for n in "abc"], str(tmp_path / "cache2")), ISSUE, GBS))
    assert np.array_equal(per_split.dataset_index, plain.dataset_index)
    assert np.array_equal(per_split.dataset_sample_index, plain.dataset_sample_index)
    for i in (0, 200, 499):
        assert np.array_equal(per_split[i]["tokens"], plain[i]["tokens"])


#: issue 35's config (src0 0.5 + 0.5, src1 0.5 + 1.5, src2 1 + 1 over three stages; totals whole passes 1, 2, 2) on
#: the corpora a, b, c
ISSUE_35: dict[str, Any] = {
    "stages": [
        {"name": "warm", "passes": {"a": 0.5, "b": 0.5}},
        {"name": "main", "passes": {"a": 0.5, "c": 1}},
        {"name": "anneal", "passes": {"b": 1.5, "c": 1}},
    ]
}


def test_whole_pass_totals_never_train_a_sample_past_its_passes(corpora: dict[str, str], tmp_path: Path) -> None:
    """Issue 35 on megatron-core: against each source's GPTDataset built independently, every row trained is the
    planned source's sample token for token, each iteration draws only its stage's sources, no sample is trained
    more than its total passes, a source's second pass starts only after every sample of its first; a resume
    inside the middle stage continues to the planned totals, and a rewritten corpus is refused on resume."""
    init_gloo()
    names = ["a", "b", "c"]
    config = gpt_config([corpora[n] for n in names], str(tmp_path / "cache"))
    setup = exact_stages(config, ISSUE_35, GBS)
    staged = build_stages(setup)
    refs = [reference(corpora[n], str(tmp_path / f"ref-{n}")) for n in names]
    per_epoch = [len(r) for r in refs]
    assert [s.samples_per_epoch for s in setup.plan.sources] == per_epoch
    passes = {n: sum(st["passes"].get(n, 0) for st in ISSUE_35["stages"]) for n in names}
    assert passes == {"a": 1, "b": 2, "c": 2}
    which = np.asarray(staged.dataset_index)
    sample = np.asarray(staged.dataset_sample_index)
    first = 0
    for stage, cfg in zip(setup.stages_plan.stages, ISSUE_35["stages"]):
        rows = slice(first, first + stage.samples)
        assert stage.samples % GBS == 0
        # each iteration of the stage draws only the stage's sources
        assert {names[k] for k in np.unique(which[rows]).tolist()} <= set(cfg["passes"]), stage.name
        first += stage.samples
    assert first == len(staged) == setup.train_iters * GBS
    for i in range(0, len(staged), 5):  # the tokens trained are the reference dataset's sample, token for token
        k = int(which[i])
        assert np.array_equal(staged[i]["tokens"], refs[k][int(sample[i])]["tokens"])
    for k, n in enumerate(names):
        order = sample[which == k]
        counts = np.bincount(order, minlength=per_epoch[k])
        assert int(np.max(counts)) <= passes[n], n  # no sample trained more than its passes
        assert len(order) <= passes[n] * per_epoch[k] and len(order) > passes[n] * per_epoch[k] - GBS
        for p in range(-(-len(order) // per_epoch[k])):  # pass p: distinct samples, after pass p - 1 is complete
            chunk = order[p * per_epoch[k] : (p + 1) * per_epoch[k]].tolist()
            assert len(set(chunk)) == len(chunk), (n, p)
    # a resume inside the middle stage continues to the planned totals
    stop = (setup.boundaries[0] + setup.boundaries[1]) // 2
    c = live_counters(staged, setup, active=False)
    for it in range(1, stop + 1):
        c.step(it, it * GBS)
    state = json.loads(json.dumps(c.state_dict()))
    assert state["stage"] == "main"
    again = live_counters(staged, setup, active=False)
    again.load_state_dict(state)
    for it in range(stop + 1, setup.train_iters + 1):
        again.step(it, it * GBS)
    final = again.final()
    totals = {n: int(np.sum(which == k)) for k, n in enumerate(names)}
    assert {k: v["samples"] for k, v in final["sources"].items()} == totals == setup.stages_plan.total_draws()
    # the corpus c rewritten: the resume is refused in one line naming it
    write_random_corpus(corpora["c"], 9, 20)
    rebuilt = exact_stages(config, ISSUE_35, GBS)
    with pytest.raises(CountersStateError) as err:
        live_counters(staged, rebuilt, active=False).load_state_dict(state)
    assert str(err.value).startswith("counters state: the data changed since the checkpoint: source 'c' tokens ")
    assert "\n" not in str(err.value)
