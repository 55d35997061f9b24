"""The stage planner (neox_epoch.plan.stages) and what Megatron-LM phases really build (megatron-core 0.19.2)."""

from __future__ import annotations

import pytest

from neox_epoch.errors import ConfigError, PlanError
from neox_epoch.plan.stages import Stage, StagesConfig, plan_stages

#: samples per epoch of the corpora below at seq_length 32, as megatron-core 0.19.2 builds them
#: (write_random_corpus(seed 1, 40 docs), (2, 30), (3, 20); test_megatron_phases_repeat checks them)
EPOCH = {"a": 123, "b": 82, "c": 76}
ISSUE_EXAMPLE = {
    "stages": [
        {"name": "s1", "passes": {"a": 1}},
        {"name": "s2", "passes": {"a": 0.5, "b": 1}},
        {"name": "s3", "passes": {"b": 1, "c": 2}},
    ]
}


def _rows(plan):
    return [
        (
            st.name,
            st.first_iteration,
            st.iterations,
            [(d.source, d.draws, d.start_pass, d.start_offset) for d in st.draws],
        )
        for st in plan.stages
    ]


def test_issue_example_exact_numbers():
    """Stage k continues each source after what earlier stages drew; boundaries on whole batches of 4;
    what rounding adds is said per stage. a: 124 = 123 + 1 (31 batches; a draws again in s2), so stage 2 starts
    a's pass 2 at 1. No source is drawn past its total target (issue 35): a asks 1.5 passes = 184.5 samples and
    draws 184; s2's extra goes to b (drawn again in s3, which owes that much less); s3, the last, is not rounded
    up (it was 59 iterations with c drawn 154 times for 152 asked)."""
    plan = plan_stages(StagesConfig.from_mapping(ISSUE_EXAMPLE), EPOCH, 4)
    assert _rows(plan) == [
        ("s1", 0, 31, [("a", 124, 0, 0)]),
        ("s2", 31, 36, [("a", 60, 1, 1), ("b", 84, 0, 0)]),
        ("s3", 67, 58, [("b", 80, 1, 2), ("c", 152, 0, 0)]),
    ]
    assert plan.train_iters == 125 and plan.train_samples == 500
    assert plan.boundaries == (31, 67)
    assert plan.total_draws() == {"a": 184, "b": 164, "c": 152}
    assert plan.stage_at(30).name == "s1" and plan.stage_at(31).name == "s2" and plan.stage_at(124).name == "s3"
    assert plan.stages[0].notes == (
        "123 samples wanted, 124 drawn (31 whole batches of 4; rounded up, the extra drawn from sources a later "
        "stage draws again)",
        "a: 123 samples due, 124 drawn",
    )
    # the owed half sample of stage 2 (60.5 after stage 1's extra sample) is carried, not lost
    assert plan.stages[1].draw_of("a").wanted == 60.5
    assert plan.stages[2].notes == ()


def test_exact_when_everything_divides():
    """No notes when each stage's samples are whole batches; cumulative passes exact."""
    config = StagesConfig.from_mapping(
        {"stages": [{"name": "x", "passes": {"a": 0.5, "b": 1}}, {"name": "y", "passes": {"a": 0.5, "b": 0.5}}]}
    )
    plan = plan_stages(config, {"a": 40, "b": 20}, 10)
    assert _rows(plan) == [
        ("x", 0, 4, [("a", 20, 0, 0), ("b", 20, 0, 0)]),
        ("y", 4, 3, [("a", 20, 0, 20), ("b", 10, 1, 0)]),
    ]
    assert all(not st.notes for st in plan.stages)
    assert plan.cumulative_passes() == {"a": 1.0, "b": 1.5}


def test_half_passes_do_not_drift():
    """0.5 + 0.5 passes of an odd epoch: 62 then 61 (cumulative rounding), one pass in total, no repeat."""
    config = StagesConfig(stages=(Stage(name="1", passes={"a": 0.5}), Stage(name="2", passes={"a": 0.5})))
    plan = plan_stages(config, {"a": 123}, 1)
    assert [(d.draws, d.start) for st in plan.stages for d in st.draws] == [(62, 0), (61, 62)]
    assert plan.cumulative_passes() == {"a": 1.0}


def test_weights_stage_in_samples_rounds_to_batches():
    """A weights stage of 10 samples at batch 4 becomes 12 (3 batches), split 3:1 by largest remainder."""
    config = StagesConfig.from_mapping(
        {"stages": [{"name": "w", "weights": {"a": 3, "b": 1}, "samples": 10}, {"name": "p", "passes": {"a": 1}}]}
    )
    plan = plan_stages(config, {"a": 20, "b": 20}, 4)
    assert _rows(plan) == [("w", 0, 3, [("a", 9, 0, 0), ("b", 3, 0, 0)]), ("p", 3, 5, [("a", 20, 0, 9)])]
    assert plan.stages[0].notes == ("10 samples asked, 12 drawn (3 whole batches of 4)",)


def test_max_passes_refuses_before_planning():
    """The cap names the source, the value, the cap and the fix."""
    config = StagesConfig.from_mapping({**ISSUE_EXAMPLE, "max_passes": 1.5})
    with pytest.raises(
        PlanError,
        match=r"source 'b': the stages ask 2 passes \(s2: 1, s3: 1\), over max_passes 1.5; .*max_passes: \{b: 2\}",
    ):
        plan_stages(config, EPOCH, 4)
    per_source = StagesConfig.from_mapping({**ISSUE_EXAMPLE, "max_passes": {"c": 1.5}})
    with pytest.raises(PlanError, match=r"source 'c': the stages ask 2 passes \(s3: 2\), over max_passes 1.5"):
        plan_stages(per_source, EPOCH, 4)
    assert plan_stages(StagesConfig.from_mapping({**ISSUE_EXAMPLE, "max_passes": 2}), EPOCH, 4).train_iters == 125


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"stages": []}, "at least one stage"),
        ({"stages": [{"name": "x", "passes": {"a": 1}, "weights": {"a": 1}}]}, "exactly one of 'passes'"),
        ({"stages": [{"name": "x", "weights": {"a": 1}}]}, "exactly one of 'iterations' or 'samples'"),
        ({"stages": [{"name": "x", "passes": {"a": 1}, "iterations": 3}]}, "'passes' fixes the stage's length"),
        ({"stages": [{"name": "x", "passes": {"a": -1}}]}, r"stage 'x'.passes.a: expected a number >= 0, got -1"),
        ({"stages": [{"name": "x", "passes": {"a": 0}}]}, "every target is 0"),
        ({"stages": [{"name": "x", "pases": {"a": 1}}]}, r"unknown key 'pases' \(did you mean \"passes\"\?\)"),
        ({"stages": [{"name": "x", "passes": {"a": 1}}, {"name": "x", "passes": {"a": 1}}]}, "used 2 times"),
        ({"stages": [{"name": "x", "weights": {"a": 1}, "iterations": 2.5}]}, "positive integer, got 2.5"),
        ({"stages": [{"name": "x", "passes": {"a": 1}}], "max_passes": 0}, "max_passes: expected a number > 0"),
    ],
)
def test_config_validates_once(data, match):
    with pytest.raises(ConfigError, match=match):
        StagesConfig.from_mapping(data)


def test_unknown_source_named():
    config = StagesConfig.from_mapping({"stages": [{"name": "x", "passes": {"aa": 1}}]})
    with pytest.raises(ConfigError, match=r"stage 'x': unknown source 'aa' \(did you mean \"a\"\?\)"):
        plan_stages(config, EPOCH, 4)


def test_config_round_trips():
    config = StagesConfig.from_mapping({**ISSUE_EXAMPLE, "max_passes": {"c": 2}})
    assert StagesConfig.from_mapping(config.to_mapping()) == config


@pytest.mark.stack("today", reason="megatron-core 0.19.2 (Megatron-LM core_v0.19.0's phases) needs Python 3.12")
def test_megatron_phases_repeat(tmp_path):
    """What Megatron-LM 0.19 builds per phase (the phase's own samples, loader at the phase's sample 0,
    one seed): a 0.5 pass of a in two phases trains the same 60 samples twice, in the same order, and
    never reaches the other half; the planner continues instead (phase 2 starts at a's sample 62)."""
    pytest.importorskip("megatron.core")
    import torch.distributed as dist
    from mcore_phases import epoch_identities, phase_draws, tokens_of

    from neox_epoch.formats.corpus import write_random_corpus

    prefixes = {}
    for name, seed, docs in (("a", 1, 40), ("b", 2, 30), ("c", 3, 20)):
        prefixes[name] = str(tmp_path / name)
        write_random_corpus(prefixes[name], seed, docs)
    work = str(tmp_path)
    assert {n: len(epoch_identities(p, 32, 1234, work)) for n, p in prefixes.items()} == EPOCH
    a = prefixes["a"]
    phase1 = phase_draws([a], [1.0], 60, 32, 1234, work)[a]
    phase2 = phase_draws([a], [1.0], 60, 32, 1234, work)[a]
    assert phase2 == phase1 and len(set(phase1)) == 60
    assert len(tokens_of(phase1) | tokens_of(phase2)) == 1920  # of a's 3,936: 2,016 tokens never trained
    # mid_level_dataset_surplus does not move the start while the source still builds one epoch
    assert phase_draws([a], [1.0], 60, 32, 1234, work, surplus=0.5)[a] == phase1
    # the issue's stage 2 as a phase: every one of a's 62 draws is a sample phase 1 (124 samples) trained
    first = phase_draws([a], [1.0], 124, 32, 1234, work)[a]
    second = phase_draws([a, prefixes["b"]], [61.5, 82], 144, 32, 1234, work)[a]
    assert len(second) == 62 and set(second) <= set(first)
    plan = plan_stages(
        StagesConfig.from_mapping(
            {"stages": [{"name": "1", "passes": {"a": 0.5}}, {"name": "2", "passes": {"a": 0.5}}]}
        ),
        EPOCH,
        1,
    )
    assert [d.start for st in plan.stages for d in st.draws] == [0, 62]
    dist.destroy_process_group()  # phase_draws joined a 1-process gloo group, as megatron-core's builder expects
