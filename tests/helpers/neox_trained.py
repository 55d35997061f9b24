"""What GPT-NeoX's model trained on, token by token: the batch recorder's rows mapped to corpus positions.

The recorder (tests/helpers/neox_cpu/batch_recorder.py) writes the seq_length + 1 tokens of every sample each
rank trained on. Here each recorded sample is found among the samples NeoX built for the train split of
each source: NeoX's own index files in the data directory (``doc_idx``/``sample_idx``, every train index
of the prefix, epoch-separated ones included) give, for every built sample, its tokens and the corpus
positions of its input tokens (a sample's last token is only a label: it is the next sample's first
input). A recorded sample is matched by its full token content (129 random tokens from a 500-token
vocabulary: a match is the sample), so the counts below are of what the model consumed, and a recorded
sample that no index holds fails the test.
"""

from __future__ import annotations

import functools
import glob
import os
from dataclasses import dataclass

import numpy as np

from neox_epoch.formats.idx import read_header, sizes_memmap, tokens_memmap


@dataclass(frozen=True)
class Recorded:
    """Rows of one kind (train or eval) from every rank and launch of a run."""

    iterations: np.ndarray
    """1-based training iteration of each sample."""
    ranks: np.ndarray
    texts: np.ndarray
    """(n, seq_length + 1) tokens."""
    launches: np.ndarray
    """Launch number of each row (0, 1, ... in the order the launches ran)."""

    def where(self, mask: np.ndarray) -> Recorded:
        """The rows where ``mask`` is true."""
        return Recorded(self.iterations[mask], self.ranks[mask], self.texts[mask], self.launches[mask])


def read_recorded(launch_dirs: list[str], kind: str, seq_length: int) -> Recorded:
    """All rows of ``kind`` (files ``{kind}-rank{r}.bin``) of each launch's record directory, in launch order."""
    parts = []
    for launch, d in enumerate(launch_dirs):
        for f in sorted(glob.glob(os.path.join(d, f"{kind}-rank*.bin"))):
            rows = np.fromfile(f, dtype=np.int64).reshape(-1, seq_length + 2)
            rank = int(os.path.basename(f)[len(kind) + 5 : -4])
            parts.append((rows, rank, launch))
    if not parts:
        return Recorded(
            np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, seq_length + 1), np.int64), np.zeros(0, np.int64)
        )
    return Recorded(
        np.concatenate([r[:, 0] for r, _, _ in parts]),
        np.concatenate([np.full(r.shape[0], k) for r, k, _ in parts]),
        np.concatenate([r[:, 1:] for r, _, _ in parts]),
        np.concatenate([np.full(r.shape[0], n) for r, _, n in parts]),
    )


@dataclass(frozen=True)
class SourceIndex:
    """The built train samples of one source: token content -> input-token corpus positions."""

    prefix: str
    tokens: int
    samples: dict[bytes, np.ndarray]


@functools.cache
def source_index(prefix: str, split_name: str = "train") -> SourceIndex:
    """Every sample of every ``{prefix}_{split_name}*_doc_idx.npy`` index NeoX built for ``prefix`` (read once per
    prefix and split: the index files do not change after the run)."""
    header = read_header(prefix)
    sizes = np.asarray(sizes_memmap(header), dtype=np.int64)
    tokens = np.asarray(tokens_memmap(header), dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    samples: dict[bytes, np.ndarray] = {}
    stems = sorted(glob.glob(f"{prefix}_{split_name}*_doc_idx.npy"))
    if not stems:
        raise AssertionError(f"no {split_name} index next to {prefix}: NeoX built none")
    for doc_file in stems:
        stream, starts = _stream(doc_file[: -len("_doc_idx.npy")], sizes, offsets)
        for s in range(starts.shape[0] - 1):
            pos = stream[starts[s] : starts[s + 1] + 1]
            samples[tokens[pos].tobytes()] = pos[:-1]
    return SourceIndex(prefix, int(sizes.sum()), samples)


def _stream(stem: str, sizes: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The corpus position of each token of NeoX's index ``stem`` (its documents in doc_idx order), and where each
    sample starts in that stream."""
    doc_idx = np.load(stem + "_doc_idx.npy").astype(np.int64)
    sample_idx = np.load(stem + "_sample_idx.npy").astype(np.int64)
    lens = sizes[doc_idx]
    stream = np.repeat(offsets[doc_idx] - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens) + np.arange(
        int(lens.sum()), dtype=np.int64
    )
    return stream, np.concatenate([[0], np.cumsum(lens)])[sample_idx[:, 0]] + sample_idx[:, 1]


def item_texts(prefix: str, stem: str, items: list[int]) -> list[bytes]:
    """The seq_length + 1 tokens of items ``items`` of NeoX's dataset of index ``stem`` (GPT2Dataset: item ``j``
    is sample ``shuffle_idx[j]``), as the recorder stores a row's text."""
    header = read_header(prefix)
    sizes = np.asarray(sizes_memmap(header), dtype=np.int64)
    tokens = np.asarray(tokens_memmap(header), dtype=np.int64)
    stream, starts = _stream(stem, sizes, np.concatenate([[0], np.cumsum(sizes)]))
    shuffle = np.load(stem + "_shuffle_idx.npy").astype(np.int64)
    return [tokens[stream[starts[s] : starts[s + 1] + 1]].tobytes() for s in shuffle[items]]


def drawn_token_counts(prefix: str, stem: str, lo: int, hi: int) -> np.ndarray:
    """Per corpus token of ``prefix``: how often NeoX's dataset of index ``stem`` has it among the input tokens of
    its items ``lo .. hi-1`` (GPT2Dataset: item ``j`` is sample ``shuffle_idx[j]``)."""
    sizes = np.asarray(sizes_memmap(read_header(prefix)), dtype=np.int64)
    stream, starts = _stream(stem, sizes, np.concatenate([[0], np.cumsum(sizes)]))
    counts = np.zeros(int(sizes.sum()), np.int64)
    for sample in np.load(stem + "_shuffle_idx.npy")[lo:hi].astype(np.int64):
        np.add.at(counts, stream[starts[sample] : starts[sample + 1]], 1)
    return counts


@dataclass(frozen=True)
class Exposure:
    """How often each corpus token of each source was an input token of a trained sample."""

    counts: dict[str, np.ndarray]
    """source -> per-token counts over the whole corpus file."""
    source_of_row: np.ndarray
    """Index into the source list of each recorded row."""

    def histogram(self, name: str) -> dict[int, int]:
        h = np.bincount(self.counts[name])
        return {k: int(v) for k, v in enumerate(h) if v}


def exposure(rec: Recorded, sources: dict[str, SourceIndex]) -> Exposure:
    """Map every recorded row to its source and positions; count input tokens per corpus position."""
    names = list(sources)
    counts = {n: np.zeros(s.tokens, dtype=np.int64) for n, s in sources.items()}
    which = np.full(rec.texts.shape[0], -1, dtype=np.int64)
    for row, text in enumerate(rec.texts):
        key = text.tobytes()
        for k, n in enumerate(names):
            pos = sources[n].samples.get(key)
            if pos is not None:
                np.add.at(counts[n], pos, 1)
                which[row] = k
                break
        else:
            raise AssertionError(
                f"recorded sample {row} (iteration {int(rec.iterations[row])}, rank "
                f"{int(rec.ranks[row])}) is in no source's built train index"
            )
    return Exposure(counts, which)


def draws_by_iteration(rec: Recorded, ex: Exposure, source: int, train_iters: int) -> np.ndarray:
    """Cumulative samples of ``source`` trained after each iteration 0..train_iters."""
    per = np.bincount(rec.iterations[ex.source_of_row == source], minlength=train_iters + 1)[: train_iters + 1]
    return np.cumsum(per)


def pass_starts(cumulative: np.ndarray, boundaries: list[int]) -> list[int]:
    """Iteration at which the draw after each boundary (b draws done) is trained."""
    return [int(np.searchsorted(cumulative, b + 1)) for b in boundaries if cumulative[-1] > b]
