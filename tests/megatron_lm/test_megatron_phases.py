"""Megatron-LM phases (--phase-transition-iterations) planned phase by phase, against Megatron-LM 0.19's own code.

Each phase's launch is run through tests/helpers/megatron_lm_truth.py (the 0.19.2 wheel's megatron/training and
core_v0.19.0's
pretrain_gpt.py) with ``args.iteration`` at the phase's transition, as a phase's launch resumes: its
``get_train_valid_test_num_samples``, ``core_gpt_dataset_config_from_args`` and the real
``BlendedMegatronDatasetBuilder``. The phase plan must equal it: the builder's train request, the per-source draws
among the phase's samples (the loader starts at the phase's sample 0), the epochs built, and which phases build a
source in the same order (the real index arrays' digest): those are the phases that train the same samples again.
Corpora and numbers as docs/stages-research.md: a 123, b 82, c 76 samples per epoch at seq_length 32, seed 1234.
"""

from __future__ import annotations

import json
import math
import random
from typing import Any

import frameworks
import pytest
from paths import HELPERS

from neox_epoch.errors import ConfigError, PlanError
from neox_epoch.formats.corpus import write_random_corpus
from neox_epoch.plan.phases import PhasesPlan, exact_phases, phase_report, plan_phases

MODEL = (
    "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --max-position-embeddings 32 --lr 1e-4 "
    "--tokenizer-type NullTokenizer --vocab-size 65000 --seq-length 32 --micro-batch-size 1 --split 100,0,0 "
    "--eval-iters 0 --eval-interval 1000 --seed 1234"
).split()
VERSION = "0.19.2"


@pytest.fixture
def data(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.chdir(tmp_path)
    for name, seed, docs in (("a", 1, 40), ("b", 2, 30), ("c", 3, 20)):
        write_random_corpus(str(tmp_path / name), seed, docs)
    return {n: str(tmp_path / n) for n in "abc"}


def line(*extra: str, gbs: int = 4) -> list[str]:
    return [*MODEL, "--global-batch-size", str(gbs), *extra]


def rows(pp: PhasesPlan) -> list[tuple[Any, ...]]:
    return [
        (
            ph.number,
            ph.first_iteration,
            ph.samples,
            ph.requested,
            [
                (s.name, s.draws, s.epochs_built, s.earlier_draws, s.again, s.again_phase, s.other_order)
                for s in ph.sources
            ],
        )
        for ph in pp.phases
    ]


def issue_phases(d: dict[str, str]) -> PhasesPlan:
    """The issue's stages as Megatron-LM phases (weights = the wanted draws, as docs/stages-research.md ran them)."""
    base = line("--train-samples", "504", "--phase-transition-iterations", "31,67", "--data-path", "1", d["a"])
    return plan_phases(
        base,
        {2: ["--data-path", "61.5", d["a"], "82", d["b"]], 3: ["--data-path", "82", d["b"], "152", d["c"]]},
        VERSION,
    )


def test_issue_phases_numbers(data: dict[str, str]) -> None:
    """Each phase asks for its own samples and draws each source from its sample 0: a's 62 draws in phase 2 are
    another order than phase 1's (2 epochs built there, 1 here); b's first 82 in phase 3 are phase 2's, again."""
    pp = issue_phases(data)
    assert rows(pp) == [
        (1, 0, 124, 124, [("a", 124, 2, 0, 0, None, False)]),
        (2, 31, 144, 144, [("a", 62, 1, 124, 0, None, True), ("b", 82, 2, 0, 0, None, False)]),
        (3, 67, 236, 236, [("b", 83, 2, 82, 82, 2, False), ("c", 153, 3, 0, 0, None, False)]),
    ]
    text = "\n".join(phase_report(pp))
    assert (
        "b: draws 83 (1.012 passes of 82), its samples 0..82 of 2 epoch(s) built; earlier phases drew exactly 1 "
        "whole pass(es), so starting at its sample 0 begins pass 2: a continuation"
    ) in text


def test_half_pass_twice_repeats_and_never_reaches(data: dict[str, str]) -> None:
    pp = plan_phases(
        line("--train-samples", "120", "--phase-transition-iterations", "15", "--data-path", data["a"]), {}, VERSION
    )
    assert rows(pp) == [
        (1, 0, 60, 60, [("a", 60, 1, 0, 0, None, False)]),
        (2, 15, 60, 60, [("a", 60, 1, 60, 60, 1, False)]),
    ]
    assert pp.never_reached() == {"a": 63}


def test_exact_phases_flags(data: dict[str, str]) -> None:
    """Whole passes per phase continue each source; the flags per phase, checked by re-planning the pasted lines."""
    base = line("--train-samples", "504", "--phase-transition-iterations", "31,67", "--data-path", data["a"], gbs=3)
    groups = {2: ["--data-path", data["a"], data["b"]], 3: ["--data-path", data["b"], data["c"]]}
    targets = {1: {"a": 1.0}, 2: {"a": 1.0, "b": 1.0}, 3: {"b": 1.0, "c": 2.0}}
    exact, pp = exact_phases(base, groups, VERSION, targets)
    assert [(p.number, p.iterations, p.samples, p.plan.remainder_samples) for p in exact] == [
        (1, 41, 123, 0),
        (2, 68, 204, 1),
        (3, 78, 234, 0),
    ]
    assert exact[0].flags == "--train-samples 561 --phase-transition-iterations 41,109 --mid-level-dataset-surplus 0"
    assert exact[2].flags.endswith(f"--data-path 82.0 {data['b']} 152.0 {data['c']}")
    assert rows(pp) == [
        (1, 0, 123, 123, [("a", 123, 1, 0, 0, None, False)]),
        (2, 41, 204, 204, [("a", 122, 1, 123, 122, 1, False), ("b", 82, 1, 0, 0, None, False)]),
        (3, 109, 234, 234, [("b", 82, 1, 82, 82, 2, False), ("c", 152, 2, 0, 0, None, False)]),
    ]
    # a fractional pass in a phase that is not the source's last: refused in one line, with the fix
    with pytest.raises(
        PlanError,
        match=r"^--phase 2: a=0.5 passes, and phase 3 draws a again: .* give a whole passes "
        r"in every phase but its last \(a=1\)",
    ):
        exact_phases(
            base,
            {**groups, 3: ["--data-path", data["a"], data["c"]]},
            VERSION,
            {1: {"a": 1.0}, 2: {"a": 0.5, "b": 1.0}, 3: {"a": 0.5, "c": 1.0}},
        )
    # whole passes that are not whole global batches: the remainder would never be reached
    with pytest.raises(PlanError, match=r"^--phase 1: a needs 123 samples .* \(--global-batch-size 3\)"):
        exact_phases(line(*base[len(MODEL) + 2 :], gbs=4), groups, VERSION, targets)


PHASE_CONFIGS = 40


def _random_phases(rng: random.Random, names: list[str]) -> tuple[list[list[str]], dict[int, dict[str, float]], int]:
    """2-4 phases of 1-3 sources; whole passes (1-2) in every phase but a source's last, there any passes; a batch."""
    phases = [rng.sample(names, rng.randint(1, min(3, len(names)))) for _ in range(rng.randint(2, 4))]
    last = {n: k for k, ph in enumerate(phases) for n in ph}
    targets = {
        k + 1: {
            n: rng.choice([0.25, 0.5, 0.75, 1.5, 2, round(rng.uniform(0.1, 2.5), 3)])
            if last[n] == k
            else float(rng.randint(1, 2))
            for n in ph
        }
        for k, ph in enumerate(phases)
    }
    return phases, targets, rng.choice([1, 2, 3, 4, 5, 8, 16])


def _check_exact(
    pp: PhasesPlan, targets: dict[int, dict[str, float]], gbs: int, real: dict[int, list[int]] | None = None
) -> float:
    """No source drawn past its total target; each phase's draws under one global batch from its wanted samples
    (whole passes exactly in every phase but a source's last). ``real``: per phase the draws Megatron-LM's own
    builder made (else the plan's). The largest ``|draws - wanted| / gbs``."""
    spe = {s.name: s.samples_per_epoch for ph in pp.phases for s in ph.sources}
    total = {n: 0.0 for n in spe}
    drawn = dict.fromkeys(spe, 0)
    worst = 0.0
    for ph in pp.phases:
        draws = real[ph.number] if real is not None else [s.draws for s in ph.sources]
        assert ph.samples % gbs == 0 and ph.samples == sum(draws)
        for s, n in zip(ph.sources, draws):
            wanted = targets[ph.number][s.name] * spe[s.name]
            total[s.name] += wanted
            drawn[s.name] += n
            assert abs(n - wanted) < gbs, (ph.number, s.name, n, wanted, gbs)
            if any(s.name in targets[k] for k in range(ph.number + 1, len(pp.phases) + 1)):
                assert n == wanted, (ph.number, s.name)  # a whole pass: the next phase restarts at sample 0
            worst = max(worst, abs(n - wanted) / gbs)
    for name, d in drawn.items():
        assert d <= math.floor(total[name] + 1e-9), (name, d, total[name])
    return worst


def test_random_exact_phases_never_draw_past_their_passes(data: dict[str, str], tmp_path: Any) -> None:
    """Issue 35's rule for Megatron-LM phases in exact mode, on random phase configs through the phase planner (the
    flags pasted into each phase's line and planned again, as Megatron-LM's builder would draw them): a config is
    planned or refused in one line (a whole pass that is not whole global batches), never overshot."""
    write_random_corpus(str(tmp_path / "d"), 4, 25)
    paths = {**data, "d": str(tmp_path / "d")}
    rng = random.Random(35)
    planned, refused, worst = 0, [], 0.0
    for _ in range(PHASE_CONFIGS):
        phases, targets, gbs = _random_phases(rng, list(paths))
        transitions = ",".join(str(10 * k) for k in range(1, len(phases)))
        base = line("--train-samples", "1000", "--phase-transition-iterations", transitions, gbs=gbs)
        groups = {k + 1: ["--data-path", *[paths[n] for n in ph]] for k, ph in enumerate(phases)}
        base += groups.pop(1)
        try:
            _, pp = exact_phases(base, groups, VERSION, targets)
        except PlanError as err:
            known = ("not whole global batches", "less than one global batch")
            assert "\n" not in str(err) and any(k in str(err) for k in known), str(err)
            refused.append(str(err))
            continue
        worst = max(worst, _check_exact(pp, targets, gbs))
        planned += 1
    assert planned + len(refused) == PHASE_CONFIGS and planned >= PHASE_CONFIGS // 2, refused
    assert 0.5 < worst < 1


def test_train_iters_with_phases_is_one_line(data: dict[str, str]) -> None:
    with pytest.raises(Exception) as err:
        plan_phases(
            line("--train-iters", "126", "--phase-transition-iterations", "31,67", "--data-path", data["a"]),
            {},
            VERSION,
        )
    assert "TypeError" in str(err.value) and "--train-samples" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="^--phase 4: the run has 3 phases"):
        plan_phases(
            line("--train-samples", "504", "--phase-transition-iterations", "31,67", "--data-path", data["a"]),
            {4: ["--data-path", data["b"]]},
            VERSION,
        )


def _cases(pp: PhasesPlan) -> list[dict[str, Any]]:
    return [
        {
            "id": f"phase-{ph.number}",
            "argv": list(ph.argv),
            "world_size": 1,
            "iteration": ph.first_iteration,
            "draws_at": ph.samples,
            "build": True,
        }
        for ph in pp.phases
    ]


def _orders(split: dict[str, Any]) -> list[tuple[int, str]]:
    gpts = split["datasets"] if split.get("type") == "BlendedDataset" else [split]
    return [(g["epochs"], g["order"]) for g in gpts]


@pytest.mark.megatron_lm
@frameworks.needs_stack("today")
def test_phase_plans_equal_megatron_lm_0_19(data: dict[str, str], tmp_path: Any) -> None:
    """Every phase of the three phased runs above, run through Megatron-LM 0.19's own training data path."""
    import megatron_lm_env as env

    base = line("--train-samples", "504", "--phase-transition-iterations", "31,67", "--data-path", data["a"], gbs=3)
    targets = {1: {"a": 1.0}, 2: {"a": 1.0, "b": 1.0}, 3: {"b": 1.0, "c": 2.0}}
    exact, exact_pp = exact_phases(
        base,
        {2: ["--data-path", data["a"], data["b"]], 3: ["--data-path", data["b"], data["c"]]},
        VERSION,
        targets,
    )
    plans = {
        "issue": issue_phases(data),
        "exact": exact_pp,
        "half": plan_phases(
            line("--train-samples", "120", "--phase-transition-iterations", "15", "--data-path", data["a"]), {}, VERSION
        ),
    }
    cases = []
    for label, pp in plans.items():
        for case in _cases(pp):
            cases.append({**case, "id": f"{label}-{case['id']}", "cache_dir": str(tmp_path)})
    truth = {c["id"]: c for c in env.run_truth(cases, str(tmp_path / "work"), timeout=300)["cases"]}
    checked = 0
    for label, pp in plans.items():
        orders: dict[tuple[int, str], tuple[int, str]] = {}
        for ph in pp.phases:
            real = truth[f"{label}-phase-{ph.number}"]
            assert real["refusal"] is None, real["refusal"]
            assert real["num_samples"][0] == ph.requested, (label, ph.number)
            assert real["draws_at"] == [s.draws for s in ph.sources], (label, ph.number)
            built = _orders(real["splits"]["train"])
            assert [e for e, _ in built] == [s.epochs_built for s in ph.sources], (label, ph.number)
            for s, order in zip(ph.sources, built):
                orders[(ph.number, s.name)] = order
                if s.again:  # the same samples again: the real index arrays are identical
                    assert s.again_phase is not None and order == orders[(s.again_phase, s.name)]
                if s.other_order:
                    assert all(o != order for (k, n), o in orders.items() if n == s.name and k < ph.number)
            checked += 1
    assert checked == 8
    # the real numbers of docs/stages-research.md: requests 124, 144, 236; b trained again in phase 3
    assert [truth[f"issue-phase-{k}"]["num_samples"][0] for k in (1, 2, 3)] == [124, 144, 236]
    assert json.dumps(truth["exact-phase-3"]["draws_at"]) == "[82, 152]"
    # issue 35's rule on the real builder's draws of the exact phases: no source past its total target, each phase
    # under one global batch from its wanted samples (a's 123 + 122 of 246: phase 2's 205 are not whole batches of 3)
    real = {ph.number: list(truth[f"exact-phase-{ph.number}"]["draws_at"]) for ph in exact_pp.phases}
    assert 0 < _check_exact(exact_pp, targets, 3, real) < 1


@pytest.mark.megatron_lm
@frameworks.needs_stack("today")
def test_resume_check_into_the_next_phase(data: dict[str, str], tmp_path: Any) -> None:
    """A checkpoint Megatron-LM 0.19's own code saved at the transition (iteration 15 of 30, global batch 4),
    resumed into phase 2 with the same --data-path: phase 2 trains phase 1's 60 samples of a again, in the same
    order, from its own dataset's sample 0 (not consumed_train_samples 60), and 63 of a's 123 are never reached."""
    import os
    import subprocess
    import sys

    phased = line("--train-samples", "120", "--phase-transition-iterations", "15", "--data-path", data["a"])
    save = str(tmp_path / "ckpt")
    script = os.path.join(HELPERS, "megatron_lm_checkpoint.py")
    made = subprocess.run(
        [sys.executable, script, save, "15", "1", *phased],
        env=frameworks.megatron_lm_today_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0, made.stderr[-3000:]
    r = subprocess.run(
        [sys.executable, "-m", "neox_epoch.cli", "resume-check", save, *phased, "--world-size", "1", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 1, r.stderr
    out = json.loads(r.stdout)
    assert (out["consumed_samples"], out["start_sample"]) == (60, 0)
    assert out["findings"] == [
        "phase-repeat: a: phase 2 trains 60 of its 60 draws again: phase 1's first 60 samples, in the same order (same "
        "--seed, documents and epochs built; Megatron-LM starts each phase at its sample 0); a continuation would "
        "start at its draw 60 (pass 1, sample 60)",
        "phase-never: a: after phase 2, 63 of its 123 samples are trained by no phase (each drew its first 60 at most)",
    ]
    assert out["notes"][0] == "phase 2 of 2: iterations 15..29, the last phase"


@pytest.mark.megatron_lm
@frameworks.needs_stack("today")
def test_resume_check_into_phase_3_reads_each_phase_command_line(data: dict[str, str], tmp_path: Any) -> None:
    """Three phases (transitions 10 and 20 of 30, global batch 4): phase 1 launched on b, phases 2 and 3 on a;
    Megatron-LM 0.19's own code saved the checkpoints at 10 (phase 1's args) and 20 (phase 2's). Resumed into phase
    3, each earlier phase is planned with its own command line: phase 3 trains phase 2's first 40 samples of a again
    (not phase 1's: phase 1 drew b). With iter_0000010 gone, phase 1 is planned with phase 2's line and a note says
    that is not supported."""
    import os
    import shutil
    import subprocess
    import sys

    common = ("--train-samples", "120", "--phase-transition-iterations", "10,20")
    script = os.path.join(HELPERS, "megatron_lm_checkpoint.py")
    save = str(tmp_path / "ckpt")
    for iteration, prefix in ((10, data["b"]), (20, data["a"])):
        made = subprocess.run(
            [sys.executable, script, save, str(iteration), "1", *line(*common, "--data-path", prefix)],
            env=frameworks.megatron_lm_today_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert made.returncode == 0, made.stderr[-3000:]
    phased = line(*common, "--data-path", data["a"])

    def check() -> dict[str, Any]:
        r = subprocess.run(
            [sys.executable, "-m", "neox_epoch.cli", "resume-check", save, *phased, "--world-size", "1", "--json"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 1, r.stderr
        out = json.loads(r.stdout)
        assert (out["consumed_samples"], out["start_sample"], out["notes"][0]) == (
            80,
            0,
            "phase 3 of 3: iterations 20..29, the last phase",
        )
        return out

    out = check()
    assert out["notes"][1] == (
        "phases 1..2 planned with the command line each was launched with, as the checkpoint "
        "it saved at its end keeps it (phase 1: iter_0000010, phase 2: iter_0000020)"
    )
    assert out["findings"] == [
        "phase-repeat: a: phase 3 trains 40 of its 40 draws again: phase 2's first 40 samples, in the same order (same "
        "--seed, documents and epochs built; Megatron-LM starts each phase at its sample 0); a continuation would "
        "start at its draw 40 (pass 1, sample 40)",
        "phase-never: a: after phase 3, 83 of its 123 samples are trained by no phase (each drew its first 40 at most)",
    ]
    shutil.rmtree(os.path.join(save, "iter_0000010"))
    out = check()
    assert out["notes"][1:3] == [
        "phases 1..2 planned with the command line each was launched with, as the checkpoint it saved at its end keeps "
        "it (phase 2: iter_0000020)",
        "not supported: the command line of a phase whose checkpoint is gone (phase 1's (iter_0000010)): that phase "
        "is planned with the next phase's, so one launched with other data flags is not compared",
    ]
    assert out["findings"] == [
        "phase-repeat: a: phase 3 trains 40 of its 40 draws again: phase 1's first 40 samples, in the same order (same "
        "--seed, documents and epochs built; Megatron-LM starts each phase at its sample 0); a continuation would "
        "start at its draw 80 (pass 1, sample 80)",
        "phase-never: a: after phase 3, 83 of its 123 samples are trained by no phase (each drew its first 40 at most)",
    ]
