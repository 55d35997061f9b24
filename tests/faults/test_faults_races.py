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
