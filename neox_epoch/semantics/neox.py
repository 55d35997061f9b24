"""GPT-NeoX data semantics (megatron/data/data_utils.py, gpt2_dataset.py, blendable_dataset.py).

Verified against a real NeoX checkout by scripts/neox_golden.py (fixtures in tests/fixtures/neox).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from neox_epoch.errors import PlanError
from neox_epoch.semantics import DatasetBuild, normalize

FRAMEWORK = "neox"
#: the buffer NeoX multiplies every per-source request by in train_data_paths mode
BLEND_BUFFER = 1.005


def split_boundaries(split: str, num_documents: int) -> list[int]:
    """Mirror ``get_train_valid_test_split_``: document boundaries [0, a, b, n] of train/valid/test.

    ',' or '/' separated, padded to 3, normalized; ``idx[i+1] = idx[i] + int(round(s_i * n))``
    (Python's round: half to even), then all shifted so that the end is exactly n.
    """
    if "," in split:
        parts = split.split(",")
    elif "/" in split:
        parts = split.split("/")
    else:
        parts = [split]
    try:
        values = [float(s) for s in parts]
    except ValueError as err:
        raise PlanError(f'split: {split!r} is not a list of numbers; expected e.g. "969,30,1"') from err
    while len(values) < 3:
        values.append(0.0)
    values = values[:3]
    total = sum(values)
    if total <= 0.0 or any(v < 0 for v in values):
        raise PlanError(f'split: {split!r} must have non-negative parts with a positive sum, e.g. "969,30,1"')
    values = [v / total for v in values]
    idx = [0]
    for i, v in enumerate(values):
        idx.append(idx[i] + int(round(v * float(num_documents))))
    diff = idx[-1] - num_documents
    for i in range(1, len(idx)):
        idx[i] -= diff
    return idx


def num_epochs(tokens: int, seq_length: int, num_samples: int) -> int:
    """Mirror ``_num_epochs``: the smallest E with ``(E*T - 1) // seq_length >= num_samples``."""
    if tokens <= 0:
        raise PlanError(f"a split with 0 tokens cannot give {num_samples} samples (NeoX would loop forever)")
    if num_samples <= 0:
        return 1
    # closed form of the loop, then a guard step in each direction
    e = max(1, (num_samples * seq_length + 1 + tokens - 1) // tokens)
    while e > 1 and ((e - 1) * tokens - 1) // seq_length >= num_samples:
        e -= 1
    while (e * tokens - 1) // seq_length < num_samples:
        e += 1
    return e


def samples_per_epoch(tokens: int, seq_length: int) -> int:
    """``(T - 1) // seq_length``: samples one pass gives (each takes seq_length+1 tokens, overlapping by 1)."""
    return max(0, (tokens - 1) // seq_length)


def build(tokens: int, seq_length: int, num_samples: int | None, epochs: int | None = None) -> DatasetBuild:
    """Mirror ``GPT2Dataset``/``_build_index_mappings`` (packed): epochs, samples built and ``len``."""
    if epochs is None:
        if num_samples is None:
            raise PlanError("NeoX needs num_samples or num_epochs for a dataset")
        epochs = num_epochs(tokens, seq_length, num_samples)
    built = (epochs * tokens - 1) // seq_length
    per_epoch = samples_per_epoch(tokens, seq_length)
    formula = (
        f"epochs = smallest E with (E*{tokens} - 1) // {seq_length} >= {num_samples} = {epochs}; "
        f"samples = ({epochs}*{tokens} - 1) // {seq_length} = {built}; len = samples - 1 = {built - 1}"
    )
    return DatasetBuild(
        tokens=tokens,
        samples_per_epoch=per_epoch,
        samples_requested=num_samples,
        epochs=epochs,
        samples_built=built,
        length=built - 1,
        separate_final_epoch=False,
        formula=formula,
    )


def normalized_weights_and_num_samples(
    weights: Sequence[float], num_samples: int | None, buffer: float = BLEND_BUFFER
) -> tuple[list[float], list[int | None]]:
    """Mirror ``get_normalized_weights_and_num_samples``: ``ceil(N * w_i * 1.005)`` with Python-summed weights.

    ``buffer`` is NeoX's hard-coded 1.005; neox-epoch's hooks replace it (1.0, or exact targets).
    """
    total = sum(weights)
    if total <= 0.0:
        raise PlanError(f"train_data_weights: {list(weights)} sum to {total}; expected a positive sum")
    w = [x / total for x in weights]
    if num_samples is None:
        return w, [None for _ in w]
    return w, [int(math.ceil(num_samples * x * buffer)) for x in w]


def weights_by_num_docs(num_docs: Sequence[int], alpha: float = 0.3) -> list[float]:
    """Mirror ``weights_by_num_docs``: p_i = n_i/sum n; q_i ~ p_i^alpha; w_i ~ q_i * (1 - p_i), normalized."""
    if len(num_docs) == 1:
        return [1.0]
    total = sum(num_docs)
    p = [i / total for i in num_docs]
    q = [i**alpha for i in p]
    qs = sum(q)
    q = [i / qs for i in q]
    w = [a * (1 - b) for a, b in zip(q, p)]
    ws = sum(w)
    return [i / ws for i in w]


def eval_sample_counts(train_iters: int, train_batch_size: int, eval_interval: int, eval_iters: int) -> list[int]:
    """Mirror ``build_train_valid_test_data_loaders``: [train, valid, test] samples requested from iterations."""
    return [
        train_iters * train_batch_size,
        (train_iters // eval_interval + 1) * eval_iters * train_batch_size,
        eval_iters * train_batch_size,
    ]


def blend_size(lengths: Sequence[int]) -> int:
    """Mirror ``BlendableDataset``: its size is the sum of the children's ``len``, not the request."""
    return int(sum(lengths))


def blend_weights(weights: Sequence[float]) -> list[float]:
    """The weights ``BlendableDataset``'s greedy sees: normalized in Python (get_normalized_weights_and_num_samples),
    then again with numpy."""
    return normalize(normalized_weights_and_num_samples(weights, None)[0])


def blend_passes(weights: Sequence[float], lengths: Sequence[int], consumed: int) -> tuple[int, list[int], list[int]]:
    """``BlendableDataset`` read for ``consumed`` samples (``index % size`` wraps the blend): the whole passes, each
    source's draws in one whole pass, and in the partial last one."""
    from neox_epoch.semantics.blend import greedy_counts  # (its replay: only for blends)

    size, weights = blend_size(lengths), blend_weights(weights)
    passes, rest = divmod(consumed, size)
    return (
        passes,
        greedy_counts(weights, size) if passes else [0] * len(lengths),
        greedy_counts(weights, rest) if rest else [0] * len(lengths),
    )


def blend_positions(
    weights: Sequence[float], lengths: Sequence[int], draws: Sequence[int | None], consumed: int
) -> list[int | None]:
    """The blend position of each source's draw number ``draws[i]`` (0-based) within the first blend pass and
    the first ``consumed`` samples (None: not there)."""
    from neox_epoch.semantics.blend import greedy_draws  # (its replay: only for blends)

    marks = [(i, int(k) + 1) for i, k in enumerate(draws) if k is not None]
    stop = min(consumed, blend_size(lengths))
    out: list[int | None] = [None] * len(lengths)
    if marks and stop > 0:
        for (i, _), position in zip(marks, greedy_draws(blend_weights(weights), [stop], marks).mark_positions):
            out[i] = int(position) if position >= 0 else None
    return out
