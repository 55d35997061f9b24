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


@pytest.mark.parametrize("shape", SHAPES + [([3000, 1, 2, 4097, 64, 0, 9000], 64, 4, 1.7)])
@pytest.mark.parametrize("manifest", [False, True])
def test_c_and_numpy_agree(tmp_path, monkeypatch, shape, manifest):
    lengths, seq, epochs, frac = shape
    _, arr = write_neox_index(str(tmp_path), "p", lengths, seq, epochs)
    consumed = max(1, int(frac * (arr["S"] - 1)))
    for cons in (None, consumed, 1, arr["S"] - 1):
        rows_c: list | None = [] if manifest else None
        rows_np: list | None = [] if manifest else None
        with_c = _audit(str(tmp_path), cons, rows_c)
        with monkeypatch.context() as m:
            m.setattr(exposure, "_ext", None)
            assert exposure.accelerated() is None
            without = _audit(str(tmp_path), cons, rows_np)
        assert with_c == without
        assert rows_c == rows_np


def test_c_and_numpy_agree_on_damage(tmp_path, monkeypatch):
    _, arr = write_neox_index(str(tmp_path), "d", [50, 7, 33, 12, 90, 5, 41], 8, 2)
    sample = arr["sample"].copy()
    sample[5, 1] += 1  # a boundary off its stream position
    np.save(arr["base"] + "_sample_idx.npy", sample)
    with_c = _audit(str(tmp_path), 10)
    with monkeypatch.context() as m:
        m.setattr(exposure, "_ext", None)
        without = _audit(str(tmp_path), 10)
    assert with_c == without and with_c["findings"]
    shuffle = arr["shuffle"].copy()
    shuffle[3] = shuffle[4]  # not a permutation
    np.save(arr["base"] + "_shuffle_idx.npy", shuffle)
    with_c = _audit(str(tmp_path), 10)
    with monkeypatch.context() as m:
        m.setattr(exposure, "_ext", None)
        without = _audit(str(tmp_path), 10)
    assert with_c == without and with_c["findings"]


@pytest.fixture
def two_threads():  # type: ignore[no-untyped-def]
    """Split every C loop over two threads, however small (the stream pass from a seeded position)."""
    assert exposure._ext is not None
    old = exposure._ext.set_parallel_min(1)
    yield
    exposure._ext.set_parallel_min(old)


@pytest.mark.parametrize("shape", SHAPES + [([3000, 1, 2, 4097, 64, 0, 9000], 64, 4, 1.7)])
def test_threads_agree_with_numpy(tmp_path, monkeypatch, two_threads, shape):
    lengths, seq, epochs, frac = shape
    _, arr = write_neox_index(str(tmp_path), "p", lengths, seq, epochs)
    consumed = max(1, int(frac * (arr["S"] - 1)))
    for cons in (None, consumed, arr["S"] - 1):
        rows_c: list = []
        rows_np: list = []
        with_c = _audit(str(tmp_path), cons, rows_c)
        with monkeypatch.context() as m:
            m.setattr(exposure, "_ext", None)
            without = _audit(str(tmp_path), cons, rows_np)
        assert with_c == without
        assert rows_c == rows_np


@pytest.mark.parametrize("shift", [-2, -1, 0, 1, 3])
@pytest.mark.parametrize("change", [1, -1])
def test_threads_agree_on_a_broken_seam(tmp_path, monkeypatch, two_threads, shift, change):
    """A sample boundary off its position seeds the second thread wrongly (shift 0: the row the seed
    comes from, the first at or past the middle of doc_idx): same findings as numpy."""
    _, arr = write_neox_index(str(tmp_path), "d", [50, 7, 33, 12, 90, 5, 41, 17, 60, 3, 28], 8, 2)
    sample = arr["sample"].copy()
    row = int(np.searchsorted(sample[:, 0], arr["doc"].shape[0] // 2)) + shift
    sample[row, 1] += change if sample[row, 1] + change >= 0 else 1
    np.save(arr["base"] + "_sample_idx.npy", sample)
    for cons in (None, 10):
        with_c = _audit(str(tmp_path), cons)
        with monkeypatch.context() as m:
            m.setattr(exposure, "_ext", None)
            without = _audit(str(tmp_path), cons)
        assert with_c == without and with_c["findings"]


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
            rows_c: list = []
            rows_np: list = []
            with monkeypatch.context() as m:
                m.setattr(exposure, "PACK_LOG", False)
                with_c = _audit(str(tmp_path), cons, rows_c)
            with monkeypatch.context() as m:
                m.setattr(exposure, "_ext", None)
                without = _audit(str(tmp_path), cons, rows_np)
            assert with_c == without
            assert rows_c == rows_np
    finally:
        exposure._ext.set_parallel_min(old)
