"""resume-check's per-source moves when a blend changes at a resume, against a brute-force replay with
megatron-core's own blending helper (``build_blending_indices``, the compiled one BlendedDataset calls).

For random old and new weights, consumed samples, a start and a run length: the saved run drew
``dataset_index[:consumed]`` of the old blend from each source; the resumed run draws
``dataset_index[start:end]`` of the new one, and its first draw of a source is that source's
``dataset_sample_index`` at its first occurrence there. What resume-check calls skipped (repeated) is the gap
between where the saved run stopped in a source and where the resumed run starts in it.
"""

from __future__ import annotations

import random

import numpy as np
import optional

from neox_epoch.neox.resume_state import TrainBuild
from neox_epoch.resume import LoaderShape, ResumeStart
from neox_epoch.resume_check import NewRun, SavedBuild, deltas


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
        first = np.array([int(new_sample[start:][new_index[start:] == k][0]) if (new_index[start:] == k).any()
                          else int(np.count_nonzero(new_index[:start] == k)) for k in range(n)])
        drawn = np.bincount(new_index[start:end], minlength=n)
        builds = {f"train_{k}": TrainBuild(100, 1, 100) for k in range(n)}
        norm = lambda w: tuple(float(x) for x in np.asarray(w) / np.sum(w))  # noqa: E731
        new = NewRun(LoaderShape(gbs, 1, 1), None, tuple(f"s{k}" for k in range(n)), norm(new_w), builds,  # type: ignore[arg-type]
                     end, False, False)
        saved = SavedBuild(0, norm(old_w), builds, "test")
        got = deltas(new, saved, consumed, ResumeStart(consumed, start, ""), iterations)
        # why: a source the resumed run starts further into than the saved run reached skips the gap; one it
        # starts earlier in draws the gap again; the rest of its draws follow in order
        assert [d.skipped for d in got] == [max(0, int(f - b)) for f, b in zip(first, before)], case
        assert [d.repeated for d in got] == [max(0, int(b - f)) for f, b in zip(first, before)], case
        assert [d.drawn for d in got] == drawn.tolist(), case
