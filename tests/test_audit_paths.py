"""The C extension (neox_epoch._exposure) and the numpy fallback give identical audits."""

from __future__ import annotations

import numpy as np
import pytest

from neox_epoch.audit import exposure, names
from neox_epoch.audit.audit import AuditOptions, run_audit
from tests.test_audit_unit import SHAPES, write_neox_index

pytestmark = pytest.mark.skipif(exposure._ext is None, reason="neox_epoch._exposure is not built")


def _audit(path: str, consumed: int | None, rows: list | None = None) -> dict:
    def man(rep, ch) -> None:  # type: ignore[no-untyped-def]
        assert rows is not None
        rows.extend(zip(ch.documents.tolist(), ch.tokens.tolist(), ch.min_exposure.tolist(), ch.max_exposure.tolist(),
                        ch.token_exposures.tolist(), ch.first.tolist(), ch.last.tolist()))

    res = run_audit(names.discover([path]), AuditOptions(consumed=consumed, global_batch_size=3),
                    manifest=man if rows is not None else None)
    return res.to_json()


def _c_equals_numpy(monkeypatch, path: str, consumed: int | None, manifest: bool = False,
                    c_patches: tuple[tuple[str, object], ...] = ()) -> dict:  # type: ignore[no-untyped-def]
    """The audit (and manifest rows) with the C extension (``c_patches``: attributes of the exposure module
    set for that run) equal to the numpy fallback's; returns the JSON."""
    rows_c: list | None = [] if manifest else None
    rows_np: list | None = [] if manifest else None
    with monkeypatch.context() as m:
        for name, value in c_patches:
            m.setattr(exposure, name, value)
        with_c = _audit(path, consumed, rows_c)
    with monkeypatch.context() as m:
        m.setattr(exposure, "_ext", None)
        assert exposure.accelerated() is None
        without = _audit(path, consumed, rows_np)
    assert with_c == without
    assert rows_c == rows_np
    return with_c


@pytest.mark.parametrize("shape", SHAPES + [([3000, 1, 2, 4097, 64, 0, 9000], 64, 4, 1.7)])
@pytest.mark.parametrize("manifest", [False, True])
def test_c_and_numpy_agree(tmp_path, monkeypatch, shape, manifest, exposure_mode):
    lengths, seq, epochs, frac = shape
    _, arr = write_neox_index(str(tmp_path), "p", lengths, seq, epochs)
    consumed = max(1, int(frac * (arr["S"] - 1)))
    for cons in (None, consumed, 1, arr["S"] - 1):
        _c_equals_numpy(monkeypatch, str(tmp_path), cons, manifest)


def test_c_and_numpy_agree_on_damage(tmp_path, monkeypatch):
    _, arr = write_neox_index(str(tmp_path), "d", [50, 7, 33, 12, 90, 5, 41], 8, 2)
    sample = arr["sample"].copy()
    sample[5, 1] += 1  # a boundary off its stream position
    np.save(arr["base"] + "_sample_idx.npy", sample)
    assert _c_equals_numpy(monkeypatch, str(tmp_path), 10)["findings"]
    shuffle = arr["shuffle"].copy()
    shuffle[3] = shuffle[4]  # not a permutation
    np.save(arr["base"] + "_shuffle_idx.npy", shuffle)
    assert _c_equals_numpy(monkeypatch, str(tmp_path), 10)["findings"]


@pytest.fixture
def two_threads():  # type: ignore[no-untyped-def]
    """Split every C loop over two threads, however small (the stream pass from a seeded position)."""
    assert exposure._ext is not None
    old = exposure._ext.set_parallel_min(1)
    yield
    exposure._ext.set_parallel_min(old)


@pytest.mark.parametrize("shape", SHAPES + [([3000, 1, 2, 4097, 64, 0, 9000], 64, 4, 1.7)])
def test_threads_agree_with_numpy(tmp_path, monkeypatch, two_threads, shape, exposure_mode):
    lengths, seq, epochs, frac = shape
    _, arr = write_neox_index(str(tmp_path), "p", lengths, seq, epochs)
    consumed = max(1, int(frac * (arr["S"] - 1)))
    for cons in (None, consumed, arr["S"] - 1):
        _c_equals_numpy(monkeypatch, str(tmp_path), cons, manifest=True)


@pytest.mark.parametrize("shift", [-2, -1, 0, 1, 3])
@pytest.mark.parametrize("change", [1, -1])
def test_threads_agree_on_a_broken_seam(tmp_path, monkeypatch, two_threads, shift, change, exposure_mode):
    """A sample boundary off its position seeds the second thread wrongly (shift 0: the row the seed
    comes from, the first at or past the middle of doc_idx): same findings as numpy."""
    _, arr = write_neox_index(str(tmp_path), "d", [50, 7, 33, 12, 90, 5, 41, 17, 60, 3, 28], 8, 2)
    sample = arr["sample"].copy()
    row = int(np.searchsorted(sample[:, 0], arr["doc"].shape[0] // 2)) + shift
    sample[row, 1] += change if sample[row, 1] + change >= 0 else 1
    np.save(arr["base"] + "_sample_idx.npy", sample)
    for cons in (None, 10):
        assert _c_equals_numpy(monkeypatch, str(tmp_path), cons)["findings"]


@pytest.mark.parametrize("threads", [False, True])
@pytest.mark.parametrize("shape", SHAPES + [([3000, 1, 2, 4097, 64, 0, 9000], 64, 4, 1.7)])
def test_unpacked_log_agrees_with_numpy(tmp_path, monkeypatch, shape, threads):
    """The C log with three integers an entry (offsets too large to pack) gives the same audits."""
    assert exposure._ext is not None
    lengths, seq, epochs, frac = shape
    _, arr = write_neox_index(str(tmp_path), "p", lengths, seq, epochs)
    consumed = max(1, int(frac * (arr["S"] - 1)))
    old = exposure._ext.set_parallel_min(1 if threads else 1 << 40)
    try:
        for cons in (consumed, arr["S"] - 1):
            _c_equals_numpy(monkeypatch, str(tmp_path), cons, manifest=True, c_patches=(("PACK_LOG", False),))
    finally:
        exposure._ext.set_parallel_min(old)


@pytest.mark.parametrize("consumed", [None, 10])
@pytest.mark.parametrize("damage", ["absent", "irregular"])
def test_document_copies_damage_agrees_with_numpy(tmp_path, monkeypatch, consumed, damage, exposure_mode):
    """A validation with the C extension checks the copies by a hash sum of the ids and counts them only
    when it does not match: the same findings as counting them (numpy) and as the records (with consumption)."""
    _, arr = write_neox_index(str(tmp_path), "d", [50, 7, 33, 12, 90, 5, 41], 8, 2)
    doc = arr["doc"].copy()
    a, b = int(np.flatnonzero(doc == 3)[0]), int(np.flatnonzero(doc == 5)[0])
    if damage == "absent":
        doc[doc == 3] = 5  # document 3 gone, document 5 four times: rows still 2 x 7
    else:
        doc[a] = 5  # document 3 once, document 5 three times
    del b
    np.save(arr["base"] + "_doc_idx.npy", doc)
    with_c = _c_equals_numpy(monkeypatch, str(tmp_path), consumed)
    whats = {f["what"] for f in with_c["indexes"][0]["findings"]}
    # why: "absent" leaves document 3 out; both damages leave a document present another number of times
    assert ("documents of the split" in whats) == (damage == "absent")
    assert "epochs" in whats


def test_hash_sums_of_the_extension():
    """perm_hash sums to 0 over a permutation (in any chunking) and not over a damaged one; doc_scan of an
    index holding each id of [lo, hi) E times equals E * mix_range(lo, hi) (mod 2^64), and not when damaged."""
    ext = exposure._ext
    u64 = (1 << 64) - 1
    S = 10_007
    v = np.random.RandomState(3).permutation(S).astype(np.uint32)
    parts = [ext.perm_hash(v[a : a + 999], a, S) for a in range(0, S, 999)]
    assert all(p[0] == -1 for p in parts)
    assert sum(p[1] for p in parts) & u64 == 0 and sum(p[2] for p in parts) & u64 == 0
    w = v.copy()
    w[10] = w[11]
    bad = ext.perm_hash(w, 0, S)
    assert bad[0] == -1 and (bad[1] != 0 or bad[2] != 0)
    w[10] = S  # out of range: its position
    assert ext.perm_hash(w, 0, S)[0] == 10
    lo, hi, E = 17, 5_017, 3
    doc = np.random.RandomState(4).permutation(np.tile(np.arange(lo, hi, dtype=np.int32), E))
    mn, mx, h = ext.doc_scan(doc)
    assert (mn, mx) == (lo, hi - 1) and h == (E * ext.mix_range(lo, hi)) & u64
    doc[0] = doc[1]
    assert ext.doc_scan(doc)[2] != (E * ext.mix_range(lo, hi)) & u64
    counts = np.zeros(hi - lo, dtype=np.uint32)
    ext.count_add(doc, lo, counts)
    assert int(counts.sum()) == doc.shape[0] and int(counts.max()) == E + 1


@pytest.mark.parametrize("passes,extra", [(1, -1), (2, 0), (2, 3), (0, 5)])
def test_sparse_exposure_used_and_equal_to_records(tmp_path, monkeypatch, passes, extra):
    """Whole passes give or take a few samples: the C path takes the sparse computation (checked by a spy),
    and it equals the per-document records' answer and the numpy one."""
    from neox_epoch.audit import validate

    _, arr = write_neox_index(str(tmp_path), "s", [3000, 1, 2, 4097, 64, 0, 9000, 17, 250], 64, 3)
    consumed = max(1, passes * (arr["S"] - 1) + extra)
    calls: list[int] = []
    real = validate.sparse_exposure

    def spy(*a, **k):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(*a, **k)

    with monkeypatch.context() as m:
        m.setattr(validate, "sparse_exposure", spy)
        sparse = _audit(str(tmp_path), consumed)
    assert calls == [1]
    with monkeypatch.context() as m:
        m.setattr(validate, "SPARSE_SAMPLES", -1)
        records = _audit(str(tmp_path), consumed)
    with monkeypatch.context() as m:
        m.setattr(exposure, "_ext", None)
        without = _audit(str(tmp_path), consumed)
    assert sparse == records == without
    assert sparse["indexes"][0]["exposure"]["tokens"]  # why: an exposure was computed, not withheld


@pytest.mark.parametrize("epochs", [1, 2, 3])
@pytest.mark.parametrize("threads", [False, True])
def test_pairs_used_for_one_or_two_copies_and_equal_to_records(tmp_path, monkeypatch, epochs, threads):
    """A consumption that is not whole passes (the sparse computation does not apply) of an index holding each
    document once or twice: the exposure is computed at each document's last copy (checked by a spy); with
    three copies, and with a manifest, the records path is taken instead. All equal the numpy answer."""
    from neox_epoch.audit import pairs

    _, arr = write_neox_index(str(tmp_path), "q", [3000, 1, 2, 4097, 64, 0, 9000, 17, 250, 33, 700], 64, epochs)
    consumed = (arr["S"] - 1) // 2 + 1
    if threads:
        assert exposure._ext is not None
        old = exposure._ext.set_parallel_min(1)
    calls: list[int] = []
    real = pairs.Pairs.report

    def spy(self, consumed):  # type: ignore[no-untyped-def]
        calls.append(consumed)
        return real(self, consumed)

    try:
        with monkeypatch.context() as m:
            m.setattr("neox_epoch.audit.validate.SPARSE_SAMPLES", -1)
            m.setattr(pairs.Pairs, "report", spy)
            paired = _audit(str(tmp_path), consumed)
            assert calls == ([consumed] if epochs < 3 else [])  # why: the path taken depends on the copies only
            rows: list = []
            _audit(str(tmp_path), consumed, rows)
            assert len(calls) == (1 if epochs < 3 else 0)  # why: a manifest needs the records
            m.setattr(pairs, "PAIR_EPOCHS", ())
            records = _audit(str(tmp_path), consumed)
    finally:
        if threads:
            exposure._ext.set_parallel_min(old)
    with monkeypatch.context() as m:
        m.setattr(exposure, "_ext", None)
        without = _audit(str(tmp_path), consumed)
    assert paired == records == without
    assert paired["indexes"][0]["exposure"]["documents_partial"] > 0  # why: a dense case, not a uniform one


def test_make_pairs_applies_only_where_records_hold():
    """The pair records pack a size in 24 bits and a stream position in 40: larger ones, three copies or
    sizes that are not contiguous int32 give None (the records path); else the initial records."""
    from neox_epoch.audit import pairs

    ext = exposure._ext
    assert ext is not None
    sizes = np.array([5, 0, (1 << 24) - 1, 7], dtype=np.int32)
    p = pairs.make_pairs(ext, sizes, 2, int(sizes.sum()), 3)
    assert p is not None and p.rec is not None
    assert p.rec.tolist() == [(((1 << 40) - 1) << 24) | int(z) for z in sizes]
    assert p.hist.shape == (2, 2, 7)  # why: exposures 0..2*3 (two copies, drawn at most 3 times)
    one = pairs.make_pairs(ext, sizes, 1, int(sizes.sum()), 3)
    assert one is not None and one.rec is None and one.hist.shape == (2, 2, 4)
    assert pairs.make_pairs(ext, sizes, 3, int(sizes.sum()), 3) is None
    assert pairs.make_pairs(ext, np.array([5, 1 << 24], dtype=np.int32), 2, 5 + (1 << 24), 1) is None
    assert pairs.make_pairs(ext, np.array([5, -1], dtype=np.int32), 2, 4, 1) is None
    assert pairs.make_pairs(ext, sizes, 2, 1 << 38, 1) is None  # why: stream positions up to 2^39 need the steps bit
    assert pairs.make_pairs(ext, sizes, 2, (1 << 38) - 1, 1) is not None
    assert pairs.make_pairs(ext, sizes.astype(np.int64), 2, int(sizes.sum()), 1) is None
    assert pairs.make_pairs(ext, sizes[::2], 1, 5, 1) is None


@pytest.mark.parametrize("epochs", [1, 2])
@pytest.mark.parametrize("passes", [0.5, 129.5])
@pytest.mark.parametrize("threads", [False, True])
def test_pairs_steps_and_walks_equal_brute_force(tmp_path, monkeypatch, epochs, passes, threads):
    """Documents of 0 to 3 samples (one copy with at most one sample boundary inside keeps its draw counts in
    the record, a longer one its position), drawn up to 130 times (counts past 127 are kept by position):
    the pair path's histograms equal the token-by-token count, and the records path's report."""
    from neox_epoch.audit import pairs
    from tests.test_audit_unit import brute_force, hist

    seq = 16
    lengths = np.random.RandomState(7).randint(0, 3 * seq + 1, size=120).tolist()
    _, arr = write_neox_index(str(tmp_path), "w", lengths, seq, epochs)
    consumed = int(passes * (arr["S"] - 1))
    calls: list[int] = []
    real = pairs.Pairs.report

    def spy(self, consumed):  # type: ignore[no-untyped-def]
        calls.append(consumed)
        return real(self, consumed)

    if threads:
        assert exposure._ext is not None
        old = exposure._ext.set_parallel_min(1)
    try:
        with monkeypatch.context() as m:
            m.setattr("neox_epoch.audit.validate.SPARSE_SAMPLES", -1)
            m.setattr(pairs.Pairs, "report", spy)
            res = run_audit(names.discover([str(tmp_path)]), AuditOptions(consumed=consumed, global_batch_size=3))
            assert calls == [consumed]
            m.setattr(pairs, "PAIR_EPOCHS", ())
            records = _audit(str(tmp_path), consumed)
    finally:
        if threads:
            exposure._ext.set_parallel_min(old)
    assert res.to_json() == records
    e = res.indexes[0].exposure
    assert e is not None and not res.findings
    counts, _ = brute_force(arr, seq, consumed)
    assert e.tokens == hist(counts)
    withtok = [c for c in counts.values() if c.size]
    assert e.documents == {int(k): int(v) for k, v in zip(*np.unique([int(c.min()) for c in withtok], return_counts=True))}
    assert e.documents_unseen == sum(1 for c in withtok if c.max() == 0)
    assert e.documents_partial == sum(1 for c in withtok if c.min() != c.max())
    assert max(e.tokens) >= (128 if passes > 100 else 1)  # why: counts past 127 were exercised


def test_pairs_when_both_threads_meet_the_same_documents(tmp_path, monkeypatch):
    """One chunk holding exactly both epochs, the second in the reverse order of the first: the stream pass's
    two threads (one an epoch) meet in the middle, where both handle the same documents at about the same
    time (a first-copy record then may be stored by the other thread between a read and the compare-and-swap;
    whether that happens depends on timing). Every document's exposure is still counted once: equal to the
    records path."""
    from neox_epoch.audit import pairs, validate
    from neox_epoch.corpus import write_corpus

    D, seq = validate.STREAM_CHUNK // 2, 16
    lengths = np.random.RandomState(3).randint(1, 40, size=D)
    prefix = str(tmp_path / "same")
    write_corpus(prefix, [np.arange(n, dtype=np.int64) % 50000 for n in lengths])
    doc = np.concatenate((np.arange(D, dtype=np.int32), np.arange(D - 1, -1, -1, dtype=np.int32)))
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
    assert exposure._ext is not None
    old = exposure._ext.set_parallel_min(1)
    try:
        with monkeypatch.context() as m:
            m.setattr(validate, "SPARSE_SAMPLES", -1)
            m.setattr(validate, "REGEN_LIMIT", 0)  # not what a seed builds (the order is the point here)
            paired = _audit(str(tmp_path), S // 3)
            m.setattr(pairs, "PAIR_EPOCHS", ())
            records = _audit(str(tmp_path), S // 3)
    finally:
        exposure._ext.set_parallel_min(old)
    assert paired == records
    assert not paired["findings"] and paired["indexes"][0]["exposure"]["documents_partial"] > 0
