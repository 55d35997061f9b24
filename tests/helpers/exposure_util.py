"""Count token exposure by walking a REAL megatron-core dataset's own index arrays, sample by sample.

A sample covers the ``seq_length`` input tokens it returns (``tokens``; the extra token is a label only).
Used as the ground truth that exact plans are checked against.
"""

from __future__ import annotations

import numpy as np


def gpt_sample_spans(ds, i: int, seq_length: int):  # type: ignore[no-untyped-def]
    """(document id, start, stop) spans of the input tokens of sample ``i`` of a megatron-core GPTDataset."""
    j = int(ds.shuffle_index[i])
    doc_f, off_f = (int(x) for x in ds.sample_index[j])
    doc_l, off_l = (int(x) for x in ds.sample_index[j + 1])
    lengths = ds.dataset.sequence_lengths
    spans = []
    need = seq_length
    d, off = doc_f, off_f
    while need > 0:
        doc = int(ds.document_index[d])
        take = min(int(lengths[doc]) - off, need)
        if take > 0:
            spans.append((doc, off, off + take))
            need -= take
        d, off = d + 1, 0
        if d > doc_l + 1:
            break
    return spans


def count_gpt_exposure(ds, sample_ids, seq_length: int) -> dict[int, np.ndarray]:  # type: ignore[no-untyped-def]
    """Per document id, an array counting how often each token position was an input token."""
    lengths = ds.dataset.sequence_lengths
    counts = {int(d): np.zeros(int(lengths[int(d)]), dtype=np.int64) for d in ds.indices}
    for i in sample_ids:
        for doc, a, b in gpt_sample_spans(ds, int(i), seq_length):
            counts[doc][a:b] += 1
    return counts


def check_tokens(ds, i: int, seq_length: int) -> None:  # type: ignore[no-untyped-def]
    """Cross-check: the spans' tokens equal what the real dataset returns for sample i."""
    spans = gpt_sample_spans(ds, i, seq_length)
    mine = np.concatenate([ds.dataset.get(doc, offset=a, length=b - a) for doc, a, b in spans])
    got = np.asarray(ds[i]["tokens"])
    assert np.array_equal(mine.astype(np.int64), got.astype(np.int64)[: len(mine)]), f"sample {i}: spans disagree"


def histogram(counts: dict[int, np.ndarray]) -> dict[int, int]:
    """{times seen: tokens}."""
    allc = np.concatenate(list(counts.values())) if counts else np.zeros(0, dtype=np.int64)
    vals, n = np.unique(allc, return_counts=True)
    return {int(v): int(c) for v, c in zip(vals, n)}
