"""Fault suite, races: an index cache rewritten while the audit reads it (a rank 0 rebuilding it: ``np.save`` opens
with "wb", truncating the same inode, then writes it again) gives a finding, never a signal.

60 races at seeded moments, in-process (a SIGBUS would end the test run itself): a thread rewrites one of the cache's
.npy files while ``run_audit`` maps it. Each audit ends with findings ("changed while being read", or what the
half-written file shows) or, when the rewrite fell outside its reads, the exposure; the mapped pages that vanished read
zeros under the guard (util/mapguard) and are counted, never trusted.
"""

from __future__ import annotations

import hashlib
import os
import random
import threading
import time

import numpy as np
import pytest

from neox_epoch.audit.audit import AuditOptions, run_audit
from neox_epoch.formats.cache_names import discover
from tests.audit.test_audit_unit import write_neox_index

RACES = 60


def test_rewrites_during_the_audit_are_findings(tmp_path: str) -> None:
    rng = random.Random(7)
    _, arr = write_neox_index(str(tmp_path), "c", [rng.randint(1, 400) for _ in range(3000)], 16, 2)
    paths = [arr["base"] + f"_{name}_idx.npy" for name in ("doc", "sample", "shuffle")]
    original = {p: open(p, "rb").read() for p in paths}
    options = AuditOptions(consumed=arr["S"] // 2)
    start = time.perf_counter()
    clean = run_audit(discover([str(tmp_path)]), options).indexes[0]
    took = time.perf_counter() - start
    assert not clean.findings and clean.exposure is not None
    kinds: dict[str, int] = {}
    for race in range(RACES):
        target, delay, hold = paths[race % 3], rng.uniform(0, took), rng.uniform(0, took / 4)

        def rewrite(target: str = target, delay: float = delay, hold: float = hold) -> None:
            time.sleep(delay)
            with open(target, "wb") as f:  # (as np.save: truncate the same inode, then write)
                f.flush()
                time.sleep(hold)
                f.write(original[target])

        writer = threading.Thread(target=rewrite)
        writer.start()
        report = run_audit(discover([str(tmp_path)]), options).indexes[0]
        writer.join()
        for found in report.findings:
            kinds[found.what] = kinds.get(found.what, 0) + 1
        assert report.findings or report.exposure == clean.exposure, race
    print(f"races: {kinds}")
    assert kinds.get("changed while being read", 0) >= 5, kinds  # (the races were hit, and said so)
    for p in paths:  # the writer put the same bytes back: a clean audit again
        assert hashlib.sha256(open(p, "rb").read()).digest() == hashlib.sha256(original[p]).digest()
    final = run_audit(discover([str(tmp_path)]), options).indexes[0]
    assert not final.findings and final.exposure == clean.exposure
    assert np.load(paths[0]).shape == arr["doc"].shape


def test_shrunk_mapping_reads_zeros_and_counts(tmp_path: str) -> None:
    """The guard itself: a mapped .npy truncated under it reads zeros past the new end and counts the pages."""
    from neox_epoch.util.mapguard import AVAILABLE, guarded

    path = os.path.join(str(tmp_path), "a.npy")
    np.save(path, np.arange(1 << 20, dtype=np.int64))
    mapped = np.load(path, mmap_mode="r")
    with guarded() as faults:
        with open(path, "r+b") as f:
            f.truncate(3 * 4096)
        total = int(mapped.sum())
        counted = faults()
    if not AVAILABLE:
        pytest.fail(
            "neox_epoch._mapguard is not built: the audit copies instead of mapping (python setup.py build_ext)"
        )
    kept = (3 * 4096 - 128) // 8  # the int64 values left after the 128-byte header
    assert total == sum(range(kept)) and counted == (8 * (1 << 20) + 128 - 1) // 4096 + 1 - 3


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("walker", ["kernel", "numpy"])
@pytest.mark.parametrize("bad_id", [100_000, -3])
def test_ids_changed_after_their_scan_are_a_finding(tmp_path, monkeypatch, threads, walker, bad_id):
    """The race the CI run hit (a segmentation fault, once in 20 runs of the test above): the document index is
    scanned for its id range, then rewritten in place (same inode, same size) before the stream pass reads it again,
    with an id outside that range. The kernel (and numpy's walk) refuse the id; the audit says the file changed
    while being read and gives no exposure, never a signal or a traceback."""
    from neox_epoch.audit import exposure, exposure_numpy, passes, validate

    _, arr = write_neox_index(str(tmp_path), "c", [(i * 29) % 53 + 1 for i in range(300)], 16, 2)
    doc_path = arr["base"] + "_doc_idx.npy"
    real_scan = validate.scan_documents

    def scan_then_rewrite(*args, **kwargs):  # (what a rank 0 rebuilding the file does between the two reads)
        found = real_scan(*args, **kwargs)
        changed = arr["doc"].copy()
        changed[len(changed) // 2] = bad_id
        with open(doc_path, "r+b") as f:
            f.seek(os.path.getsize(doc_path) - changed.nbytes)
            f.write(changed.tobytes())
        return found

    monkeypatch.setattr(validate, "scan_documents", scan_then_rewrite)
    if walker == "numpy":
        monkeypatch.setattr(exposure, "kernel", exposure_numpy)
    else:
        assert exposure.COMPILED, "neox_epoch._exposure is not built (python setup.py build_ext --inplace)"
    if threads == 2:
        monkeypatch.setattr(passes, "SPLIT_MIN", 2)
    report = run_audit(discover([str(tmp_path)]), AuditOptions(consumed=arr["S"] // 2)).indexes[0]
    assert report.exposure is None
    found = {f.what: f for f in report.findings}
    assert set(found) == {"document ids", "changed while being read"}, found
    assert f"document id {bad_id} at entry" in found["document ids"].found
    assert found["document ids"].path == doc_path


@pytest.mark.parametrize("walker", ["kernel", "numpy"])
def test_stream_refuses_an_id_outside_the_documents(walker):
    """The stream pass itself (the C kernel and numpy's) refuses an id outside [first_id, first_id + documents)
    instead of reading outside its records."""
    from neox_epoch.audit import exposure_numpy

    module = exposure_numpy if walker == "numpy" else __import__("neox_epoch._exposure", fromlist=["stream"])
    sizes = np.array([5, 7, 9], np.int32)
    records = np.zeros((3, 1), np.int64)
    records[:, 0] = sizes
    for ids in ([10, 11, 13, 12], [10, 11, 9]):
        positions = np.zeros(len(ids) + 1, np.int64)
        hist, stats = np.zeros(3, np.int64), np.zeros(3, np.int64)
        draws = np.ones(2, np.uint8)
        with pytest.raises(IndexError, match=rf"document id {ids[2]} at entry 2 .* \[10, 13\)"):
            module.stream(
                np.array(ids, np.int32),
                10,
                None,
                records,
                0,
                2,
                draws,
                8,
                2,
                positions,
                hist,
                hist.copy(),
                stats,
                None,
                None,
                None,
                None,
            )
