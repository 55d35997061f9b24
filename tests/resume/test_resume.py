"""Where a resumed NeoX run starts drawing (neox_epoch.semantics.loader) against GPT-NeoX's own resume code.

Randomized old/new batch shapes: NeoX's real ``shift_and_wrap_data_loaders`` and ``DistributedBatchSampler``
(from the extracted GPT-NeoX tree, in NeoX's venv: tests/helpers/neox_cpu/resume_replay.py) start each resumed loader
exactly where :func:`neox_start` says, and the arithmetic of skipped / repeated positions follows.
"""

from __future__ import annotations

import json
import os
import random
import subprocess

import frameworks
import pytest

from neox_epoch.errors import ConfigError
from neox_epoch.neox.resume_state import ResumeState, decide, read_state, write_state
from neox_epoch.semantics import TrainBuild
from neox_epoch.semantics.loader import LoaderShape, hooked_start, neox_start

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/


def _cases(count: int, seed: int) -> list[dict[str, int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        micro, dp, gas = rng.randint(1, 4), rng.randint(1, 4), rng.randint(1, 4)
        samples = rng.randint(micro * dp, 400)
        out.append({"iteration": rng.randint(0, 300), "micro": micro, "dp": dp, "gas": gas, "samples": samples})
    return out


def _valid_cases(count: int, seed: int) -> list[dict[str, int]]:
    """Resumes with evaluation: a validation dataset of at least one loader batch, evaluated every eval_interval
    iterations to a random end and once after it; ``valid_batches``: the loader batches those evaluations draw."""
    from neox_epoch.semantics.loader import evaluations_after

    rng = random.Random(seed)
    out = []
    for case in _cases(count, seed):
        loader = case["micro"] * case["dp"]
        case.update(
            valid_samples=rng.randint(loader, 300),
            eval_interval=rng.randint(1, 60),
            eval_iters=rng.randint(1, 5),
            end=case["iteration"] + rng.randint(0, 200),
        )
        case["valid_batches"] = (
            evaluations_after(case["iteration"], case["end"], case["eval_interval"]) * case["eval_iters"] * case["gas"]
        )
        out.append(case)
    return out


def _first_iteration(start: int, shape: LoaderShape, samples: int) -> list[int]:
    """Brute force: the loader batches from ``start`` on; past the last whole one NeoX's ``itertools.cycle``
    replays what it yielded, from the resumed loader's first batch (not from batch 0)."""
    batches = samples // shape.loader_batch
    first = start // shape.loader_batch
    out: list[int] = []
    for k in range(shape.gradient_accumulation):
        b = first + k % (batches - first)
        out.extend(range(b * shape.loader_batch, (b + 1) * shape.loader_batch))
    return out


def _replay(tmp_path, cases: list[dict[str, int]]) -> list[dict[str, list[int]]]:  # type: ignore[no-untyped-def]
    """What NeoX's own resume code draws for ``cases`` (tests/helpers/neox_cpu/resume_replay.py, in NeoX's venv)."""
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(cases))
    r = subprocess.run(
        [
            frameworks.neox_python(),
            os.path.join(HERE, "helpers", "neox_cpu", "resume_replay.py"),
            frameworks.neox_dir(),
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, DS_ACCELERATOR="cpu"),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return list(json.loads(r.stdout.strip().splitlines()[-1]))


@pytest.mark.neox
def test_neox_start_equals_neox_s_own_resume(tmp_path):  # type: ignore[no-untyped-def]
    """60 random (iteration, micro, dp, gas, dataset size): the first resumed iteration NeoX's code draws
    starts at neox_start(...).start and is the loader batches from there."""
    cases = _cases(60, seed=13)
    for case, got in zip(cases, _replay(tmp_path, cases), strict=True):
        shape = LoaderShape(case["micro"], case["dp"], case["gas"])
        start = neox_start(case["iteration"], 0, shape, case["samples"]).start
        assert got["train"] == _first_iteration(start, shape, case["samples"]), case


@pytest.mark.neox
def test_neox_valid_spans_equal_neox_s_own_resumed_evaluations(tmp_path):  # type: ignore[no-untyped-def]
    """60 random resumes with evaluation (iteration, batch shape, validation size, eval_interval, eval_iters, the
    run's end): the validation positions NeoX's own shift_and_wrap_data_loaders and itertools.cycle draw for the
    resumed evaluations, in order, are exactly neox_valid_start's resumed spans; the cases reach both a replay
    from a resumed start past the dataset's end and a plain wrap from 0."""
    from neox_epoch.semantics.loader import neox_valid_start

    cases = _valid_cases(60, seed=29)
    kinds = set()
    for case, got in zip(cases, _replay(tmp_path, cases), strict=True):
        shape = LoaderShape(case["micro"], case["dp"], case["gas"])
        evaluation = (case["eval_interval"], case["eval_iters"])
        v = neox_valid_start(
            case["iteration"], shape, evaluation, shape, evaluation, case["valid_samples"], end=case["end"]
        )
        assert v is not None, case
        expected = [p for lo, hi, times in v.spans[1] for _ in range(times) for p in range(lo, hi)]
        assert got["valid"] == expected, case
        kinds.add("replayed" if v.replayed else "wrapped" if len(v.spans[1]) > 1 else "plain")
    assert kinds == {"replayed", "wrapped", "plain"}


def test_batch_doubled_at_a_resume_skips_what_neox_thinks_was_consumed():
    """Old run: 100 iterations of 8 (micro 2 x dp 2 x gas 2) = 800 samples. Resumed with gas 4 (16 per
    iteration): NeoX starts at (100 * 4 % 1000) * 4 = 1600, skipping samples 800..1599; the hooks start at 800."""
    new = LoaderShape(2, 2, 4)
    stock = neox_start(100, 800, new, dataset_samples=4000)  # 1000 loader batches of 4
    assert stock.start == (100 * 4 % 1000) * 4 == 1600 and stock.skipped == (800, 1600) and stock.repeated is None
    hooked = hooked_start(800, new)
    assert hooked.start == 800 and hooked.skipped is None and hooked.repeated is None


def test_batch_halved_repeats_and_a_partial_loader_batch_is_drawn_again():
    """Old: 100 x 16 = 1600 consumed; new gas 1 (4 per iteration): NeoX starts at 100 * 4 = 400 and trains
    400..1599 again. Old 3 x 6 = 18 consumed, new loader batch 4: the hooks start at 16 and repeat 16, 17."""
    stock = neox_start(100, 1600, LoaderShape(2, 2, 1), dataset_samples=4000)
    assert stock.start == 400 and stock.repeated == (400, 1600)
    assert hooked_start(18, LoaderShape(2, 2, 1)).repeated == (16, 18)


def test_bad_shapes_are_one_line_errors():
    with pytest.raises(ConfigError, match="gradient_accumulation: expected a whole number >= 1, found 0"):
        LoaderShape(2, 2, 0)
    with pytest.raises(ConfigError, match="fewer than one loader batch of 8"):
        neox_start(5, 0, LoaderShape(4, 2, 1), dataset_samples=7)


# ---------------------------------------------------------------------------------------------------------
# the state the hooks save beside a NeoX checkpoint, and how a changed batch resumes from it


def _saved(consumed: int = 420, iteration: int = 105) -> ResumeState:
    return ResumeState(
        iteration=iteration,
        consumed_samples=consumed,
        train_batch_size=4,
        loader_batch=4,
        samples_total=980,
        train_iters=245,
        builds={"train_0": TrainBuild(403, 1, 404)},
        drawn=[403, 389, 188],
    )


def test_state_round_trips_through_the_checkpoint_directory(tmp_path):  # type: ignore[no-untyped-def]
    write_state(str(tmp_path), _saved())
    assert read_state(str(tmp_path)) == _saved()
    assert read_state(str(tmp_path / "absent")) is None  # saved without the hooks


def test_a_damaged_state_names_the_file_and_the_way_out(tmp_path):  # type: ignore[no-untyped-def]
    (tmp_path / "neox_epoch_state.json").write_text('{"version": 1, "iteration": 3}')
    with pytest.raises(
        ConfigError, match="neox_epoch_state.json: not a neox-epoch state .*delete it to resume as stock"
    ):
        read_state(str(tmp_path))


def test_doubled_batch_resumes_at_the_consumed_samples_and_ends_with_the_run():
    """420 consumed of 980 at iteration 105, new batch 8 (micro 2 x dp 2 x gas 2): start 420, 560 / 8 = 70
    more iterations -> train_iters 175, nothing skipped, repeated or left over."""
    d = decide(_saved(), LoaderShape(2, 2, 2))
    assert (d.start, d.train_iters, d.findings, d.changed) == (420, 175, (), {"train_batch_size": [4, 8]})


def test_findings_for_what_a_changed_batch_still_cannot_make_exact():
    """400 consumed, left 580: batch 8 leaves 580 % 8 = 4 samples undrawn; loader batch 6 (micro 3 x dp 2)
    starts at 396 and draws 396..399 again."""
    d = decide(_saved(consumed=400, iteration=100), LoaderShape(2, 2, 2))
    assert d.train_iters == 100 + 72 and [f.split(":")[0] for f in d.findings] == ["remainder"]
    assert "the last 4 of the run's 980 samples are not drawn" in d.findings[0]
    d = decide(_saved(consumed=400, iteration=100), LoaderShape(3, 2, 1))
    assert d.start == 396 and d.findings[0].startswith("repeat-partial-batch: samples 396..399 are drawn again")


def test_validation_loader_restart_counts_iteration_times_gas():
    """NeoX evaluated at 50 and 100 (2 x gas 1 batches of 4 each: 16 samples); resumed at 105 with gas 2 it
    restarts at ((105 * 2) // 50) * 2 = batch 8 (sample 32, the real run's test); at an evaluation's own
    iteration with the same gas it continues where the evaluations stopped; past the dataset it wraps."""
    from neox_epoch.semantics.loader import neox_valid_start

    four, eight = LoaderShape(2, 2, 1), LoaderShape(2, 2, 2)
    moved = neox_valid_start(105, four, (50, 2), eight, (50, 2), 49)
    assert moved is not None and (moved.drawn, moved.start) == (16, 32)
    same = neox_valid_start(100, four, (50, 2), four, (50, 2), 49)
    assert same is not None and (same.drawn, same.start) == (16, 16)
    wrapped = neox_valid_start(300, four, (50, 2), four, (50, 2), 49)  # 12 batches: (300 // 50) * 2 = 12 % 12 = 0
    assert wrapped is not None and (wrapped.drawn, wrapped.start, wrapped.continued) == (48, 0, 0)
    assert moved.continued == 16 and same.continued == 16  # where continuing would evaluate next
    assert neox_valid_start(105, four, (50, 0), eight, (50, 2), 49) is None  # the saved run never evaluated


def test_resumed_validation_evaluations_cycle_from_the_loader_start():
    """NeoX wraps its validation loader in itertools.cycle, which replays the launch's first pass: resumed at batch
    15 of 19 (sample 60 of 76), the one evaluation after the last iteration (3 x gas 2 batches of 4) draws 60..75
    and then 60..67 again, never 0..59 (the real run in test_neox_training records exactly these); continuing
    would have drawn 24..47 after the saved run's 0..23."""
    from neox_epoch.semantics.loader import cycle_spans, evaluations_after, neox_valid_start

    four, eight = LoaderShape(2, 2, 1), LoaderShape(2, 2, 2)
    v = neox_valid_start(105, four, (41, 3), eight, (41, 3), 79, end=120, old_valid_samples=79)
    assert v is not None and (v.drawn, v.start, v.continued, v.replayed) == (24, 60, 24, (60, 68))
    assert v.spans == (((0, 24, 1),), ((60, 76, 1), (60, 68, 1)), ((24, 48, 1),))
    assert "itertools.cycle replays the launch's first pass from sample 60" in v.how
    assert evaluations_after(105, 120, 41) == 1 and evaluations_after(100, 246, 41) == 5  # 123, 164, 205, 246, end
    # 25 draws from 10 cycling over 4..11: 10, 11, then 4..11 twice, then 4..10
    assert cycle_spans(10, 25, 4, 12) == ((10, 12, 1), (4, 12, 2), (4, 11, 1))
    assert cycle_spans(0, 5, 0, 8) == ((0, 5, 1),) and cycle_spans(3, 0, 0, 8) == ()
    # from 0 to 300 (8 evaluations of 12, past the 76 sized for 240): the cycle is a plain wrap, nothing replayed
    fresh = neox_valid_start(0, four, (41, 3), four, (41, 3), 79, end=300)
    assert fresh is not None and fresh.replayed is None and fresh.spans[1] == ((0, 76, 1), (0, 20, 1))
