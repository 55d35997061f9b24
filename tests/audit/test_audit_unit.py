"""Unit tests of ``neox-epoch audit`` without torch: names, consumption, and exposure against brute force.

Synthetic NeoX-named indexes are built here with numpy the way NeoX builds them (documents tiled E
times and shuffled once, boundaries every seq_length tokens of the stream, a shuffled permutation), so
that unusual shapes can be covered: documents longer than several samples, empty documents, many
epochs, consumption that wraps (NeoX's index % len). The exposure is checked against a per-token brute
force over the stream.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from neox_epoch.audit import passes
from neox_epoch.audit.audit import AuditOptions, run_audit
from neox_epoch.audit.exposure import PIECES, read_sizes
from neox_epoch.audit.passes import RowPiece, SampleGrid, _splits
from neox_epoch.audit.report import TtyProgress, render_text
from neox_epoch.cli import main
from neox_epoch.errors import AuditError
from neox_epoch.formats import cache_names as names
from neox_epoch.formats.corpus import write_corpus
from neox_epoch.formats.npy import NpyReader, Progress, read_header
from neox_epoch.semantics.consumption import Consumption


def write_neox_index(
    directory: str,
    stem: str,
    lengths: list[int],
    seq: int,
    epochs: int,
    seed: int = 1234,
    name: str = "train_0",
    doc_range: tuple[int, int] | None = None,
) -> tuple[str, dict]:
    """A corpus and a NeoX-built-like (packed) index beside it; returns (prefix, arrays)."""
    prefix = os.path.join(directory, stem)
    write_corpus(prefix, [np.arange(n, dtype=np.int64) % 50000 for n in lengths])
    sizes = np.asarray(lengths, dtype=np.int64)
    lo, hi = doc_range or (0, len(lengths))
    rng = np.random.RandomState(seed)
    doc = np.tile(np.arange(lo, hi, dtype=np.int32), epochs)
    rng.shuffle(doc)
    total = int(sizes[doc].sum())
    S = (total - 1) // seq
    cum_after = np.cumsum(sizes[doc])
    b = np.arange(S + 1, dtype=np.int64) * seq
    p = np.searchsorted(cum_after, b, side="right")
    off = b - (cum_after[p] - sizes[doc[p]])
    sample = np.stack([p, off], axis=1).astype(np.int32)
    shuffle = np.arange(S, dtype=np.uint32)
    rng.shuffle(shuffle)
    T = int(sizes[lo:hi].sum())
    ns = max(1, (epochs * T - 1) // seq - 3) if epochs > 1 else max(1, (T - 1) // seq // 2)
    base = f"{prefix}_{name}_indexmap_{ns}ns_{seq}sl_{seed}s_packedpi_ac"
    np.save(base + "_doc_idx.npy", doc)
    np.save(base + "_sample_idx.npy", sample)
    np.save(base + "_shuffle_idx.npy", shuffle)
    return prefix, {
        "doc": doc,
        "sample": sample,
        "shuffle": shuffle,
        "sizes": sizes,
        "S": S,
        "total": total,
        "base": base,
        "ns": ns,
        "T": T,
    }


def brute_force(arr: dict, seq: int, consumed: int, gbs: int = 1) -> tuple[dict[int, np.ndarray], dict[int, list[int]]]:
    """Per-document token counts and [first, last] draw position, walking the stream token by token."""
    doc, sizes, S, shuffle = arr["doc"], arr["sizes"], arr["S"], arr["shuffle"]
    stream_doc = np.repeat(doc.astype(np.int64), sizes[doc])
    stream_off = np.concatenate([np.arange(sizes[d]) for d in doc]) if len(doc) else np.zeros(0, np.int64)
    end = min(S * seq, arr["total"])
    counts = {int(d): np.zeros(int(sizes[d]), dtype=np.int64) for d in np.unique(doc)}
    when: dict[int, list[int]] = {}
    length = S - 1
    for j in range(consumed):
        i = int(shuffle[j % length])
        for pos in range(i * seq, min(i * seq + seq, end)):
            d = int(stream_doc[pos])
            counts[d][int(stream_off[pos])] += 1
            w = when.setdefault(d, [j, j])
            w[0], w[1] = min(w[0], j), max(w[1], j)
    return counts, when


def hist(counts: dict[int, np.ndarray]) -> dict[int, int]:
    allc = np.concatenate(list(counts.values()))
    v, n = np.unique(allc, return_counts=True)
    return {int(a): int(b) for a, b in zip(v, n)}


# ---------------------------------------------------------------- names


def test_neox_names_with_underscores_and_variants(tmp_path):
    d = str(tmp_path)
    open(os.path.join(d, "my_data_text_document.idx"), "wb").close()
    f = names.parse_name(
        os.path.join(d, "my_data_text_document_train_0_indexmap_2316ns_64sl_1234s_packedpi_ac_doc_idx.npy")
    )
    assert f is not None and f.kind == "neox" and list(f.files) == ["doc"]
    assert f.neox is not None
    assert f.neox.prefix == os.path.join(d, "my_data_text_document") and f.neox.name == "train_0"
    assert (f.neox.num_samples, f.neox.seq_length, f.neox.seed, f.neox.pack_impl, f.neox.allow_chopped) == (
        2316,
        64,
        1234,
        "packed",
        True,
    )
    old = names.parse_name(os.path.join(d, "x_valid_indexmap_120ns_2048sl_42s_sample_idx.npy"))
    assert old is not None and old.neox is not None
    assert (old.neox.prefix, old.neox.name, old.neox.pack_impl) == (os.path.join(d, "x"), "valid", None)
    ep = names.parse_name(os.path.join(d, "x_train_indexmap_Nonens_128sl_1s_pack_until_overflowpi_shuffle_idx.npy"))
    assert ep is not None and ep.neox is not None
    assert ep.neox.num_samples is None and ep.neox.pack_impl == "pack_until_overflow" and not ep.neox.allow_chopped
    # a prefix that itself ends in _train: the name is the standard part
    t = names.parse_name(os.path.join(d, "web_train_train_1_indexmap_5ns_8sl_1s_doc_idx.npy"))
    assert (
        t is not None
        and t.neox is not None
        and (os.path.basename(t.neox.prefix), t.neox.name) == ("web_train", "train_1")
    )


def test_megatron_names_and_grouping(tmp_path):
    h = "0123456789abcdef0123456789abcdef"
    paths = [
        str(tmp_path / f"{h}-GPTDataset-train-{r}")
        for r in ("description.txt", "document_index.npy", "sample_index.npy", "shuffle_index.npy")
    ]
    paths += [str(tmp_path / f"{h}-BlendedDataset-valid-{r}") for r in ("description.txt", "dataset_index.npy")]
    paths += [str(tmp_path / f"{h}{r}") for r in (".dsc", "_doc_idx.npy", "_sample_idx.npy", "_shuffle_idx.npy")]
    paths += [str(tmp_path / "notes.txt"), str(tmp_path / f"{h}-GPTDataset-train-other.npy")]
    parsed = [names.parse_name(p) for p in paths]
    assert parsed[-1] is None and parsed[-2] is None
    groups = names.group_files([p for p in parsed if p is not None])
    kinds = {(g.kind, g.dataset_class, g.split): g for g in groups}
    gpt = kinds[("megatron-core", "GPTDataset", "train")]
    assert not gpt.missing_roles() and gpt.digest == h
    blend = kinds[("megatron-core", "BlendedDataset", "valid")]
    assert blend.is_blend and blend.missing_roles() == ["dataset_sample"]
    legacy = kinds[("megatron-legacy", "GPTDataset", "")]
    assert set(legacy.files) == {"description", "doc", "sample", "shuffle"}


def test_discover_paths(tmp_path):
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    prefix, arr = write_neox_index(str(sub), "corp", [30, 40, 50], 8, 2)
    assert len(names.discover([str(tmp_path)])) == 1  # recursive
    assert len(names.discover([prefix])) == 1  # a data prefix
    one = names.discover([arr["base"] + "_doc_idx.npy"])  # a single file: a group missing two roles
    assert len(one) == 1 and one[0].missing_roles() == ["sample", "shuffle"]
    with pytest.raises(AuditError, match="no such file"):
        names.discover([str(tmp_path / "nope" / "x")])
    with pytest.raises(AuditError, match="no index cache files"):
        names.discover([str(tmp_path / "empty_prefix")])
    (tmp_path / "other").mkdir()
    with pytest.raises(AuditError, match="no index cache files found"):
        names.discover([str(tmp_path / "other")])


# ---------------------------------------------------------------- consumption


def test_consumption_prefix_and_wrap():
    c = Consumption.prefix(10, 25)  # two full passes and 5 more
    assert c.runs == ((0, 5, 3), (5, 10, 2)) and c.consumed == 25
    assert c.counts(3, 7).tolist() == [3, 3, 2, 2]
    first, last = c.first_last(4, 6)
    assert first.tolist() == [4, 5] and last.tolist() == [24, 15]
    m = Consumption.from_prefixes(10, [(7, 2), (3, 1)])  # two passes over [0,7) and one over [0,3)
    assert m.runs == ((0, 3, 3), (3, 7, 2))
    assert Consumption.prefix(10, 0).runs == ()


def test_consumption_of_a_resume_that_skips_or_repeats():
    """resume-check --exposure: items [0, before) then [first, first + drawn), as (before, 1), (end, 1), (first, -1)."""
    skip = Consumption.from_prefixes(10, [(3, 1), (8, 1), (6, -1)])  # 0..2, then 6..7: 3..5 never drawn
    assert skip.runs == ((0, 3, 1), (6, 8, 1)) and skip.consumed == 5
    repeat = Consumption.from_prefixes(10, [(6, 1), (8, 1), (3, -1)])  # 0..5, then 3..7: 3..5 twice
    assert repeat.runs == ((0, 3, 1), (3, 6, 2), (6, 8, 1)) and repeat.consumed == 11
    wrapped = Consumption.from_prefixes(10, [(4, 1), (15, 1), (12, -1)])  # items 12..14 are 2..4 (NeoX's % len)
    assert wrapped.runs == ((0, 2, 1), (2, 4, 2), (4, 5, 1)) and wrapped.consumed == 7


# ---------------------------------------------------------------- exposure vs brute force

SHAPES = [
    # (lengths, seq, epochs, consumed as a fraction of len)
    ([5, 17, 3, 40, 9, 1, 22, 13], 8, 2, 0.5),
    ([60, 3, 90, 0, 7, 45, 0, 12, 33], 8, 3, 0.7),  # documents of many samples, empty documents
    ([11, 11, 11, 11], 4, 1, 0.3),
    ([200, 150, 5, 1, 77], 16, 2, 2.6),  # wraps: NeoX index % len
    ([7] * 30, 7, 2, 1.0),  # documents exactly one sample long
    ([(i * 37) % 61 for i in range(150)], 5, 3, 0.6),  # thousands of samples: the draws' bits span many words
    ([3, 9, 1, 6, 12, 2, 5, 8] * 6, 8, 1, 0.6),  # one epoch, documents shorter and longer than a sample
    ([3, 9, 1, 6, 12, 2, 5, 8] * 6, 8, 2, 1.7),  # two epochs, drawn up to twice (draws as bytes)
]


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("shape", SHAPES)
def test_exposure_equals_brute_force(tmp_path, monkeypatch, shape, packed, split):
    lengths, seq, epochs, frac = shape
    if not packed:  # the stream pass's records as for documents of 2^24 tokens and more: a word per copy
        monkeypatch.setattr("neox_epoch.audit.exposure.PACKED", 0)
    if split:  # the kernel's second thread on these few copies (from 2^16 copies a chunk otherwise)
        monkeypatch.setattr("neox_epoch.audit.passes.SPLIT_MIN", 2)
    _, arr = write_neox_index(str(tmp_path), "c", lengths, seq, epochs)
    length = arr["S"] - 1
    consumed = max(1, int(frac * length))
    res = run_audit(names.discover([str(tmp_path)]), AuditOptions(consumed=consumed, global_batch_size=3))
    r = res.indexes[0]
    assert not r.findings, [str(f) for f in r.findings]
    assert r.epochs == epochs and r.length == length and r.samples == arr["S"]
    assert r.tokens == arr["T"] and r.samples_per_epoch == (arr["T"] - 1) // seq
    counts, _ = brute_force(arr, seq, consumed)
    e = r.exposure
    assert e is not None
    assert e.tokens == hist(counts)
    withtok = [c for c in counts.values() if c.size]
    assert e.documents_unseen == sum(1 for c in withtok if c.max() == 0)
    assert e.documents_partial == sum(1 for c in withtok if c.min() != c.max())
    assert sum(e.documents.values()) == len(withtok)
    assert e.token_exposures == sum(int(c.sum()) for c in withtok)
    per = r.samples_per_epoch or 0
    assert e.second_pass_sample == (per if consumed > per else None)
    if e.second_pass_sample is not None:
        assert e.second_pass_iteration == per // 3 + 1


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("seq,frac,seed", [(8, 0.5, 0), (8, 0.93, 1), (7, 0.5, 2), (7, 0.31, 3), (16, 0.72, 4)])
def test_two_copies_by_pairs_equal_brute_force(tmp_path, monkeypatch, seq, frac, seed, split):
    """The kernel's pairs (two copies, each drawn at most once: counts from the copies' segments, no histogram walk)
    on documents of every length from empty to past 2 x seq_length + 1 (where a first copy keeps its position), a
    seq_length that is not a power of two among them."""
    if split:
        monkeypatch.setattr("neox_epoch.audit.passes.SPLIT_MIN", 2)
    lengths = [int(n) for n in np.random.RandomState(seed).randint(0, 2 * seq + 4, size=120)]
    lengths += [seq, 2 * seq, 2 * seq + 1, 2 * seq + 2, 1, 0]
    _, arr = write_neox_index(str(tmp_path), "p", lengths, seq, 2)
    consumed = max(1, int(frac * (arr["S"] - 1)))
    report = run_audit(names.discover([str(tmp_path)]), AuditOptions(consumed=consumed)).indexes[0]
    assert not report.findings, [str(f) for f in report.findings]
    counts, _ = brute_force(arr, seq, consumed)
    withtok = [c for c in counts.values() if c.size]
    e = report.exposure
    assert e is not None and e.tokens == hist(counts)
    assert e.documents == {
        times: sum(1 for c in withtok if c.min() == times)
        for times in (0, 1, 2)
        if any(c.min() == times for c in withtok)
    }
    assert e.documents_unseen == sum(1 for c in withtok if c.max() == 0)
    assert e.documents_partial == sum(1 for c in withtok if c.min() != c.max())


@pytest.mark.parametrize("damage", [None, "split row", "early row", "late row", "absent", "irregular", "shuffle"])
def test_two_threads_find_what_one_finds(tmp_path, monkeypatch, damage):
    """The stream pass cut into pieces for two threads at sample rows gives the same report as one thread, also when
    such a row (or another) is off its boundary: the later pieces' positions are moved to follow the earlier."""
    lengths = [(i * 29) % 53 + 1 for i in range(40)]
    _, arr = write_neox_index(str(tmp_path), "t", lengths, 16, 2)
    sample, doc, shuffle = arr["sample"].copy(), arr["doc"].copy(), arr["shuffle"].copy()
    cut = (PIECES // 2) * sample.shape[0] // PIECES  # where the kernel's middle piece starts:
    with monkeypatch.context() as patch:
        patch.setattr("neox_epoch.audit.passes.SPLIT_MIN", 2)
        cuts = _splits([RowPiece(0, 0, sample)], 0, doc.shape[0], SampleGrid(arr["S"], 16))
    assert cuts is not None and [sample[cut, 0], cut * 16 - sample[cut, 1]] in cuts.tolist()
    rows = {"split row": cut, "early row": 3, "late row": sample.shape[0] - 5}
    if damage in rows:
        sample[rows[damage], 1] += 1
    elif damage == "absent":
        doc[doc == 7] = 9
    elif damage == "irregular":
        doc[int(np.flatnonzero(doc == 7)[0])] = 9
    elif damage == "shuffle":
        shuffle[4] = shuffle[5]
    for role, array in (("sample", sample), ("doc", doc), ("shuffle", shuffle)):
        np.save(arr["base"] + f"_{role}_idx.npy", array)

    def audit() -> dict:
        return run_audit(names.discover([str(tmp_path)]), AuditOptions(consumed=arr["S"] // 2)).to_json()

    one = audit()
    monkeypatch.setattr("neox_epoch.audit.passes.SPLIT_MIN", 2)
    assert audit() == one
    assert (one["indexes"][0]["exposure"] is None) == (damage is not None)
    if damage is None:
        counts, _ = brute_force(arr, 16, arr["S"] // 2)
        assert one["indexes"][0]["exposure"]["tokens"] == {str(k): v for k, v in hist(counts).items()}
    elif damage in rows:
        assert [f["what"] for f in one["findings"]] == ["sample boundary"]


def test_manifest_rows_equal_brute_force(tmp_path):
    lengths = [25, 3, 41, 8, 0, 19, 33, 2, 16]
    _, arr = write_neox_index(str(tmp_path), "m", lengths, 8, 2)
    consumed = arr["S"] - 1 + 7  # one pass of len and a few more (wrap)
    rows = []
    res = run_audit(
        names.discover([str(tmp_path)]),
        AuditOptions(consumed=consumed),
        manifest=lambda rep, ch: rows.extend(
            zip(
                ch.documents.tolist(),
                ch.min_exposure.tolist(),
                ch.max_exposure.tolist(),
                ch.token_exposures.tolist(),
                ch.first.tolist(),
                ch.last.tolist(),
            )
        ),
    )
    assert not res.findings
    counts, when = brute_force(arr, 8, consumed)
    assert len(rows) == len(lengths)
    for d, mn, mx, tot, first, last in rows:
        c = counts[d]
        if c.size:
            assert (mn, mx, tot) == (int(c.min()), int(c.max()), int(c.sum()))
        assert [first, last] == when.get(d, [-1, -1])


def test_reports_json_text_and_progress(tmp_path, capsys):
    write_neox_index(str(tmp_path), "j", [30, 12, 55, 7, 21], 8, 2)
    assert main(["audit", str(tmp_path), "--consumed", "10", "--json", "--no-progress"]) == 0
    out = json.loads(capsys.readouterr().out)
    r = out["indexes"][0]
    assert r["kind"] == "neox" and r["length"] == r["samples"] - 1 and r["findings"] == []
    assert set(r["exposure"]) >= {"tokens", "documents", "documents_unseen", "tokens_unseen", "consumed_samples"}
    assert all(isinstance(k, str) for k in r["exposure"]["tokens"])
    assert main(["audit", str(tmp_path), "--consumed", "10", "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "tokens seen:" in text and "no findings" in text
    res = run_audit(names.discover([str(tmp_path)]), AuditOptions())
    assert "consumed samples" not in render_text(res)
    buf = io.StringIO()
    p = TtyProgress(stream=buf, enabled=True)
    p.start("stream", 100)
    p.last = -1.0
    p.advance(50)
    p.done()
    assert "stream:  50.0%" in buf.getvalue()


def test_plot_refuses_another_format(tmp_path, capsys):
    """--plot draws SVG (no plotting library): a .png name is refused before the audit, nothing is written."""
    write_neox_index(str(tmp_path), "p", [30, 12, 55], 8, 2)
    rc = main(["audit", str(tmp_path), "--consumed", "5", "--plot", str(tmp_path / "x.png")])
    assert rc == 2
    assert "not .png; name it .svg, e.g. exposure.svg" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def test_plot_written(tmp_path, capsys):
    """One SVG: a histogram per index, bars titled with the audit's own token counts, one y-scale for all."""
    import xml.etree.ElementTree as ET

    write_neox_index(str(tmp_path), "p", [30, 12, 55], 8, 2)
    write_neox_index(str(tmp_path), "q", [9, 70, 41, 23], 8, 3)
    out = tmp_path / "plots" / "exp.svg"
    capsys.readouterr()
    argv = ["audit", str(tmp_path), "--consumed", "5", "--no-progress"]
    assert main([*argv, "--json"]) == 0
    exposures = {
        os.path.basename(r["path"]): r["exposure"]["tokens"] for r in json.loads(capsys.readouterr().out)["indexes"]
    }
    assert main([*argv, "--plot", str(out)]) == 0
    ns = "{http://www.w3.org/2000/svg}"
    root = ET.fromstring(out.read_text(encoding="utf-8"))
    assert root.tag == f"{ns}svg"
    inner = root.findall(f"./{ns}g/{ns}svg")
    assert len(inner) == len(exposures) == 2
    for hist in inner:
        name = hist.find(f"./{ns}text/{ns}title").text
        bars = [r.find(f"{ns}title").text for r in hist.iter(f"{ns}rect") if r.find(f"{ns}title") is not None]
        tokens = exposures[name]
        total = sum(tokens.values())
        assert bars == [f"{name}: {n:,d} tokens seen {t} times ({n / total:.2%})" for t, n in tokens.items()]
    ticks = [[(t.text, t.get("y")) for t in h.findall(f"./{ns}text[@text-anchor='end']")] for h in inner]
    assert ticks[0] == ticks[1] and len(ticks[0]) >= 3 and ticks[0][0][0] == "0%"  # one y-scale: same labels, same y


def test_audit_core_imports_no_torch(tmp_path):
    write_neox_index(str(tmp_path), "t", [30, 12, 55], 8, 2)
    code = (
        "import sys\nfrom neox_epoch.cli import main\n"
        f"rc = main(['audit', {str(tmp_path)!r}, '--consumed', '5', '--json', '--no-progress'])\n"
        "assert 'torch' not in sys.modules, 'torch imported'\nsys.exit(rc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_legacy_megatron_lm_cache(tmp_path):
    """Legacy Megatron-LM: {md5}.dsc + {md5}_{doc,sample,shuffle}_idx.npy in index-cache; len = samples."""
    import hashlib

    (tmp_path / "data").mkdir()
    prefix, arr = write_neox_index(str(tmp_path / "data"), "lg", [25, 3, 41, 8, 19, 33, 2, 16], 8, 1)
    dsc = (
        f"GPT Dataset\n\nData prefix {prefix}\nDataset name train\nNumber of samples 10\n"
        "Sequence length 8\nRandom seed 1234\nSplit 100,0,0\n"
    )
    h = hashlib.md5(dsc.encode("utf-8")).hexdigest()
    cache = tmp_path / "data" / "index-cache"
    cache.mkdir()
    (cache / f"{h}.dsc").write_text(dsc, encoding="utf-8")
    for role in ("doc", "sample", "shuffle"):
        np.save(str(cache / f"{h}_{role}_idx.npy"), arr[role])
    for f in os.listdir(tmp_path / "data"):
        if "_indexmap_" in f:
            os.unlink(tmp_path / "data" / f)
    res = run_audit(names.discover([prefix]), AuditOptions(consumed=arr["S"]))
    r = res.indexes[0]
    assert r.kind == "megatron-legacy" and r.split == "train" and not r.findings, [str(f) for f in r.findings]
    assert r.length == r.samples == arr["S"] and r.epochs == 1 and r.seq_length == 8
    assert r.exposure is not None and r.exposure.tokens_unseen == arr["T"] - arr["S"] * 8


def test_neox_unpacked_index_checked_without_exposure(tmp_path):
    """NeoX pack_impl=unpacked: one document per sample, int64 arrays (saved lists): headers, ids and the
    permutation are checked; no stream boundaries or exposure (other semantics), and that is said."""
    prefix = str(tmp_path / "u")
    write_corpus(prefix, [np.arange(n, dtype=np.int64) for n in (10, 20, 30, 40)])
    base = f"{prefix}_train_indexmap_6ns_16sl_1234s_unpackedpi_ac"
    np.save(base + "_doc_idx.npy", np.array([0, 1, 2, 3, 0, 1, 2], dtype=np.int64))
    np.save(base + "_sample_idx.npy", np.stack([np.arange(7), np.zeros(7, dtype=np.int64)], axis=1))
    np.save(base + "_shuffle_idx.npy", np.random.RandomState(0).permutation(6).astype(np.int64))
    res = run_audit(names.discover([str(tmp_path)]), AuditOptions(consumed=4))
    r = res.indexes[0]
    assert not r.findings, [str(f) for f in r.findings]
    assert r.pack_impl == "unpacked" and r.exposure is None and any("pack_impl unpacked" in n for n in r.notes)
    assert r.samples == 6 and r.document_range == [0, 4]


@pytest.mark.parametrize("damage", [None, "absent", "irregular", "boundary"])
def test_without_the_kernel_the_checks_are_the_same(tmp_path, monkeypatch, damage):
    """No C compiler at install time: numpy's walk (audit/exposure_numpy.py) gives the same findings and the same
    exposure as the kernel, on sound and damaged indexes."""
    from neox_epoch.audit import exposure, exposure_numpy, passes, validate

    _, arr = write_neox_index(str(tmp_path), "k", [50, 7, 33, 12, 90, 5, 41], 8, 2)
    doc = arr["doc"].copy()
    if damage == "absent":
        doc[doc == 3] = 5
    elif damage == "irregular":
        doc[int(np.flatnonzero(doc == 3)[0])] = 5
    elif damage == "boundary":
        sample = np.load(arr["base"] + "_sample_idx.npy")
        sample[3, 1] += 1  # row 3 one token late
        np.save(arr["base"] + "_sample_idx.npy", sample)
    np.save(arr["base"] + "_doc_idx.npy", doc)

    def audit() -> dict:
        return run_audit(names.discover([str(tmp_path)]), AuditOptions(consumed=10)).to_json()["indexes"][0]

    assert exposure.COMPILED, "neox_epoch._exposure is not built (python setup.py build_ext --inplace)"
    with_kernel = audit()
    for module in (exposure, validate, passes):
        monkeypatch.setattr(module, "kernel", exposure_numpy)
    without = audit()
    assert without == with_kernel
    if damage is None:
        assert with_kernel["exposure"] is not None and not with_kernel["findings"]
        counts, _ = brute_force(arr, 8, 10)
        assert with_kernel["exposure"]["tokens"] == {str(k): v for k, v in hist(counts).items()}
    else:
        assert with_kernel["exposure"] is None
        assert {"boundary": "sample boundary"}.get(damage, "epochs") in {f["what"] for f in with_kernel["findings"]}


def _mix(x: int) -> int:
    """The kernel's mix (splitmix64's finalizer) in Python."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) % (1 << 64)
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) % (1 << 64)
    return x ^ (x >> 31)


@pytest.mark.parametrize("dtype", [np.uint32, np.int64])
def test_kernel_mix_sums_and_scatter(dtype):
    """The kernel's hash sums (SIMD clones where the CPU has them) over a range and over ids, and its scatter: bits
    set, the sum up to the first id outside the store (an id past it, a negative one) and the largest id, against
    Python."""
    kernel = pytest.importorskip("neox_epoch._exposure")
    ids = ((np.arange(37) * 7) % 41).astype(dtype)  # (37: the vector loops and their remainder)
    assert kernel.mixed(3, 40) == sum(_mix(x) for x in range(3, 40)) % (1 << 64)
    assert kernel.mixed(ids) == sum(_mix(int(x)) for x in ids) % (1 << 64)
    for bad, value in [(-1, 0), (20, 41), (9, -1)]:
        if value < 0 and dtype == np.uint32:
            continue
        damaged, store = ids.copy(), np.zeros(1, np.uint64)
        if bad >= 0:
            damaged[bad] = value
        good = damaged[: bad if bad >= 0 else None]
        bad_at, mix, largest = kernel.scatter(damaged, store, 1, 41)
        assert (bad_at, mix) == (bad, sum(_mix(int(x)) for x in good) % (1 << 64))
        assert largest == int(damaged.astype(np.uint64).max())  # (a negative id: past any bound, as unsigned)
        assert int(store[0]) == sum(1 << int(x) for x in set(good.tolist()))


@pytest.mark.parametrize("wide", [False, True])
@pytest.mark.parametrize("damaged", [(), (5,), (70_000,), (70_000, 100_000), (40_000, 90_000), (139_999,)])
def test_kernel_rows_on_two_threads(wide, damaged):
    """The kernel's sample-row check (from 2^16 rows its two threads take a half each) gives the first row off its
    boundary, in either half or both, or -1, as a row-by-row check does."""
    kernel = pytest.importorskip("neox_epoch._exposure")
    seq, sizes = 8, np.random.RandomState(7).randint(1, 20, size=120_000)
    positions = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    samples = int(positions[-1] - 1) // seq
    boundary = np.arange(samples + 1, dtype=np.int64) * seq
    entry = np.searchsorted(positions, boundary, side="right") - 1
    rows = np.stack([entry, boundary - positions[entry]], axis=1).astype(np.int64 if wide else np.int32)
    assert rows.shape[0] > 140_000 and kernel.rows(positions, rows, 0, 0, seq, samples) == -1
    for row in damaged:
        rows[row, 1] += 1
    expected = min(damaged) if damaged else -1
    assert kernel.rows(positions, rows, 0, 0, seq, samples) == expected
    one_thread = kernel.rows(positions, rows[:1000], 0, 0, seq, samples)  # (one thread under 2^16 rows)
    assert one_thread == (expected if 0 <= expected < 1000 else -1)


@pytest.mark.parametrize("high", [1 << 24, 1 << 30])
def test_sizes_read_in_one_pass(monkeypatch, high):
    """The sizes' range and sum from the kernel's scan (one pass), chunk by chunk, as numpy's: a negative size (a
    damaged .idx) included; int64 sizes take numpy's. The records copy them, packed (one column fewer) when every size
    is below 2^24, else filled again unpacked."""
    monkeypatch.setattr("neox_epoch.audit.exposure.SIZE_CHUNK", 1000)
    sizes = np.random.RandomState(5).randint(0, high, size=4321).astype(np.int32)
    for array in (sizes, np.concatenate([sizes, [-7]]).astype(np.int32), sizes.astype(np.int64)):
        assert read_sizes(array)[1] == (int(array.min()), int(array.max()), int(array.sum(dtype=np.int64)))
        for epochs in (1, 2, 3):
            records, stats = read_sizes(array, epochs)
            packed = epochs > 1 and high == 1 << 24 and array.min() >= 0
            assert records.shape == (array.shape[0], epochs - packed) and stats == read_sizes(array)[1]
            assert np.array_equal(records[:, 0], array) and not records[:, 1:].any()
    kernel = pytest.importorskip("neox_epoch._exposure")
    assert kernel.scan(sizes)[3] == int(sizes.sum(dtype=np.int64)) and kernel.scan(sizes)[:2] == (
        sizes.min(),
        sizes.max(),
    )


@pytest.mark.parametrize("consumed", [None, 30])
def test_first_block_max_from_the_chunks(tmp_path, monkeypatch, consumed):
    """The shuffle pass keeps each chunk's largest id (it runs before the first block's end is known): the largest id
    of any first block, from chunks wholly inside it and the chunk across its end read again, equals numpy's."""
    monkeypatch.setattr("neox_epoch.audit.passes.STREAM_CHUNK", 7)
    rng = np.random.RandomState(3)
    shuffle = np.concatenate([rng.permutation(40), 40 + rng.permutation(20)]).astype(np.uint32)  # blocks of 40 and 20
    np.save(tmp_path / "s.npy", shuffle)
    with NpyReader(read_header(str(tmp_path / "s.npy"))) as reader:
        draws = passes.count_draws(
            reader, 60, Consumption.prefix(59, consumed) if consumed else None, False, Progress()
        )
        assert not draws.findings and len(draws.tops) >= 60 // 7
        for first_block in (0, 1, 6, 7, 8, 39, 40, 41, 59, 60):
            expected = int(shuffle[:first_block].max()) if first_block else -1
            assert draws.first_block_max(reader, first_block) == expected


@pytest.mark.parametrize("consumed", [None, 10, 40])
@pytest.mark.parametrize("wide", [False, True])
def test_shuffle_id_outside_the_samples(tmp_path, consumed, wide):
    """A shuffle id past the samples (or negative, int64) is the 'shuffle entry' finding at its position, with or
    without a consumption (the kernel's scatter stops there)."""
    _, arr = write_neox_index(str(tmp_path), "o", [50, 7, 33, 12, 90, 5, 41, 64, 3, 22], 8, 2)
    shuffle = arr["shuffle"].astype(np.int64 if wide else np.uint32)
    shuffle[25] = -4 if wide else arr["S"] + 3
    np.save(arr["base"] + "_shuffle_idx.npy", shuffle)
    res = run_audit(names.discover([str(tmp_path)]), AuditOptions(consumed=consumed))
    assert [(f.what, f.found) for f in res.findings] == [("shuffle entry", f"{shuffle[25]} at position 25")]
    assert res.indexes[0].exposure is None


@pytest.mark.parametrize(
    ("argv", "preset", "expected"),
    [
        (["audit", "--help"], None, "1"),  # numpy's OpenBLAS pool kept to one thread before numpy's import
        (["plan", "--help"], None, "1"),
        (["audit", "--help"], "4", "4"),  # the user's choice stays
        (["launch", "--help"], None, "None"),  # a command that starts the training processes leaves their environment
        (["audit", "launch", "--help"], None, "1"),  # (a path named like a command is not the command)
    ],
)
def test_cli_keeps_openblas_to_one_thread(argv, preset, expected):
    code = (
        "import os, sys\nfrom neox_epoch.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "import numpy\nprint('OPENBLAS', os.environ.get('OPENBLAS_NUM_THREADS'))"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    env.update({"OPENBLAS_NUM_THREADS": preset} if preset else {})
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip().splitlines()[-1] == f"OPENBLAS {expected}"
