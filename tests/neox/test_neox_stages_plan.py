"""Data stages on the NeoX side, without NeoX: the block, `neox-epoch plan` on a staged config, each source's
own order (neox_epoch.semantics.stage_order), the staged counters and the fingerprint rules of a resume.
The real training run is tests/neox/test_neox_stages.py."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import yaml

from neox_epoch.cli import main
from neox_epoch.errors import ConfigError
from neox_epoch.formats import fingerprint as fingerprint_format
from neox_epoch.formats.corpus import random_documents, write_corpus
from neox_epoch.formats.neox_config import EpochBlock
from neox_epoch.neox.counters import PassCounters
from neox_epoch.neox.resume_state import ResumeState, fingerprint_changes, started_stages
from neox_epoch.semantics.neox_index import sample_rows
from neox_epoch.semantics.stage_order import build_passes, draw_order, interleave, samples_per_pass

STAGES = [
    {"name": "one", "passes": {"a": 1}},
    {"name": "two", "passes": {"a": 0.5, "b": 1}},
    {"name": "three", "passes": {"b": 1, "c": 2}},
]


def _corpus(prefix: str, seed: int, per_pass: int, tail: int = 60) -> None:
    total = per_pass * 128 + 1 + tail
    docs, have = [], 0
    for d in random_documents(seed, total // 10, 20, 180, vocab=500):
        docs.append(d[: total - have])
        have += len(docs[-1])
        if have == total:
            break
    write_corpus(prefix, docs, dtype="uint16")


@pytest.fixture()
def staged_config(tmp_path):  # type: ignore[no-untyped-def]
    for k, (name, n) in enumerate({"a": 96, "b": 64, "c": 48}.items()):
        _corpus(str(tmp_path / name), 11 + k, n)
    cfg = {
        "seq_length": 128,
        "train_micro_batch_size_per_gpu": 2,
        "global_num_gpus": 2,
        "num_gpus": 2,
        "train_data_paths": [str(tmp_path / n) for n in "abc"],
        "train_data_weights": [1, 1, 1],
        "valid_data_paths": [str(tmp_path / "a")],
        "test_data_paths": [str(tmp_path / "a")],
        "valid_data_weights": [1],
        "test_data_weights": [1],
        "eval_interval": 1000,
        "eval_iters": 2,
        "neox_epoch": {"stages": STAGES, "max_passes": 2},
    }
    path = tmp_path / "staged.yml"
    path.write_text(json.dumps(cfg))
    return tmp_path, cfg


def _run(args, capsys):  # type: ignore[no-untyped-def]
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_prints_each_stage_and_the_cumulative_passes(staged_config, capsys):  # type: ignore[no-untyped-def]
    tmp, _ = staged_config
    code, out, _ = _run(["plan", str(tmp / "staged.yml")], capsys)
    assert code == 0
    assert "neox_epoch block: 3 stages" in out
    assert "stages: 3, train_iters 92 (global batch 4); boundaries at iterations [24, 52]" in out
    assert "stage 2 'two': iterations 24..52 (28 x 4 = 112 samples)" in out
    assert "  a                         144 samples of 96 per pass = 1.5000 passes (2 built)" in out
    assert "train_iters: (not set) -> 92 (set)" in out  # one train_iters, the schedule over the whole run
    # the train rows as the hooks build them: whole passes, each on its own (no spillover warning)
    rows = [line.split() for line in out.splitlines() if line.startswith("train ")]
    assert [r[1:3] + r[6:11] for r in rows] == [
        ["a", "115", "2", "(sep.)", "192", "144", "1.5000"],
        ["b", "75", "2", "(sep.)", "128", "128", "2.0000"],
        ["c", "59", "2", "(sep.)", "96", "96", "2.0000"],
    ]
    assert "spillover" not in out and "each pass of a source built and shuffled on its own" in out


def test_plan_json_stage_keys(staged_config, capsys):  # type: ignore[no-untyped-def]
    tmp, _ = staged_config
    code, out, _ = _run(["plan", str(tmp / "staged.yml"), "--json"], capsys)
    data = json.loads(out)
    st = data["stages"]
    assert code == 0 and data["train_iters"] == 92
    assert list(st) == [
        "train_iters",
        "global_batch_size",
        "boundaries",
        "samples_per_pass",
        "total_draws",
        "cumulative_passes",
        "passes_built",
        "max_passes",
        "stages",
        "lr_schedule",
    ]
    assert st["boundaries"] == [24, 52] and st["total_draws"] == {"a": 144, "b": 128, "c": 96}
    assert st["stages"][1] == {
        "index": 2,
        "name": "two",
        "first_iteration": 24,
        "end_iteration": 52,
        "iterations": 28,
        "samples": 112,
        "draws": {
            "a": {"draws": 48, "wanted": 48.0, "start": 96, "start_pass": 2, "start_offset": 0, "passes": 0.5},
            "b": {"draws": 64, "wanted": 64.0, "start": 0, "start_pass": 1, "start_offset": 0, "passes": 1.0},
        },
        "cumulative_passes": {"a": 1.5, "b": 1.0, "c": 0.0},
        "notes": [],
    }
    overlay = data["settings"]["neox_overlay"]
    assert overlay["train_iters"] == 92 and "epochs" not in overlay["neox_epoch"]
    assert overlay["neox_epoch"]["targets"] == {"a": 144, "b": 128, "c": 96}


def test_write_config_overlay_plans_the_same_run(staged_config, capsys):  # type: ignore[no-untyped-def]
    tmp, cfg = staged_config
    out_path = tmp / "overlay.yml"
    code, _, _ = _run(["plan", str(tmp / "staged.yml"), "--write-config", str(out_path)], capsys)
    assert code == 0
    overlay = yaml.safe_load(out_path.read_text())
    assert overlay["train_iters"] == 92 and overlay["neox_epoch"]["stages"] == STAGES
    base = {k: v for k, v in cfg.items() if k != "neox_epoch"}
    (tmp / "base.yml").write_text(json.dumps(base))
    code, out, _ = _run(["plan", str(tmp / "base.yml"), str(out_path)], capsys)
    assert code == 0 and "boundaries at iterations [24, 52]" in out


def test_max_passes_refuses_before_anything_is_built(staged_config, capsys):  # type: ignore[no-untyped-def]
    tmp, cfg = staged_config
    cfg = {**cfg, "neox_epoch": {"stages": STAGES, "max_passes": {"c": 1.5}}}
    (tmp / "capped.yml").write_text(json.dumps(cfg))
    code, out, err = _run(["plan", str(tmp / "capped.yml")], capsys)
    assert code == 2 and out == ""
    assert (
        err.strip()
        .splitlines()[-1]
        .endswith(
            "source 'c': the stages ask 2 passes (three: 2), over max_passes 1.5; lower its pass targets (or weights) "
            "or raise max_passes (for this source only: max_passes: {c: 2})"
        )
    )
    cfg = {**cfg, "neox_epoch": {"epochs": {"a": 1, "b": 3, "c": 1}, "max_passes": 2}}
    (tmp / "capped2.yml").write_text(json.dumps(cfg))
    code, _, err = _run(["plan", str(tmp / "capped2.yml")], capsys)
    assert code == 2 and "source 'b': epochs asks 3 passes, over max_passes 2" in err


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"stages": STAGES, "epochs": 1}, "neox_epoch.epochs and stages: give one of them"),
        (
            {"stages": [{"name": "x", "pases": {"a": 1}}]},
            "neox_epoch.stages[0]: unknown key 'pases' (did you mean \"passes\"?)",
        ),
        (
            {"stages": [{"name": "x", "passes": {"a": -1}}]},
            "neox_epoch.stage 'x'.passes.a: expected a number >= 0, got -1",
        ),
        ({"stages": "one"}, "neox_epoch.stages: expected a list of stages, got 'one'"),
        ({"max_passes": 0}, "neox_epoch.max_passes: expected a number > 0, got 0"),
        ({"allow_data_change": "yes"}, "neox_epoch.allow_data_change: expected true or false, found 'yes'"),
    ],
)
def test_block_refuses_bad_stages_in_one_line(block, message):  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError) as err:
        EpochBlock.from_mapping(block, "c.yml")
    assert str(err.value).startswith("c.yml: ") and message in str(err.value) and "\n" not in str(err.value)


def test_block_round_trips_stages():
    block = EpochBlock.from_mapping({"stages": STAGES, "max_passes": {"c": 2}, "allow_data_change": True}, "c.yml")
    again = EpochBlock.from_mapping(block.to_mapping(), "env")
    assert again == block and again.stages_config().to_mapping() == {"stages": STAGES, "max_passes": {"c": 2.0}}


def _item_positions(doc_idx, sample_idx, shuffle, ends, sizes, item):  # type: ignore[no-untyped-def]
    """Corpus positions of item ``item``'s seq_length + 1 tokens, read as GPT2Dataset.__getitem__ reads them."""
    r = int(shuffle[item])
    (f, of), (last, ol) = sample_idx[r], sample_idx[r + 1]
    if f == last:
        d = int(doc_idx[f])
        return list(range(ends[d] + int(of), ends[d] + int(ol) + 1))
    out = list(range(ends[int(doc_idx[f])] + int(of), ends[int(doc_idx[f]) + 1]))
    for i in range(f + 1, last):
        out += list(range(ends[int(doc_idx[i])], ends[int(doc_idx[i]) + 1]))
    return out + list(range(ends[int(doc_idx[last])], ends[int(doc_idx[last])] + int(ol) + 1))


def test_each_pass_is_its_own_epoch_and_does_not_depend_on_how_many_are_built():
    sizes = np.asarray([len(d) for d in random_documents(4, 50, 20, 180)], dtype=np.int32)
    docs = np.arange(50, dtype=np.int32)
    n = samples_per_pass(int(sizes.sum()), 64)
    two = build_passes(docs, sizes, 2, 64, 1234)
    three = build_passes(docs, sizes, 3, 64, 1234)
    assert n == (int(sizes.sum()) - 1) // 64
    assert three[0][:100].tolist() == two[0].tolist() and three[1][: 2 * (n + 1)].tolist() == two[1].tolist()
    assert three[2][: 2 * n].tolist() == two[2][:-1].tolist()
    assert three[2].shape[0] - 1 == 3 * n  # NeoX's len: 3 whole passes
    ends = np.concatenate([[0], np.cumsum(sizes)]).tolist()
    for k in range(3):
        seen = np.zeros(int(sizes.sum()), np.int64)
        for item in range(k * n, (k + 1) * n):
            pos = _item_positions(three[0], three[1], three[2], ends, sizes, item)
            assert len(pos) == 65  # seq_length + 1 tokens
            seen[pos[:-1]] += 1  # the input tokens (the last one is only a label)
        # one pass: every input token at most once, all but the stream's tail exactly once
        assert seen.max() == 1 and int(seen.sum()) == n * 64
    # a pass's rows are NeoX's sample rows of its own document order
    assert three[1][n + 1 : 2 * (n + 1), 1].tolist() == sample_rows(sizes, three[0][50:100], 64, n)[:, 1].tolist()


def test_interleave_and_draw_order_are_exact():
    assert interleave([3, 1]).tolist() == [0, 1, 0, 0] or interleave([3, 1]).tolist() == [0, 0, 1, 0]
    assert np.bincount(interleave([48, 64])).tolist() == [48, 64]
    which, where = draw_order([[4, 0], [2, 2]], [[0, 0], [4, 0]])
    assert which.tolist() == [0, 0, 0, 0, 0, 1, 0, 1]
    assert where.tolist() == [0, 1, 2, 3, 4, 0, 5, 1]


def test_staged_counters_fire_stages_and_passes():
    which, _ = draw_order([[8, 0], [4, 4]], [[0, 0], [8, 0]])
    from neox_epoch.formats.runlog import SourceCounter

    c = PassCounters(
        (SourceCounter("a", 8, (8,), 1.5), SourceCounter("b", 4, (), 1.0)),
        None,
        4,
        4,
        1,
        draw_index=which,
        stages=(("one", 0, 2), ("two", 2, 4)),
    )
    assert c.counts_at(2) == [8, 0] and c.counts_at(3) == [10, 2] and c.counts_at(4) == [12, 4]
    assert [(m.iteration, m.source, m.pass_number) for m in c.markers] == [(3, "a", 2)]
    assert [c.stage_at(i) for i in (1, 2, 3, 4)] == [(1, "one"), (1, "one"), (2, "two"), (2, "two")]
    c.start(2)  # a resume exactly at the boundary: stage two has not started yet
    assert c._next_stage == 1


def _state(iteration: int, fingerprint: fingerprint_format.DataFingerprint, boundaries: list[int]) -> ResumeState:
    return ResumeState(
        iteration=iteration,
        consumed_samples=iteration * 4,
        train_batch_size=4,
        loader_batch=4,
        samples_total=368,
        train_iters=92,
        fingerprint=fingerprint.to_dict(),
        stage_boundaries=boundaries,
    )


def test_fingerprint_allows_changes_to_stages_not_started(staged_config):  # type: ignore[no-untyped-def]
    tmp, _ = staged_config
    prefixes = [str(tmp / n) for n in "abc"]
    plan = {"stages": STAGES, "max_passes": 2.0}
    later = {"stages": [*STAGES[:2], {"name": "three", "passes": {"b": 1, "c": 1}}], "max_passes": 2.0}
    earlier = {"stages": [STAGES[0], {"name": "two", "passes": {"a": 1, "b": 1}}, STAGES[2]], "max_passes": 2.0}
    old = fingerprint_format.fingerprint(prefixes, 128, 1234, plan)
    assert started_stages([0, 24, 52], 40) == 2 and started_stages([0, 24, 52], 52) == 2
    assert started_stages([0, 24, 52], 53) == 3 and started_stages([0, 24, 52], 24) == 1
    # mid-stage 2: stage 3 may change, stage 2 may not
    diffs, note = fingerprint_changes(
        _state(40, old, [0, 24, 52]), fingerprint_format.fingerprint(prefixes, 128, 1234, later)
    )
    assert diffs == [] and "the stages after stage 2 changed" in note
    diffs, _ = fingerprint_changes(
        _state(40, old, [0, 24, 52]), fingerprint_format.fingerprint(prefixes, 128, 1234, earlier)
    )
    assert [str(d) for d in diffs] == [f"stage 2 {STAGES[1]} -> {earlier['stages'][1]}"]
    # exactly at the boundary of stage 2: it has not started, so it may change
    diffs, _ = fingerprint_changes(
        _state(24, old, [0, 24, 52]), fingerprint_format.fingerprint(prefixes, 128, 1234, earlier)
    )
    assert diffs == []
    # a changed corpus is always a difference
    _corpus(str(tmp / "c"), 99, 48, tail=70)
    diffs, _ = fingerprint_changes(
        _state(40, old, [0, 24, 52]), fingerprint_format.fingerprint(prefixes, 128, 1234, plan)
    )
    assert fingerprint_format.message(diffs).startswith("the data changed since the checkpoint: source 'c' idx_bytes")
    assert "source 'c' tokens 6,205 -> 6,215" in fingerprint_format.message(diffs)
    assert os.path.isfile(str(tmp / "c.idx"))


def test_changing_later_stages_keeps_every_draw_before_them():
    """A resume after the plan of later stages changed: the draws of the started stages are the same samples at
    the same positions (stage order and each source's own order), so the resume stays exact."""
    from neox_epoch.plan.stages import StagesConfig, plan_stages

    spe = {"a": 96, "b": 64, "c": 48}

    def order(stages):  # type: ignore[no-untyped-def]
        plan = plan_stages(StagesConfig.from_mapping({"stages": stages}), spe, 4)
        counts = [[st.draw_of(s).draws if st.draw_of(s) else 0 for s in spe] for st in plan.stages]
        starts = [[st.draw_of(s).start if st.draw_of(s) else 0 for s in spe] for st in plan.stages]
        return plan, draw_order(counts, starts)

    plan, (which, where) = order(STAGES)
    later, (which2, where2) = order([*STAGES[:2], {"name": "three", "passes": {"b": 0.5, "c": 3, "a": 0.25}}])
    assert plan.boundaries == later.boundaries == (24, 52)
    cut = 52 * 4  # everything stages one and two draw
    assert which[:cut].tolist() == which2[:cut].tolist() and where[:cut].tolist() == where2[:cut].tolist()
    assert (plan.train_iters, later.train_iters) == (92, 52 + (32 + 144 + 24) // 4)


def test_hooks_stop_a_resume_without_stages_on_changed_data(tmp_path, caplog):  # type: ignore[no-untyped-def]
    """The fingerprint check of the hooks (neox_epoch.neox.hook_resume.check_fingerprint) for a run WITHOUT stages: a
    changed seed stops it in one line naming the change, the checkpoint and the fix; allow_data_change lets it
    through with a logged line; a state saved without a fingerprint resumes with a note."""
    import logging
    from types import SimpleNamespace

    from neox_epoch.errors import DataChangedError
    from neox_epoch.neox import hook_resume, hook_state

    _corpus(str(tmp_path / "a"), 11, 96)
    saved_fp = fingerprint_format.fingerprint([str(tmp_path / "a")], 128, 1234)
    now = fingerprint_format.fingerprint([str(tmp_path / "a")], 128, 4321)

    def state(block: dict, fingerprint: dict | None) -> hook_state.State:  # type: ignore[type-arg]
        st = hook_state.State(hook=SimpleNamespace(block=EpochBlock.from_mapping(block, "x.yml")), modules={})  # type: ignore[arg-type]
        st.saved = ResumeState(
            iteration=60,
            consumed_samples=240,
            train_batch_size=4,
            loader_batch=4,
            samples_total=400,
            train_iters=100,
            fingerprint=fingerprint,
        )
        st.fingerprint = now
        return st

    with pytest.raises(DataChangedError) as err:
        hook_resume.check_fingerprint(state({"epochs": 1}, saved_fp.to_dict()), SimpleNamespace(), "ckpt/global_step60")
    assert str(err.value) == (
        "neox_epoch: the data changed since the checkpoint: seed 1,234 -> 4,321 (global_step60); "
        'resume on the data the checkpoint was trained on, or set "allow_data_change": true in '
        "the neox_epoch block if the change is intended"
    )
    with caplog.at_level(logging.WARNING, logger="neox_epoch"):
        hook_resume.check_fingerprint(
            state({"epochs": 1, "allow_data_change": True}, saved_fp.to_dict()), SimpleNamespace(), "ckpt/global_step60"
        )
        hook_resume.check_fingerprint(state({"epochs": 1}, None), SimpleNamespace(), "ckpt/global_step60")
    text = caplog.text
    assert "seed 1,234 -> 4,321 (global_step60); allow_data_change is set: resuming anyway" in text
    assert "the checkpoint's state (global_step60) holds no data fingerprint" in text


def test_hooks_refuse_a_later_stage_change_that_moves_the_schedule_end():  # type: ignore[no-untyped-def]
    """A staged resume whose later stages changed train_iters (92 -> 80): NeoX's AnnealingLR would assert on the
    checkpoint's other warmup/total iterations, so the hooks stop first, in one line with the three fixes."""
    from types import SimpleNamespace

    from neox_epoch.errors import PlanError
    from neox_epoch.neox import hook_resume

    saved = ResumeState(
        iteration=52, consumed_samples=208, train_batch_size=4, loader_batch=4, samples_total=368, train_iters=92
    )
    args = SimpleNamespace(lr_decay_iters=None, train_batch_size=4)
    with pytest.raises(PlanError) as err:
        hook_resume.check_lr_schedule(args, saved, 80, "with the stages after the checkpoint's changed")
    assert str(err.value) == (
        "neox_epoch: resuming iteration 52 with the stages after the checkpoint's changed moves the end of the run "
        "from "
        "iteration 92 to 80, and NeoX's learning-rate scheduler refuses a checkpoint saved for other total/warmup "
        "iterations; set override_lr_scheduler: true (the schedule ends with the data at 80), "
        "use_checkpoint_lr_scheduler: true (keep the saved one, ending at 92), or lr_decay_iters: N"
    )
    hook_resume.check_lr_schedule(SimpleNamespace(**vars(args), override_lr_scheduler=True), saved, 80, "x")


#: issue 37: three sources of 196, 116 and 154 samples per pass at seq_length 64, global batch 4 (2 x 2 ranks)
ISSUE_37 = [
    {"name": "warm", "passes": {"src0": 0.5, "src1": 0.5}},
    {"name": "main", "passes": {"src0": 0.5, "src2": 1}},
    {"name": "anneal", "passes": {"src1": 1.5, "src2": 1}},
]


def test_issue_37_staged_config_plans_without_one_blend_over_the_run(tmp_path, capsys):  # type: ignore[no-untyped-def]
    """Whole-pass totals (196, 232, 308 = 184 batches of 4) plan; one float-weight blend over those totals (the old
    requirement, which the hooks never draw from) finds no weights on these corpora."""
    from dataclasses import replace

    from neox_epoch.errors import PlanError
    from neox_epoch.formats.neox_config import NeoxConfig
    from neox_epoch.plan.exact import _exact_run
    from neox_epoch.plan.from_neox import plan_input_from_neox

    for k, n in enumerate([196, 116, 154]):
        total = n * 64 + 1 + 30
        docs, have = [], 0
        for d in random_documents(10 + k, total // 10, 20, 180, vocab=500):
            docs.append(d[: total - have])
            have += len(docs[-1])
            if have == total:
                break
        write_corpus(str(tmp_path / f"src{k}"), docs, dtype="uint16")
    paths = [str(tmp_path / f"src{k}") for k in range(3)]
    cfg = {
        "seq_length": 64,
        "train_micro_batch_size_per_gpu": 2,
        "global_num_gpus": 2,
        "num_gpus": 2,
        "train_data_paths": paths,
        "train_data_weights": [1, 1, 1],
        "valid_data_paths": paths[:1],
        "test_data_paths": paths[:1],
        "valid_data_weights": [1],
        "test_data_weights": [1],
        "eval_interval": 1000,
        "eval_iters": 2,
        "neox_epoch": {"stages": ISSUE_37},
    }
    (tmp_path / "staged.yml").write_text(json.dumps(cfg))
    code, out, err = _run(["plan", str(tmp_path / "staged.yml"), "--json"], capsys)
    assert code == 0, err
    st = json.loads(out)["stages"]
    assert st["train_iters"] == 184 and st["boundaries"] == [39, 102]
    assert st["total_draws"] == {"src0": 196, "src1": 232, "src2": 308}
    assert st["cumulative_passes"] == {"src0": 1.0, "src1": 2.0, "src2": 2.0}
    assert all(s["notes"] == [] for s in st["stages"])
    block = EpochBlock.from_mapping({"stages": ISSUE_37}, "neox_epoch")
    inp = plan_input_from_neox(
        NeoxConfig(values={k: v for k, v in cfg.items() if k != "neox_epoch"}, origin={}, block=block)
    )
    with pytest.raises(PlanError, match=r"no float weights found .* exactly \[196, 232, 308\]"):
        _exact_run(
            replace(inp, train_iters=None, train_samples=None), 184, ["src0", "src1", "src2"], [196, 232, 308], 200, {}
        )
