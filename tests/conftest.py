"""Shared fixtures: tiny real .bin/.idx corpora written with the same layout the frameworks read."""

from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from neox_epoch.corpus import write_corpus, write_random_corpus  # noqa: E402


@pytest.fixture
def corpus(tmp_path):
    """Factory: corpus(name, seed, docs, min_len, max_len) -> prefix of a fresh random corpus."""

    def make(name: str, seed: int = 0, docs: int = 50, min_len: int = 1, max_len: int = 200) -> str:
        prefix = str(tmp_path / name)
        write_random_corpus(prefix, seed, docs, min_len, max_len)
        return prefix

    return make


@pytest.fixture
def fixed_corpus(tmp_path):
    """Factory: fixed_corpus(name, lengths) -> prefix of a corpus with the given document lengths."""
    import numpy as np

    def make(name: str, lengths: list[int]) -> str:
        prefix = str(tmp_path / name)
        write_corpus(prefix, [np.arange(n, dtype=np.int64) % 50000 for n in lengths])
        return prefix

    return make


@pytest.fixture(params=["sparse", "pairs", "records"])
def exposure_mode(request, monkeypatch):  # type: ignore[no-untyped-def]
    """The three ways the C path computes an exposure: "sparse" (the copies overlapping the few samples drawn
    another number of times than most; small test indexes always qualify), "pairs" (every document once or
    twice: each one's exposure at its last copy, what larger consumptions of one or two epochs use) and
    "records" (per-document records and the change log: any other index), forced by switching the ones
    before off."""
    if request.param in ("pairs", "records"):
        monkeypatch.setattr("neox_epoch.audit.validate.SPARSE_SAMPLES", -1)
    if request.param == "records":
        monkeypatch.setattr("neox_epoch.audit.pairs.PAIR_EPOCHS", ())
    return request.param
