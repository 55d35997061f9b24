"""How often each token of each source was an input token, mapped through the datasets' own index arrays."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from golden.common import WRAP_WARNING
from golden.corpora import Corpus
from golden.neox_setup import capture_fd1


@dataclass
class Source:
    """One GPT2Dataset of a training set, with its corpus and the input-token coverage counts."""

    ds: Any
    corpus: Corpus
    documents: tuple[int, int]
    cover: np.ndarray = field(init=False)
    samples: int = 0
    wrapped: int = 0

    def __post_init__(self) -> None:
        self.cover = np.zeros(self.corpus.tokens.shape[0], dtype=np.int64)

    def positions(self, j: int) -> np.ndarray:
        """Flat corpus positions of the tokens of sample ``j`` of this dataset, the way __getitem__ reads them.

        Past the end of ``shuffle_idx`` NeoX's IndexError handler retries with ``j % len(dataset)``.
        """
        ds = self.ds
        if j >= ds.shuffle_idx.shape[0]:
            self.wrapped += 1
            j = j % len(ds)
        s = int(ds.shuffle_idx[j])
        f, off_f = (int(x) for x in ds.sample_idx[s])
        last, off_l = (int(x) for x in ds.sample_idx[s + 1])
        start = self.corpus.offsets
        doc = [int(d) for d in ds.doc_idx[f : last + 1]]
        if f == last:
            return np.arange(start[doc[0]] + off_f, start[doc[0]] + off_l + 1)
        parts = [np.arange(start[doc[0]] + off_f, start[doc[0] + 1])]
        parts += [np.arange(start[d], start[d + 1]) for d in doc[1:-1]]
        parts.append(np.arange(start[doc[-1]], start[doc[-1]] + off_l + 1))
        return np.concatenate(parts)


def exposure(train: Any, sources: list[Source], blend: Any | None, n: int, seq_length: int, log: str) -> dict[str, Any]:
    """Coverage of each source's split by the inputs of the first ``n`` training samples.

    Every sample's mapped tokens are compared with ``train[i]['text']`` (NeoX's own __getitem__), and
    the number of index wraps the mapping predicts with the number of wrap warnings NeoX printed.
    """
    mismatches = padded = blend_wrapped = 0
    log_start = os.path.getsize(log) if os.path.exists(log) else 0
    with capture_fd1(log):
        for i in range(n):
            if blend is None:
                src, j = sources[0], i
            else:
                b = i
                if b >= len(blend):
                    blend_wrapped += 1
                    b = b % len(blend)
                src, j = sources[int(blend.dataset_index[b])], int(blend.dataset_sample_index[b])
            pos = src.positions(j)[: seq_length + 1]
            expected = np.zeros(seq_length + 1, dtype=np.int64)
            expected[: pos.shape[0]] = src.corpus.tokens[pos]
            padded += int(pos.shape[0] < seq_length + 1)
            if not np.array_equal(train[i]["text"], expected):
                mismatches += 1
            np.add.at(src.cover, pos[:seq_length], 1)
            src.samples += 1
    with open(log, "rb") as f:
        f.seek(log_start)
        neox_warnings = f.read().decode(errors="replace").count(WRAP_WARNING)
    if mismatches:
        raise AssertionError(f"{mismatches} of {n} samples: mapped tokens differ from NeoX's dataset[i]['text']")
    records = []
    for src in sources:
        a, b = src.documents
        cover = src.cover[src.corpus.offsets[a] : src.corpus.offsets[b]]
        outside = int(src.cover.sum() - cover.sum())
        assert outside == 0, "a sample read tokens outside its split"
        hist = np.bincount(cover)
        total = int(cover.shape[0])
        records.append(
            {
                "name": src.ds.name,
                "prefix": src.corpus.spec.label,
                "documents": [a, b],
                "tokens": total,
                "samples": src.samples,
                "wrapped_samples": src.wrapped,
                "input_tokens": int(cover.sum()),
                "histogram": {str(k): int(v) for k, v in enumerate(hist) if v},
                "fraction_unseen": round(float(hist[0]) / total, 6) if total else None,
                "fraction_once": round(float(hist[1]) / total, 6) if total and len(hist) > 1 else 0.0,
                "fraction_twice": round(float(hist[2]) / total, 6) if total and len(hist) > 2 else 0.0,
                "fraction_more": round(float(hist[3:].sum()) / total, 6) if total else None,
                "max_times_seen": int(len(hist) - 1),
            }
        )
    wrapped = blend_wrapped + sum(s.wrapped for s in sources)
    assert neox_warnings == wrapped, f"NeoX printed {neox_warnings} wrap warnings, the mapping expected {wrapped}"
    return {
        "samples": n,
        "seq_length": seq_length,
        "checked_samples": n,
        "padded_samples": padded,
        "blend_wrapped_samples": blend_wrapped,
        "neox_wrap_warnings": neox_warnings,
        "sources": records,
    }
