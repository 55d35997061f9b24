"""Per-source draw counts of the first ``c`` positions of a megatron-core train dataset: read from a built blend's
``dataset_index`` (counts at every ``block``-th position plus a ``bincount`` of the rest), or one dataset read in
order."""

from __future__ import annotations

from typing import Any

import numpy as np

from neox_epoch.errors import ConfigError


class BlendCounts:
    """Per-source draw counts of the first ``c`` positions of a built blend, read from its ``dataset_index``."""

    def __init__(self, dataset_index: Any, sources: int, size: int, block: int = 4096) -> None:
        if block <= 0:
            raise ConfigError(f"block: {block}; expected a positive integer")
        self.index = dataset_index
        self.sources = int(sources)
        self.size = int(size)
        self.block = int(block)
        rows = self.size // self.block
        per_block = np.zeros((rows + 1, self.sources), dtype=np.int64)
        step = self.block * max(1, (1 << 22) // self.block)  # ~4M positions per chunk: bounded temporaries
        for first in range(0, rows * self.block, step):
            last = min(first + step, rows * self.block)
            chunk = np.asarray(dataset_index[first:last]).reshape(-1, self.block)
            r0 = first // self.block + 1
            for s in range(self.sources):
                per_block[r0 : r0 + chunk.shape[0], s] = np.count_nonzero(chunk == s, axis=1)
        self.cumulative = np.cumsum(per_block, axis=0)
        """``cumulative[k, s]``: draws of source s among the first ``k * block`` positions."""

    def counts(self, consumed: int) -> list[int]:
        """Draws per source among positions ``0 .. consumed-1`` (O(block))."""
        c = max(0, min(int(consumed), self.size))
        k = c // self.block
        tail = np.bincount(np.asarray(self.index[k * self.block : c], dtype=np.int64), minlength=self.sources)
        return [int(x) for x in self.cumulative[k] + tail[: self.sources]]

    def position_of_draw(self, source: int, draw: int) -> int | None:
        """Blend position of source ``source``'s draw number ``draw`` (0-based), None when it is not drawn."""
        col = self.cumulative[:, source]
        k = int(np.searchsorted(col, draw, side="right")) - 1  # last block start with at most `draw` draws before
        start = k * self.block
        stop = min(start + self.block, self.size)
        hits = np.flatnonzero(np.asarray(self.index[start:stop]) == source)
        j = draw - int(col[k])
        return start + int(hits[j]) if j < len(hits) else None


class DirectCounts:
    """One GPTDataset read in order: position p is the source's draw p."""

    def __init__(self, size: int) -> None:
        self.size = int(size)

    def counts(self, consumed: int) -> list[int]:
        return [max(0, min(int(consumed), self.size))]

    def position_of_draw(self, source: int, draw: int) -> int | None:
        return draw if 0 <= draw < self.size else None
