"""resume-check's per-source moves when a blend changes at a resume, against a brute-force replay with
megatron-core's own blending helper (``build_blending_indices``, the compiled one BlendedDataset calls).

For random old and new weights, consumed samples, a start and a run length: the saved run drew
``dataset_index[:consumed]`` of the old blend from each source; the resumed run draws
``dataset_index[start:end]`` of the new one, and its first draw of a source is that source's
``dataset_sample_index`` at its first occurrence there. What resume-check calls skipped (repeated) is the gap
between where the saved run stopped in a source and where the resumed run starts in it.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
from typing import Any

import numpy as np
import optional
import pytest

from neox_epoch.resume.model import NewRun, SavedBuild, deltas
from neox_epoch.semantics import TrainBuild
from neox_epoch.semantics.loader import LoaderShape, ResumeStart

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/


def _blend(weights: list[float], size: int) -> tuple[np.ndarray, np.ndarray]:
    from megatron.core.datasets import helpers

    dataset_index = np.zeros(size, dtype=np.int16)
    dataset_sample_index = np.zeros(size, dtype=np.int64)
    normalized = np.asarray(weights, dtype=np.float64) / np.sum(weights)  # megatron-core's utils.normalize
    helpers.build_blending_indices(dataset_index, dataset_sample_index, normalized, len(weights), size, False)
    return dataset_index, dataset_sample_index


@optional.needs("megatron.core")
def test_blend_moves_equal_a_replay_of_megatron_cores_blend() -> None:
    """60 random pairs of 2 to 5 sources, half resumed at the consumed samples (Megatron-LM), half elsewhere (stock
    NeoX): skipped, repeated and drawn-after per source equal the replay."""
    rng = random.Random(20261124)
    for case in range(60):
        n = rng.randint(2, 5)
        old_w = [rng.uniform(0.05, 1.0) for _ in range(n)]
        new_w = [rng.uniform(0.05, 1.0) for _ in range(n)]
        gbs = rng.randint(1, 64)
        consumed, iterations = rng.randint(0, 3000), rng.randint(1, 100)
        # Megatron-LM resumes at consumed_train_samples; stock NeoX elsewhere (iteration x gas % len)
        start = consumed if case % 2 else rng.randint(0, consumed + 500)
        end = start + iterations * gbs
        old_index, _ = _blend(old_w, max(consumed, 1))
        new_index, new_sample = _blend(new_w, end)
        before = np.bincount(old_index[:consumed], minlength=n)
        first = np.array(
            [
                int(new_sample[start:][new_index[start:] == k][0])
                if (new_index[start:] == k).any()
                else int(np.count_nonzero(new_index[:start] == k))
                for k in range(n)
            ]
        )
        drawn = np.bincount(new_index[start:end], minlength=n)
        builds = {f"train_{k}": TrainBuild(100, 1, 100) for k in range(n)}
        norm = lambda w: tuple(float(x) for x in np.asarray(w) / np.sum(w))  # noqa: E731
        new = NewRun(
            LoaderShape(gbs, 1, 1),
            None,
            tuple(f"s{k}" for k in range(n)),
            norm(new_w),
            builds,  # type: ignore[arg-type]
            end,
            False,
            False,
        )
        saved = SavedBuild(0, norm(old_w), builds, "test")
        got = deltas(new, saved, consumed, ResumeStart(consumed, start, ""), iterations)
        # why: a source the resumed run starts further into than the saved run reached skips the gap; one it
        # starts earlier in draws the gap again; the rest of its draws follow in order
        assert [d.skipped for d in got] == [max(0, int(f - b)) for f, b in zip(first, before)], case
        # the repeat is what the resumed run draws again: items first .. first + drawn - 1 below before
        assert [d.repeated for d in got] == [
            max(0, min(int(b), int(f + d)) - int(f)) for f, b, d in zip(first, before, drawn)
        ], case
        assert [d.drawn for d in got] == drawn.tolist(), case


def _neox_blends(tmp_path: Any, cases: list[dict[str, Any]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """NeoX's own BlendableDataset indices for ``cases`` (tests/helpers/neox_cpu/blend_replay.py, in NeoX's venv)."""
    import frameworks

    path = tmp_path / "blends.json"
    path.write_text(json.dumps(cases))
    r = subprocess.run(
        [
            frameworks.neox_python(),
            os.path.join(HERE, "helpers", "neox_cpu", "blend_replay.py"),
            frameworks.neox_dir(),
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return [
        (np.asarray(b["dataset_index"]), np.asarray(b["dataset_sample_index"]))
        for b in json.loads(r.stdout.strip().splitlines()[-1])
    ]


def _drop_cases(count: int, seed: int) -> list[dict[str, Any]]:
    """Random weight changes; every third one drops a source's weight sharply (x 0.01 .. 0.1) with 1 .. 8
    iterations left; the resumed run starts at the consumed samples (the hooks) or elsewhere (stock NeoX)."""
    rng = random.Random(seed)
    out = []
    for case in range(count):
        n = rng.randint(2, 4)
        old_w = [rng.uniform(0.05, 1.0) for _ in range(n)]
        new_w = [rng.uniform(0.05, 1.0) for _ in range(n)]
        iterations = rng.randint(1, 100)
        if case % 3 == 0:
            new_w = list(old_w)
            new_w[rng.randrange(n)] *= rng.uniform(0.01, 0.1)
            iterations = rng.randint(1, 8)
        gbs, consumed = rng.randint(1, 32), rng.randint(1, 2000)
        start = consumed if case % 2 else rng.randint(0, consumed + 300)
        out.append(
            {"old": old_w, "new": new_w, "gbs": gbs, "consumed": consumed, "start": start, "iterations": iterations}
        )
    return out


@pytest.mark.neox
def test_blend_moves_equal_neox_s_own_blend_with_sharp_weight_drops(tmp_path: Any) -> None:
    """The reported case: one source's weight dropped sharply with few iterations left; the saved run drew its
    items 0..33, the resumed run draws 9..18, and resume-check said repeated 25 (more than the 10 it draws).
    On 45 random weight changes (15 sharp drops near the end) replayed with NeoX's own build_blending_indices:
    per source, repeated = the resumed run's items the saved run drew (a set intersection), never more than it
    draws; skipped = the items between where the saved run stopped and the resumed run's first, never drawn;
    a source never both skips and repeats."""
    cases = _drop_cases(45, 20261126)
    jobs = []
    for c in cases:
        jobs += [
            {"weights": c["old"], "size": c["consumed"]},
            {"weights": c["new"], "size": c["start"] + c["iterations"] * c["gbs"]},
        ]
    blends = _neox_blends(tmp_path, jobs)
    for i, c in enumerate(cases):
        (old_index, old_sample), (new_index, new_sample) = blends[2 * i], blends[2 * i + 1]
        n, start = len(c["old"]), c["start"]
        builds = {f"train_{k}": TrainBuild(100, 1, 100) for k in range(n)}
        norm = lambda w: tuple(float(x) for x in np.asarray(w) / np.sum(w))  # noqa: E731
        new = NewRun(
            LoaderShape(c["gbs"], 1, 1),
            None,
            tuple(f"s{k}" for k in range(n)),
            norm(c["new"]),  # type: ignore[arg-type]
            builds,
            start + c["iterations"] * c["gbs"],
            False,
            False,
        )
        got = deltas(
            new,
            SavedBuild(0, norm(c["old"]), builds, "test"),
            c["consumed"],
            ResumeStart(c["consumed"], start, ""),
            c["iterations"],
        )
        for k, d in enumerate(got):
            saved = set(old_sample[old_index == k].tolist())
            resumed = new_sample[start:][new_index[start:] == k].tolist()
            first = resumed[0] if resumed else int(np.count_nonzero(new_index[:start] == k))
            assert saved == set(range(len(saved))), (i, k)  # the saved run drew items 0 .. before - 1
            assert resumed == list(range(first, first + len(resumed))), (i, k)  # then first, first + 1, ...
            assert (d.drawn_before, d.first, d.drawn) == (len(saved), first, len(resumed)), (i, k)
            assert d.repeated == len(saved.intersection(resumed)) <= d.drawn, (i, k, c)
            assert d.skipped == max(0, first - len(saved)), (i, k)
            assert not (d.skipped and d.repeated), (i, k)
