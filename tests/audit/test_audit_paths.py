"""The compiled stream pass (neox_epoch._exposure) on shapes its merge must get right: documents of many
samples, draw counts past one byte, both epochs meeting in one chunk, damaged copies; and the JSON
histogram of the times some token was seen."""

from __future__ import annotations

import numpy as np
import pytest

from neox_epoch.audit import exposure
from neox_epoch.audit.audit import AuditOptions, run_audit
from neox_epoch.formats import cache_names as names
from tests.audit.test_audit_unit import brute_force, hist, write_neox_index

pytestmark = pytest.mark.skipif(exposure.kernel is None, reason="neox_epoch._exposure is not built")


def _audit(path: str, consumed: int | None) -> dict:
    return run_audit(names.discover([path]), AuditOptions(consumed=consumed, global_batch_size=3)).to_json()


@pytest.mark.parametrize("consumed", [None, 10])
@pytest.mark.parametrize("damage", ["absent", "irregular"])
def test_document_copies_damage(tmp_path, consumed, damage):
    """A document absent or present another number of times: named, and no exposure."""
    _, arr = write_neox_index(str(tmp_path), "d", [50, 7, 33, 12, 90, 5, 41], 8, 2)
    doc = arr["doc"].copy()
    if damage == "absent":
        doc[doc == 3] = 5  # document 3 gone, document 5 four times: rows still 2 x 7
    else:
        doc[int(np.flatnonzero(doc == 3)[0])] = 5  # document 3 once, document 5 three times
    np.save(arr["base"] + "_doc_idx.npy", doc)
    result = _audit(str(tmp_path), consumed)
    whats = {f["what"] for f in result["indexes"][0]["findings"]}
    # why: "absent" leaves document 3 out; both damages leave a document present another number of times
    assert ("documents of the split" in whats) == (damage == "absent")
    assert "epochs" in whats
    assert result["indexes"][0]["exposure"] is None


@pytest.mark.parametrize("epochs", [1, 2, 3])
@pytest.mark.parametrize("passes", [0.5, 129.5, 300.5])
def test_steps_equal_brute_force(tmp_path, epochs, passes):
    """Documents of 0 to 3 samples, drawn up to 301 times (counts past one byte): the histograms equal the
    token-by-token count."""
    seq = 16
    lengths = np.random.RandomState(7).randint(0, 3 * seq + 1, size=120).tolist()
    _, arr = write_neox_index(str(tmp_path), "w", lengths, seq, epochs)
    consumed = int(passes * (arr["S"] - 1))
    res = run_audit(names.discover([str(tmp_path)]), AuditOptions(consumed=consumed, global_batch_size=3))
    e = res.indexes[0].exposure
    assert e is not None and not res.findings
    counts, _ = brute_force(arr, seq, consumed)
    assert e.tokens == hist(counts)
    withtok = [c for c in counts.values() if c.size]
    assert e.documents == {
        int(k): int(v) for k, v in zip(*np.unique([int(c.min()) for c in withtok], return_counts=True))
    }
    assert e.documents_unseen == sum(1 for c in withtok if c.max() == 0)
    assert e.documents_partial == sum(1 for c in withtok if c.min() != c.max())


def test_both_epochs_in_one_chunk_reversed(tmp_path):
    """One chunk holding both epochs, the second in the reverse order of the first: each document completed
    at its second copy, counted once; equal to the brute force."""
    from neox_epoch.audit import passes
    from neox_epoch.formats.corpus import write_corpus

    documents, seq = 3000, 16
    lengths = np.random.RandomState(3).randint(1, 40, size=documents)
    prefix = str(tmp_path / "same")
    write_corpus(prefix, [np.arange(n, dtype=np.int64) % 50000 for n in lengths])
    doc = np.concatenate((np.arange(documents, dtype=np.int32), np.arange(documents - 1, -1, -1, dtype=np.int32)))
    cum_after = np.cumsum(lengths[doc])
    S = (int(cum_after[-1]) - 1) // seq
    b = np.arange(S + 1, dtype=np.int64) * seq
    p = np.searchsorted(cum_after, b, side="right")
    sample = np.stack([p, b - (cum_after[p] - lengths[doc[p]])], axis=1).astype(np.int32)
    shuffle = np.random.RandomState(4).permutation(S).astype(np.uint32)
    base = f"{prefix}_train_0_indexmap_{S - 3}ns_{seq}sl_1234s_packedpi_ac"
    np.save(base + "_doc_idx.npy", doc)
    np.save(base + "_sample_idx.npy", sample)
    np.save(base + "_shuffle_idx.npy", shuffle)
    assert doc.shape[0] <= passes.STREAM_CHUNK
    res = run_audit(names.discover([str(tmp_path)]), AuditOptions(consumed=S // 3))
    assert [f.what for f in res.findings] == ["document index vs seed"]  # why: the order is the point here
    e = res.indexes[0].exposure
    assert e is not None and e.documents_partial > 0
    arrays = {"doc": doc, "sizes": lengths.astype(np.int64), "S": S, "shuffle": shuffle, "total": int(cum_after[-1])}
    counts, _ = brute_force(arrays, seq, S // 3)
    assert e.tokens == hist(counts)


def test_json_histogram_lists_the_bins_with_tokens(tmp_path):
    """Four documents of 8 tokens, seq 8, one epoch: S = 31 // 8 = 3 samples, NeoX's len 2. Two passes over
    len 2 draw two samples twice (16 tokens) and never the third nor the last document (16 tokens): bin 1
    has no token and is not listed (the JSON stays small at any number of passes)."""
    _, arr = write_neox_index(str(tmp_path), "h", [8, 8, 8, 8], 8, 1)
    assert arr["S"] == 3
    tokens = _audit(str(tmp_path), 2 * (arr["S"] - 1))["indexes"][0]["exposure"]["tokens"]
    assert tokens == {"0": 16, "2": 16}
