"""Damaged, stale and mixed caches: each is a finding (path, expected, found) with exit 1, never a
traceback, and the other indexes of the same audit are still audited. Usage errors exit 2.
The audit is read-only: nothing is written next to the data."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest
from test_audit_unit import write_neox_index

from neox_epoch.audit.audit import AuditOptions, run_audit
from neox_epoch.cli import main
from neox_epoch.formats.cache_names import discover
from neox_epoch.formats.corpus import write_random_corpus

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
NEOX_CACHE = os.path.join(HERE, "fixtures", "neox", "neox_cache")
C1 = "corpus_c1_train_1_indexmap_{}ns_32sl_1234s_packedpi_ac_{}_idx.npy"


def _audit(path: str, consumed: int | None = 20):  # type: ignore[no-untyped-def]
    return run_audit(discover([path]), AuditOptions(consumed=consumed))


def _two_indexes(tmp_path):  # type: ignore[no-untyped-def]
    """A directory with a healthy index (h) and the one a test will damage (d)."""
    write_neox_index(str(tmp_path), "h", [30, 12, 55, 7, 21, 40], 8, 2)
    _, arr = write_neox_index(str(tmp_path), "d", [25, 3, 41, 8, 19, 33, 2, 16], 8, 2)
    return arr


def _check(res, stem: str, what: str):  # type: ignore[no-untyped-def]
    """One finding of the damaged index names `what`; the healthy one is fully audited."""
    bad = next(r for r in res.indexes if os.path.basename(r.path).startswith(stem))
    good = next(r for r in res.indexes if os.path.basename(r.path).startswith("h_"))
    assert any(what in f.what for f in bad.findings), [str(f) for f in bad.findings]
    for f in bad.findings:
        assert f.path and f.expected and f.found
    assert not good.findings and good.exposure is not None
    return bad


def test_truncated_npy(tmp_path):
    arr = _two_indexes(tmp_path)
    path = arr["base"] + "_sample_idx.npy"
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    bad = _check(_audit(str(tmp_path)), "d_", "size")
    assert bad.exposure is None


def test_wrong_dtype(tmp_path):
    arr = _two_indexes(tmp_path)
    np.save(arr["base"] + "_doc_idx.npy", arr["doc"].astype(np.float32))
    _check(_audit(str(tmp_path)), "d_", "document index dtype")


def test_int64_document_index_is_reported_but_audited(tmp_path):
    arr = _two_indexes(tmp_path)
    np.save(arr["base"] + "_doc_idx.npy", arr["doc"].astype(np.int64))
    bad = _check(_audit(str(tmp_path)), "d_", "document index dtype")
    assert bad.epochs == 2 and bad.exposure is not None


def test_pickled_and_garbage_files(tmp_path):
    arr = _two_indexes(tmp_path)
    np.save(arr["base"] + "_shuffle_idx.npy", np.array([1, "x", None], dtype=object), allow_pickle=True)
    _check(_audit(str(tmp_path)), "d_", "dtype")
    with open(arr["base"] + "_shuffle_idx.npy", "wb") as f:
        f.write(b"not an array at all")
    _check(_audit(str(tmp_path)), "d_", "format")


def test_missing_file_of_a_triple(tmp_path):
    arr = _two_indexes(tmp_path)
    os.unlink(arr["base"] + "_shuffle_idx.npy")
    _check(_audit(str(tmp_path)), "d_", "missing file")


def test_sample_index_past_document_index(tmp_path):
    arr = _two_indexes(tmp_path)
    sample = arr["sample"].copy()
    sample[-1, 0] = len(arr["doc"]) + 3
    np.save(arr["base"] + "_sample_idx.npy", sample)
    bad = _check(_audit(str(tmp_path)), "d_", "sample index range")
    assert any("past the document index" in f.hint for f in bad.findings)


def test_sample_index_going_back(tmp_path):
    arr = _two_indexes(tmp_path)
    sample = arr["sample"].copy()
    sample[5, 0], sample[6, 0] = sample[6, 0] + 1, 0
    np.save(arr["base"] + "_sample_idx.npy", sample)
    _check(_audit(str(tmp_path)), "d_", "sample index order")


def test_last_sample_row_going_back_across_chunks(tmp_path, monkeypatch):
    """The final row (row S) pointing back at entry 0 when the document index is read in chunks of 4: a finding, not
    an IndexError (the row lands with a later chunk's rows, far before its first entry)."""
    from neox_epoch.audit import passes

    monkeypatch.setattr(passes, "STREAM_CHUNK", 4)
    arr = _two_indexes(tmp_path)
    sample = arr["sample"].copy()
    sample[-1] = (0, 1)
    np.save(arr["base"] + "_sample_idx.npy", sample)
    _check(_audit(str(tmp_path)), "d_", "sample index order")


def test_cache_of_another_corpus_same_document_count(tmp_path):
    """The corpus was re-tokenized (same number of documents, other lengths): stale, first divergence named."""
    _two_indexes(tmp_path)
    write_random_corpus(str(tmp_path / "d"), 99, 8, 1, 60)
    bad = _check(_audit(str(tmp_path)), "d_", "sample boundary")
    f = next(f for f in bad.findings if f.what == "sample boundary")
    assert "first divergence" in f.hint and "sample_idx[" in f.found
    assert bad.exposure is None


def test_cache_of_another_corpus_fewer_documents(tmp_path):
    _two_indexes(tmp_path)
    write_random_corpus(str(tmp_path / "d"), 99, 5, 1, 60)
    _check(_audit(str(tmp_path)), "d_", "document ids")


def test_missing_data(tmp_path):
    _two_indexes(tmp_path)
    os.unlink(str(tmp_path / "d.idx"))
    _check(_audit(str(tmp_path)), "d_", "data")


@pytest.mark.skipif(not os.path.isdir(NEOX_CACHE), reason=f"NeoX fixtures missing: {NEOX_CACHE}")
def test_triple_mixing_two_real_neox_builds(tmp_path):
    """doc_idx of the 824-sample build with sample/shuffle of the 402-sample build of the same corpus."""
    for ext in (".bin", ".idx"):
        shutil.copy(os.path.join(NEOX_CACHE, "corpus_c1" + ext), tmp_path)
    for role in ("sample", "shuffle"):
        shutil.copy(os.path.join(NEOX_CACHE, C1.format(402, role)), tmp_path)
    shutil.copy(os.path.join(NEOX_CACHE, C1.format(824, "doc")), tmp_path / C1.format(402, "doc"))
    res = _audit(str(tmp_path))
    assert res.findings and res.indexes[0].exposure is None
    assert main(["audit", str(tmp_path), "--consumed", "20", "--no-progress"]) == 1


def test_shuffle_from_another_seed(tmp_path):
    """Same shapes, a permutation, but not the one the seed in the name builds: caught by regeneration."""
    arr = _two_indexes(tmp_path)
    sh = arr["shuffle"].copy()
    np.random.RandomState(7).shuffle(sh)
    np.save(arr["base"] + "_shuffle_idx.npy", sh)
    _check(_audit(str(tmp_path)), "d_", "shuffle index vs seed")


def test_shuffle_not_a_permutation(tmp_path):
    arr = _two_indexes(tmp_path)
    sh = arr["shuffle"].copy()
    sh[3] = sh[4]
    np.save(arr["base"] + "_shuffle_idx.npy", sh)
    _check(_audit(str(tmp_path)), "d_", "shuffle permutation")


def _fake_mcore(tmp_path, arr, prefix: str, num_samples: int, seq: int):  # type: ignore[no-untyped-def]
    """megatron-core names and description around NeoX-built arrays (same algorithm for one joint epoch)."""
    desc = {
        "class": "GPTDataset",
        "dataset_path": prefix,
        "num_samples": num_samples,
        "index_split": "train",
        "random_seed": 1234,
        "sequence_length": seq,
        "split": "100,0,0",
        "split_matrix": [[0, 1.0], None, None],
        "tokenizer": {"class": "NullTokenizer"},
    }
    text = json.dumps(desc, indent=4)
    h = hashlib.md5(text.encode("utf-8")).hexdigest()
    cache = tmp_path / "cache"
    cache.mkdir(exist_ok=True)
    base = str(cache / f"{h}-GPTDataset-train-")
    (cache / f"{h}-GPTDataset-train-description.txt").write_text(text, encoding="utf-8")
    np.save(base + "document_index.npy", arr["doc"])
    np.save(base + "sample_index.npy", arr["sample"])
    np.save(base + "shuffle_index.npy", arr["shuffle"])
    return cache, h


def test_megatron_description_checked(tmp_path):
    (tmp_path / "data").mkdir()
    prefix, arr = write_neox_index(str(tmp_path / "data"), "m", [25, 3, 41, 8, 19, 33, 2, 16], 8, 1)
    cache, h = _fake_mcore(tmp_path, arr, prefix, 10, 8)
    res = _audit(str(cache))
    r = res.indexes[0]
    assert r.kind == "megatron-core" and not r.findings, [str(f) for f in r.findings]
    assert r.length == arr["S"] and r.exposure is not None
    d = cache / f"{h}-GPTDataset-train-description.txt"
    d.write_text(d.read_text(encoding="utf-8").replace('"random_seed": 1234', '"random_seed": 1235'), encoding="utf-8")
    r = _audit(str(cache)).indexes[0]
    whats = {f.what for f in r.findings}
    assert "description md5" in whats and "document index vs seed" in whats
    d.write_text(
        d.read_text(encoding="utf-8").replace('"sequence_length": 8', '"sequence_length": 16'), encoding="utf-8"
    )
    r = _audit(str(cache)).indexes[0]
    assert any(f.what == "sample boundary" for f in r.findings)


def test_cli_exit_codes_and_no_traceback(tmp_path):
    arr = _two_indexes(tmp_path)
    before = sorted(os.listdir(tmp_path))
    mtimes = {n: os.path.getmtime(tmp_path / n) for n in before}
    with open(arr["base"] + "_doc_idx.npy", "r+b") as f:
        f.truncate(100)
    proc = subprocess.run(
        [sys.executable, "-m", "neox_epoch.cli", "audit", str(tmp_path), "--consumed", "10"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and "FINDING" in proc.stdout
    assert sorted(os.listdir(tmp_path)) == before, "the audit wrote next to the data"
    assert all(os.path.getmtime(tmp_path / n) == t for n, t in mtimes.items() if not n.startswith("d_train_0"))


@pytest.mark.parametrize(
    "argv,message",
    [
        (["audit", "/nonexistent/dir/x"], "no such file"),
        (["audit", "{tmp}", "--train-iters", "5"], "--global-batch-size"),
        (["audit", "{tmp}", "--consumed", "5", "--train-iters", "5", "--global-batch-size", "2"], "give one of them"),
        (["audit", "{tmp}", "--manifest", "{tmp}/m.csv"], "--manifest needs a consumption"),
        (["audit", "{tmp}", "--consumed", "-3"], "negative"),
        (["audit", "{tmp}", "--config", "{tmp}/missing.yml"], "config file not found"),
    ],
)
def test_usage_errors_exit_2(tmp_path, capsys, argv, message):
    write_neox_index(str(tmp_path), "u", [30, 12, 55], 8, 2)
    rc = main([a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert rc == 2
    assert message in capsys.readouterr().err


def test_file_truncated_after_its_header_was_checked(tmp_path):
    """A file that shrinks between the header check and a read is a finding, not a crash of the mapped read."""
    from neox_epoch.errors import FileProblem
    from neox_epoch.formats.npy import NpyReader, read_header

    path = str(tmp_path / "a.npy")
    np.save(path, np.arange(10_000, dtype=np.int32))
    r = NpyReader(read_header(path))
    assert int(r.read(0, 10_000)[-1]) == 9_999
    with open(path, "r+b") as f:
        f.truncate(r.info.data_offset + 4 * 5_000)
    assert int(r.read(0, 5_000)[-1]) == 4_999  # why: the part still there is read
    with pytest.raises(FileProblem) as err:
        r.read(4_000, 6_000)
    assert "shrank" in str(err.value.found)
    r.close()


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_npy_header_of_every_format_version(tmp_path, version):
    """Headers of .npy format 1.0, 2.0 and 3.0 (numpy's public writer) read without numpy's private reader."""
    from numpy.lib import format as npformat

    from neox_epoch.formats.npy import NpyReader, read_header

    path = str(tmp_path / "a.npy")
    with open(path, "wb") as f:
        npformat.write_array(f, np.arange(30, dtype=np.int32).reshape(15, 2), version=version)
    info = read_header(path)
    assert (info.shape, info.dtype, info.fortran_order) == ((15, 2), np.dtype(np.int32), False)
    assert info.data_offset == 128
    with NpyReader(info) as r:
        assert r.read(13, 15).tolist() == [[26, 27], [28, 29]]


def test_npy_header_in_utf8():
    """A field name outside latin-1 makes numpy write format 3.0 (a UTF-8 header): it is decoded as UTF-8."""
    from numpy.lib import format as npformat

    from neox_epoch.formats.npy import parse_header

    f = io.BytesIO()
    with pytest.warns(UserWarning, match="format 3.0"):
        npformat.write_array(f, np.zeros(4, dtype=[("\u03b4", "<i8")]))
    f.seek(0)
    assert npformat.read_magic(f) == (3, 0)
    assert parse_header(f, (3, 0)) == ((4,), False, np.dtype([("\u03b4", "<i8")]))
    assert f.tell() == 128


def _npy_with_header(path: str, header: bytes, version: tuple[int, int] = (1, 0), length: int | None = None) -> None:
    """A .npy file with the literal ``header`` text (and the ``length`` field, its length unless given)."""
    size_format = "<H" if version == (1, 0) else "<I"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY" + bytes(version) + struct.pack(size_format, len(header) if length is None else length))
        f.write(header + b"\0" * 64)


@pytest.mark.parametrize(
    "header,version,length,found",
    [
        (
            b"{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }\n",
            (4, 0),
            None,
            "a damaged header (Invalid version (4, 0))",
        ),
        (b"[1, 2, 3]\n", (1, 0), None, "a damaged header (Header is not a dictionary: [1, 2, 3])"),
        (
            b"{'descr': '<i4', 'shape': (3,)}\n",
            (1, 0),
            None,
            "a damaged header (Header does not contain the correct keys: ['descr', 'shape'])",
        ),
        (
            b"{'descr': '<i4', 'fortran_order': False, 'shape': (-3,), }\n",
            (2, 0),
            None,
            "a damaged header (shape is not valid: (-3,))",
        ),
        (
            b"{'descr': '<i4', 'fortran_order': 0, 'shape': (3,), }\n",
            (1, 0),
            None,
            "a damaged header (fortran_order is not a valid bool: 0)",
        ),
        (
            b"{'descr': '<zz', 'fortran_order': False, 'shape': (3,), }\n",
            (3, 0),
            None,
            "a damaged header (descr is not a valid dtype descriptor: '<zz')",
        ),
        (
            b"{'descr': __import__('os').getcwd(), 'fortran_order': False, 'shape': (3,)}\n",
            (1, 0),
            None,
            "a damaged header (Cannot parse header: \"{'descr': __import__('os').getcwd(), 'fortran_order': False, "
            "'shape': (3,)}\\n\")",
        ),
        (
            b"{'descr': '<i4'",
            (2, 0),
            4_000_000_000,
            "a damaged header (Header length (4000000000) is larger than the 10000 characters of a .npy header)",
        ),
        (
            b"{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }\n",
            (1, 0),
            500,
            "a damaged header (EOF: reading array header, expected 500 bytes got 122)",
        ),
    ],
)
def test_damaged_npy_headers(tmp_path, header, version, length, found):
    """Each damaged header is a FileProblem naming numpy's complaint; nothing in a header is ever executed."""
    from neox_epoch.errors import FileProblem
    from neox_epoch.formats.npy import read_header

    path = str(tmp_path / "a.npy")
    _npy_with_header(path, header, version, length)
    with pytest.raises(FileProblem) as err:
        read_header(path)
    assert (err.value.what, err.value.found) == ("header", found)
    assert "delete it so the framework rebuilds it" in err.value.hint


def test_npy_header_with_a_dimension_past_int64(tmp_path):
    """A header whose shape is larger than any file (2^70 elements) is a size finding, not an integer overflow."""
    from neox_epoch.errors import FileProblem
    from neox_epoch.formats.npy import read_header

    path = str(tmp_path / "a.npy")
    _npy_with_header(path, b"{'descr': '<i4', 'fortran_order': False, 'shape': (0, 1180591620717411303424), }\n")
    assert read_header(path).shape == (0, 2**70)  # why: no elements, so the file holds them all
    header = b"{'descr': '<i4', 'fortran_order': False, 'shape': (1180591620717411303424,), }\n"
    _npy_with_header(path, header)
    with pytest.raises(FileProblem) as err:
        read_header(path)
    offset = 10 + len(header)  # magic 6, version 2, length 2, then the header; 64 bytes follow it
    assert (err.value.what, err.value.expected, err.value.found) == (
        "size",
        f"{offset + 4 * 2**70} bytes for shape (1180591620717411303424,) of int32",
        f"{offset + 64} bytes",
    )
