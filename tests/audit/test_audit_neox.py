"""``neox-epoch audit`` on index files written by REAL GPT-NeoX (tests/fixtures/neox, scripts/neox_golden.py).

The golden JSON holds what NeoX itself built and, for the first ``train_iters * train_batch_size``
samples, the exposure counted token by token through NeoX's own arrays (checked against NeoX's
``['text']``). The audit must reproduce every number from the cache files alone: epochs, samples,
``len`` (samples - 1), documents, tokens, the blend draws replayed from the weights, and the token
histograms, including the headline "one epoch" case (2 epochs built, ~25% of tokens never seen, ~25%
twice).
"""

from __future__ import annotations

import json
import os
from dataclasses import replace

import numpy as np
import pytest

from neox_epoch.audit.audit import AuditOptions, run_audit
from neox_epoch.audit.exposure import ExposureReport
from neox_epoch.audit.validate import audit_index
from neox_epoch.cli import main
from neox_epoch.formats import cache_names as names
from neox_epoch.formats import idx
from neox_epoch.formats.cache_names import discover
from neox_epoch.resume.exposure import from_tokens, windows
from neox_epoch.semantics.consumption import Consumption
from neox_epoch.semantics.neox_index import build_joint

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
FIXTURES = os.path.join(HERE, "fixtures", "neox")
GOLDEN = os.path.join(FIXTURES, "neox_golden.json")
CACHE = os.path.join(FIXTURES, "neox_cache")

if not os.path.isfile(GOLDEN) or not os.path.isdir(CACHE):
    pytest.skip(
        f"NeoX fixtures missing: {GOLDEN} and {CACHE} (regenerate with scripts/neox_golden.py)", allow_module_level=True
    )

with open(GOLDEN, encoding="utf-8") as _f:
    G = json.load(_f)


def _hist(h: dict[str, int]) -> dict[int, int]:
    """Bins with tokens (as the audit's JSON lists them)."""
    return {int(k): int(v) for k, v in h.items() if int(v)}


def _files(ds: dict) -> list[str]:
    return [os.path.join(CACHE, n.replace("{prefix}", ds["prefix"])) for n in ds["cache_files"]]


def _cached_datasets() -> list[tuple[str, dict]]:
    out = []
    for name, case in sorted(G["cases"].items()):
        for ds in case["datasets"]:
            if ds.get("built") and all(os.path.isfile(p) for p in _files(ds)):
                out.append((name, ds))
    return out


DATASETS = _cached_datasets()


@pytest.mark.parametrize("case,ds", DATASETS, ids=[f"{c}-{d['name']}-{d['num_samples']}" for c, d in DATASETS])
def test_numbers_equal_what_neox_built(case, ds):
    """Epochs, samples, len, documents, tokens and dtypes equal NeoX's; the files pass every check, including
    regeneration of doc_idx and shuffle_idx from the seed in the name."""
    res = run_audit(discover(_files(ds)), AuditOptions())
    assert len(res.indexes) == 1
    r = res.indexes[0]
    assert not r.findings, [str(f) for f in r.findings]
    assert r.kind == "neox" and r.split == ds["name"]
    assert r.epochs == ds["epochs"]
    assert r.samples == ds["sample_idx_rows"] - 1
    assert r.length == ds["len"]
    assert r.documents == ds["num_documents"]
    assert r.document_range == ds["documents"]
    assert r.tokens == ds["tokens_per_epoch"]
    assert r.num_samples_requested == ds["num_samples"]
    assert r.samples_per_epoch == (ds["tokens_per_epoch"] - 1) // r.seq_length
    assert r.separated_final_epoch is False


def test_headline_one_epoch_reproduced():
    """train_data_paths with one path and train_iters = (S-1)//tbs: NeoX builds 2 epochs, shuffles them
    together, and the run sees ~25% of tokens never and ~25% twice. The audit gives the exact counts."""
    h = G["headline"]
    case = G["cases"][h["case"]]
    ds = next(d for d in case["datasets"] if d["name"] == "train_0")
    res = run_audit(
        discover(_files(ds)), AuditOptions(consumed=h["samples_consumed"], global_batch_size=h["train_batch_size"])
    )
    r = res.indexes[0]
    assert r.epochs == h["epochs_built"] == 2 and r.length == h["len"]
    assert r.exposure is not None
    assert r.exposure.tokens == _hist(h["histogram"])
    total = sum(r.exposure.tokens.values())
    assert total == h["tokens"]
    assert round(r.exposure.tokens_unseen / total, 6) == h["fraction_unseen"]
    assert 0.2 < h["fraction_unseen"] < 0.3 and 0.2 < h["fraction_twice"] < 0.3


def test_full_blend_exposure_reproduced():
    """All len(blend) samples of case b: every token twice except the stream's tail."""
    case = G["cases"]["b_one_path_one_epoch"]
    ds = next(d for d in case["datasets"] if d["name"] == "train_0")
    full = case["exposure_full_blend"]
    res = run_audit(discover(_files(ds)), AuditOptions(consumed=full["samples"]))
    src = full["sources"][0]
    assert res.indexes[0].exposure is not None
    assert res.indexes[0].exposure.tokens == _hist(src["histogram"])


@pytest.mark.parametrize("name", ["b_one_path_one_epoch", "c1_three_paths_3_1_2", "c2_three_paths_by_num_docs"])
def test_blend_replayed_from_config(name, tmp_path, capsys):
    """Three train_data_paths (weights 3:1:2, and weight_by_num_documents): the audit picks the index files
    this config builds among others in the directory, replays NeoX's greedy, and each source's token
    histogram equals NeoX's counted truth."""
    case = G["cases"][name]
    p = case["params"]
    cfg = {
        k: p[k]
        for k in (
            "train_data_paths",
            "train_data_weights",
            "train_iters",
            "train_batch_size",
            "seq_length",
            "weight_by_num_documents",
            "weighted_sampler_alpha",
        )
    }
    cfg_path = tmp_path / "run.yml"
    cfg_path.write_text(json.dumps(cfg), encoding="utf-8")
    rc = main(["audit", CACHE, "--config", str(cfg_path), "--json", "--no-progress"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0, out["findings"]
    blend = next(b for b in out["blends"] if b["kind"] == "neox")
    gb = case["blends"]["train"]
    assert blend["weights"] == pytest.approx(gb["weights"], rel=0, abs=1e-15)
    assert [s["draws_consumed"] for s in blend["sources"]] == gb["draws_first_n"]
    chosen = {s["index"] for s in blend["sources"]}
    for rep in out["indexes"]:  # every other train index in the directory is left alone, and says why
        if rep["split"].startswith("train") and rep["path"] not in chosen and rep["seq_length"] == p["seq_length"]:
            assert rep["exposure"] is None and any("NeoX blend" in n for n in rep["notes"]), rep["path"]
    truth = {s["name"]: s for s in case["exposure"]["sources"]}
    for src in blend["sources"]:
        rep = next(r for r in out["indexes"] if r["path"] == src["index"])
        t = truth[rep["split"]]
        assert rep["exposure"]["consumed_samples"] == t["samples"]
        assert _hist(rep["exposure"]["tokens"]) == _hist(t["histogram"])
        built = next(d for d in case["datasets"] if d["name"] == rep["split"])
        assert rep["num_samples_requested"] == built["num_samples"]


def test_blend_sources_without_config_get_no_exposure(capsys):
    """Without the weights a NeoX blend source's draws are unknown: said, not guessed."""
    rc = main(["audit", CACHE, "--consumed", "100", "--json", "--no-progress"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    c1 = [r for r in out["indexes"] if r["split"] in ("train_1", "train_2")]
    assert c1 and all(r["exposure"] is None for r in c1)
    assert all(any("NeoX blend" in n for n in r["notes"]) for r in c1)


@pytest.mark.parametrize("case,ds", DATASETS, ids=[f"{c}-{d['name']}-{d['num_samples']}" for c, d in DATASETS])
def test_build_joint_equals_the_index_neox_built(case, ds):
    """resume-check builds an index a run has not built yet as NeoX will: its three arrays (values and dtypes)
    equal the files NeoX's own _build_index_mappings wrote, from the documents, epochs, seq_length and seed."""
    group = discover(_files(ds))[0]
    doc, sample, shuffle = (np.load(group.files[role]) for role in names.GPT_ROLES)
    sizes = np.asarray(idx.sizes_memmap(idx.read_header(group.neox.prefix)))
    built = build_joint(np.arange(*ds["documents"]), sizes, ds["epochs"], group.neox.seq_length, group.neox.seed)
    for got, want in zip(built, (doc, sample, shuffle)):
        assert got.dtype == want.dtype and np.array_equal(got, want)


def test_tokens_out_holds_each_tokens_exposure():
    """The kernel's tokens_out (two passes over two indexes summed by resume-check) holds, per token, what the
    histograms count: from_tokens of the headline run's single pass gives the audit's own exposure; a second pass
    over the same draws doubles every token."""
    h = G["headline"]
    ds = next(d for d in G["cases"][h["case"]]["datasets"] if d["name"] == "train_0")
    group = discover(_files(ds))[0]
    sizes = np.asarray(idx.sizes_memmap(idx.read_header(group.neox.prefix)))[slice(*ds["documents"])]
    out = np.zeros(int(sizes.sum()), np.int32)

    def consumption(split: str, length: int) -> Consumption:
        return replace(Consumption.prefix(length, h["samples_consumed"]), tokens_out=out)

    once = audit_index(group, consumption_for=consumption).exposure
    assert from_tokens(out, sizes, h["samples_consumed"]) == once and once.tokens == _hist(h["histogram"])
    audit_index(group, consumption_for=consumption)
    twice = from_tokens(out, sizes, 2 * h["samples_consumed"])
    assert (
        twice.tokens == {2 * t: n for t, n in once.tokens.items()} and twice.documents_unseen == once.documents_unseen
    )


def test_tokens_out_window_by_window_adds_up_to_the_whole():
    """resume-check sums a large source window by window (documents of at most WINDOW_TOKENS tokens, -1 in
    token_starts outside): on the headline index, windows of a fifth of its tokens joined give the whole pass's
    exposure, bin for bin and document for document."""
    h = G["headline"]
    ds = next(d for d in G["cases"][h["case"]]["datasets"] if d["name"] == "train_0")
    group = discover(_files(ds))[0]
    sizes = np.asarray(idx.sizes_memmap(idx.read_header(group.neox.prefix)))[slice(*ds["documents"])]
    whole = audit_index(group, consumption_for=lambda split, length: Consumption.prefix(length, h["samples_consumed"]))
    parts, spans = [], windows(sizes, int(sizes.sum()) // 5)
    for first, stop in spans:
        out = np.zeros(int(sizes[first:stop].sum()), np.int32)

        def consumption(
            split: str,
            length: int,
            out: np.ndarray = out,
            window: tuple[int, int] = (first, stop),
        ) -> Consumption:
            return replace(Consumption.prefix(length, h["samples_consumed"]), tokens_out=out, tokens_window=window)

        audit_index(group, consumption_for=consumption)
        parts.append(from_tokens(out, sizes[first:stop], h["samples_consumed"]))
    assert len(spans) >= 5 and spans[0][0] == 0 and spans[-1][1] == sizes.shape[0]
    joined = replace(ExposureReport.combine(parts), consumed_samples=h["samples_consumed"])
    assert whole.exposure is not None and joined == whole.exposure and joined.tokens == _hist(h["histogram"])
