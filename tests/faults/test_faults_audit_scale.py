"""Fault suite, scale: the audit's exposure is exact at any number of draws, its JSON stays small, and a count
past what the frameworks hold is refused in one line.

The truth is an independent count: each dataset index ``j`` of NeoX's ``len`` is drawn ``consumed // len`` times,
plus once more for ``j < consumed % len`` (NeoX wraps its index); sample ``shuffle[j]`` covers the stream tokens
``[s * seq, s * seq + seq)``; a document token's exposure is the sum over its copies in the document index. Counted
with numpy difference arrays (exact in int64 up to 2^62 draws here), not with the audit's code.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from faults_util import cli, neox_cache, refused, tree  # noqa: E402

from tests.audit.test_audit_unit import brute_force, hist, write_neox_index  # noqa: E402

SEQ = 16


def exposure_truth(arr: dict, seq: int, consumed: int) -> dict[int, int]:
    """``{times seen: tokens}`` of a NeoX index drawn ``consumed`` samples (see the module's docstring)."""
    doc, sizes, shuffle, length = arr["doc"], arr["sizes"], arr["shuffle"], arr["S"] - 1
    passes, rest = divmod(consumed, length)
    draws = np.full(length, passes, np.int64)
    draws[:rest] += 1
    end = min(arr["S"] * seq, arr["total"])
    cover = np.zeros(end + seq + 1, np.int64)
    starts = shuffle[:length].astype(np.int64) * seq
    np.add.at(cover, starts, draws)
    np.add.at(cover, starts + seq, -draws)
    per_position = np.cumsum(cover)[:end]
    stream = np.zeros(int(arr["total"]), np.int64)
    stream[:end] = per_position
    first_token = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    tokens = np.zeros(int(sizes.sum()), np.int64)  # every document's tokens, in .idx order
    at = 0
    for d in doc:  # each copy adds its stream positions' coverage to its document's tokens
        n = int(sizes[d])
        tokens[first_token[d] : first_token[d] + n] += stream[at : at + n]
        at += n
    present = np.zeros(int(sizes.sum()), bool)
    for d in np.unique(doc):
        present[first_token[d] : first_token[d] + int(sizes[d])] = True
    values, counts = np.unique(tokens[present], return_counts=True)
    return {int(v): int(c) for v, c in zip(values, counts)}


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict]:
    directory = str(tmp_path_factory.mktemp("scale"))
    rng = np.random.RandomState(7)
    _, arr = write_neox_index(directory, "corpus", [int(n) for n in rng.randint(5, 60, size=40)], SEQ, 2)
    return directory, arr


def audit_tokens(directory: str, consumed: int) -> dict[int, int]:
    code, out, err = cli(["audit", directory, "--consumed", str(consumed), "--json", "--no-progress"])
    assert code == 0, err
    return {int(k): v for k, v in json.loads(out)["indexes"][0]["exposure"]["tokens"].items()}


def test_truth_matches_the_walk_token_by_token(index: tuple[str, dict]) -> None:
    """The difference-array count equals the token-by-token walk of tests/audit/test_audit_unit.py where both run."""
    _, arr = index
    for consumed in (1, arr["S"] - 2, 3 * (arr["S"] - 1) + 5):
        assert exposure_truth(arr, SEQ, consumed) == hist(brute_force(arr, SEQ, consumed)[0])


@pytest.mark.parametrize(
    "passes, extra", [(0, 17), (3, 5), (1 << 32, 0), (1 << 32, 9), (None, None), ((1 << 62) // 100, 77)]
)
def test_exposure_exact_at_any_count(index: tuple[str, dict], passes: int | None, extra: int | None) -> None:
    """Up to 2^62 draws: 2^32 passes (said 100% never seen before: the per-sample counts wrapped) and 2^40 samples
    (ran out of memory: one histogram bin per pass) included."""
    directory, arr = index
    length = arr["S"] - 1
    consumed = 1 << 40 if passes is None else passes * length + (extra or 0)
    assert audit_tokens(directory, consumed) == exposure_truth(arr, SEQ, consumed)


def test_neox_built_cache_whole_passes_scale(tmp_path: str) -> None:
    """NeoX's own index (the fixture): 2^32 whole passes over its len 4,620 see each token 2^32 times what one pass
    does (closed form), where main said "100% never seen"."""
    cache = neox_cache(str(tmp_path))
    one = audit_tokens(os.path.join(cache, "corpus_a"), 4620)
    assert one == {1: 126, 2: 147777}
    assert audit_tokens(os.path.join(cache, "corpus_a"), 4620 << 32) == {t << 32: n for t, n in one.items()}


def test_json_bounded_at_a_million_passes(index: tuple[str, dict]) -> None:
    directory, arr = index
    consumed = 10**6 * (arr["S"] - 1) + 3
    code, out, err = cli(["audit", directory, "--consumed", str(consumed), "--json", "--no-progress"])
    assert code == 0, err
    assert len(out) < 20_000
    tokens = json.loads(out)["indexes"][0]["exposure"]["tokens"]
    assert {int(k): v for k, v in tokens.items()} == exposure_truth(arr, SEQ, consumed)


def test_past_int64_refused(index: tuple[str, dict]) -> None:
    directory, _ = index
    before = tree(directory)
    refused(cli(["audit", directory, "--consumed", str(1 << 63)]), "audit", "--consumed", str(1 << 63), "64-bit")
    refused(
        cli(["audit", directory, "--train-iters", str(1 << 40), "--global-batch-size", str(1 << 30)]),
        "audit",
        "--consumed",
        "64-bit",
    )
    assert tree(directory) == before


def test_manifest_past_its_counts_refused(index: tuple[str, dict], tmp_path: str) -> None:
    """The manifest keeps per-sample first and last draws: at 2^40 samples it cannot be unfolded, and says so."""
    directory, _ = index
    before = tree(directory)
    out = os.path.join(str(tmp_path), "m.csv")
    refused(
        cli(["audit", directory, "--consumed", str(1 << 40), "--manifest", out, "--no-progress"]),
        "audit",
        "--manifest",
        "draws of a sample",
    )
    assert tree(directory) == before and not os.path.exists(out)
