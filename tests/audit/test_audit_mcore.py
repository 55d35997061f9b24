"""``neox-epoch audit`` against caches built by the REAL megatron-core (the installed version, 0.16.1).

Each randomized case writes tiny corpora, builds train/valid/test with BlendedMegatronDatasetBuilder and
GPTDataset (path_to_cache set, a 1-process gloo group), then audits the cache directory. Invariants:

- every audited number equals the builder's: len, samples, epochs, samples per epoch, tokens, documents;
- no findings on a fresh cache (md5, description fields, boundaries, permutation, seed regeneration);
- the audit's exposure for the first N samples equals the exposure counted by walking the real
  dataset's own arrays sample by sample, token by token (and a few samples cross-checked against the
  tokens ``__getitem__`` returns), for direct datasets and for every source of a blend.
"""

from __future__ import annotations

import json
import os
import random

import numpy as np
import optional
import pytest

optional.require("megatron.core")

from exposure_util import check_tokens, count_gpt_exposure, histogram  # noqa: E402
from mcore_live import build  # noqa: E402

from neox_epoch.audit.audit import AuditOptions, run_audit  # noqa: E402
from neox_epoch.cli import main  # noqa: E402
from neox_epoch.formats.cache_names import discover  # noqa: E402
from neox_epoch.resume.exposure import mcore_orders  # noqa: E402
from neox_epoch.semantics import mcore as mcore_sem  # noqa: E402


def _random_case(seed: int) -> dict:
    rng = random.Random(seed)
    n_src = rng.choice([1, 1, 2, 3])
    docs = [rng.randint(40, 160) for _ in range(n_src)]
    seq = rng.choice([16, 32, 64])
    split = rng.choice(["100,0,0", "90,5,5", "80,10,10", "70,20,10"])
    weights = None if (n_src == 1 and rng.random() < 0.7) else [rng.randint(1, 5) * 1.0 for _ in range(n_src)]
    if n_src > 1 and rng.random() < 0.25:
        weights = None  # blend weighted by the sources' lengths, one epoch each
    epochs = rng.choice([0.3, 0.9, 1.0, 1.004, 1.6, 2.5])
    return {
        "seed": seed,
        "docs": docs,
        "seq": seq,
        "split": split,
        "weights": weights,
        "epochs": epochs,
        "aet": rng.random() < 0.8,
        "frac": rng.choice([0.25, 0.5, 0.97, 1.0]),
    }


CASES = [_random_case(s) for s in (11, 12, 13, 14, 15, 16, 17, 18)]
# about 1.3 epochs of one source: megatron's 80% rule shuffles the final epoch on its own
CASES.append(
    {
        "seed": 99,
        "docs": [90],
        "seq": 32,
        "split": "100,0,0",
        "weights": None,
        "epochs": 1.3 / 0.8,
        "aet": True,
        "frac": 0.9,
        "separate": True,
    }
)
# one prefix with a weight: a BlendedDataset of one source (with the surplus)
CASES.append(
    {"seed": 98, "docs": [70], "seq": 16, "split": "90,5,5", "weights": [1.0], "epochs": 1.0, "aet": True, "frac": 1.0}
)
# sizes None, weights None: exhaustive blending, every sample of every source exactly once
CASES.append(
    {
        "seed": 97,
        "docs": [60, 45],
        "seq": 32,
        "split": "100,0,0",
        "weights": None,
        "epochs": 1.0,
        "aet": True,
        "frac": 0.6,
        "sizes_none": True,
    }
)


def _truth_docs(counts: dict[int, np.ndarray]) -> tuple[dict[int, int], int, int]:
    """Document histogram at the minimum exposure, unseen and partial documents (documents with tokens)."""
    mins = [int(c.min()) for c in counts.values() if c.size]
    unseen = sum(1 for c in counts.values() if c.size and int(c.max()) == 0)
    partial = sum(1 for c in counts.values() if c.size and int(c.min()) != int(c.max()))
    vals, n = np.unique(np.asarray(mins, dtype=np.int64), return_counts=True)
    return {int(v): int(k) for v, k in zip(vals, n)}, unseen, partial


@pytest.mark.parametrize("case", CASES, ids=[f"case{c['seed']}" for c in CASES])
def test_audit_equals_real_megatron_core(corpus, tmp_path, case):
    prefixes = [corpus(f"src{k}", case["seed"] * 7 + k, n, 1, 250) for k, n in enumerate(case["docs"])]
    seq = case["seq"]
    # request about `epochs` passes over the first source's train split
    sizes0 = np.fromfile(prefixes[0] + ".idx", dtype=np.int32, offset=34, count=case["docs"][0])
    n_train = max(1, int(case["epochs"] * int(sizes0.sum()) * 0.8 / seq))
    cache = str(tmp_path / "cache")
    sizes = [None, None, None] if case.get("sizes_none") else [n_train, 20, 10]
    train, valid, test = build(
        prefixes,
        case["weights"],
        case["split"],
        sizes,
        seq,
        cache,
        seed=1000 + case["seed"],
        add_extra_token=case["aet"],
    )
    top = [x for x in (train, valid, test) if x is not None]
    gpts = []
    for ds in top:
        gpts.extend(ds.datasets if hasattr(ds, "datasets") else [ds])
    consumed = max(1, int(len(train) * case["frac"]))
    opts = AuditOptions(consumed=consumed, global_batch_size=4, add_extra_token=int(case["aet"]))
    res = run_audit(discover([cache]), opts)
    assert not res.findings, [str(f) for f in res.findings]
    by_digest = {r.digest: r for r in res.indexes}
    a = int(case["aet"])
    for ds in gpts:
        r = by_digest[ds.unique_description_hash]
        tokens = ds._get_num_tokens_per_epoch()
        assert r.kind == "megatron-core" and r.split == ds.index_split.name
        assert r.length == len(ds)
        assert r.samples == ds.sample_index.shape[0] - 1
        assert r.epochs == ds.document_index.shape[0] // len(ds.indices) == ds._get_num_epochs(tokens)
        assert r.tokens == tokens
        assert r.samples_per_epoch == (tokens - a) // seq
        assert r.documents == len(ds.indices)
        assert r.document_range == [int(ds.indices[0]), int(ds.indices[-1]) + 1]
        assert r.num_samples_requested == ds.num_samples
        plan = mcore_sem.build(tokens, seq, ds.num_samples, a)
        assert r.separated_final_epoch == plan.separate_final_epoch
        if case.get("separate") and ds.index_split.name == "train":
            assert r.separated_final_epoch is True
        # resume-check --exposure (Megatron-LM) builds these orders without the files: equal to the real ones
        doc_idx, shuffle = mcore_orders(
            (int(ds.indices[0]), int(ds.indices[-1]) + 1),
            tokens,
            r.epochs,
            bool(r.separated_final_epoch),
            seq,
            1000 + case["seed"],
            a,
        )
        assert np.array_equal(doc_idx, ds.document_index) and np.array_equal(shuffle, ds.shuffle_index)
    # exposure: the first `consumed` samples of the train dataset, counted token by token
    if hasattr(train, "dataset_index"):
        blend = next(b for b in res.blends if b.split == "train")
        di, dsi = np.asarray(train.dataset_index[:consumed]), np.asarray(train.dataset_sample_index[:consumed])
        per_source = [(train.datasets[k], [int(x) for x in dsi[di == k]]) for k in range(len(train.datasets))]
        assert blend.size == len(train)
        assert [s.draws_consumed for s in blend.sources] == [len(ids) for _, ids in per_source]
        assert [s.draws for s in blend.sources] == np.bincount(
            np.asarray(train.dataset_index), minlength=len(train.datasets)
        ).tolist()
        for k, s in enumerate(blend.sources):
            at = np.flatnonzero(di == k)
            per = s.samples_per_epoch
            want = int(at[per]) if per is not None and at.shape[0] > per else None
            assert s.second_pass_sample == want
            assert s.second_pass_iteration == (None if want is None else want // 4 + 1)
            assert s.passes == (round(at.shape[0] / per, 6) if per else None)
    else:
        per_source = [(train, list(range(consumed)))]
        r = by_digest[train.unique_description_hash]
        per = r.samples_per_epoch or 0
        assert r.exposure is not None
        assert r.exposure.second_pass_sample == (per if consumed > per else None)
    for ds, ids in per_source:
        r = by_digest[ds.unique_description_hash]
        counts = count_gpt_exposure(ds, ids, seq)
        for i in ids[:2] + ids[-1:]:
            check_tokens(ds, i, seq)
        assert r.exposure is not None
        assert r.exposure.consumed_samples == len(ids)
        assert r.exposure.tokens == histogram(counts)
        docs, unseen, partial = _truth_docs(counts)
        assert r.exposure.documents == docs
        assert r.exposure.documents_unseen == unseen
        assert r.exposure.documents_partial == partial
        assert r.exposure.token_exposures == sum(int(c.sum()) for c in counts.values())


def test_cli_json_on_real_cache_and_manifest(corpus, tmp_path, capsys):
    """The CLI's JSON has the documented keys; the manifest's per-document rows match the JSON totals."""
    prefixes = [corpus("web", 3, 120, 1, 300), corpus("code", 4, 70, 1, 300)]
    cache = str(tmp_path / "cache")
    train, _, _ = build(prefixes, [2.0, 1.0], "100,0,0", [400, 0, 0], 32, cache, seed=7)
    manifest = str(tmp_path / "out" / "manifest.csv")
    rc = main(["audit", cache, "--train-iters", "50", "--global-batch-size", "8", "--json", "--manifest", manifest])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert {"indexes", "blends", "findings", "consumed_samples"} <= set(out)
    assert out["consumed_samples"] == 400 and out["findings"] == []
    idx = [r for r in out["indexes"] if r["exposure"]]
    assert len(idx) == 2
    for r in out["indexes"]:
        assert {
            "kind",
            "path",
            "split",
            "epochs",
            "samples",
            "samples_per_epoch",
            "length",
            "separated_final_epoch",
            "documents",
            "document_range",
            "tokens",
            "findings",
        } <= set(r)
    for r in idx:
        assert {"tokens", "documents", "documents_unseen", "tokens_unseen", "consumed_samples"} <= set(r["exposure"])
    b = out["blends"][0]
    assert sum(s["draws_consumed"] for s in b["sources"]) == 400
    assert [s["draws"] for s in b["sources"]] == np.bincount(np.asarray(train.dataset_index)).tolist()
    rows = open(manifest, encoding="utf-8").read().splitlines()
    header = rows[0].split(",")
    assert header[:4] == ["index", "split", "data_prefix", "document"]
    body = [dict(zip(header, x.split(","))) for x in rows[1:]]
    assert len(body) == sum(r["documents"] for r in idx)
    for r in idx:
        mine = [x for x in body if x["index"] == r["path"]]
        assert sum(int(x["token_exposures"]) for x in mine) == r["exposure"]["token_exposures"]
        assert sum(1 for x in mine if int(x["max_exposure"]) == 0) == r["exposure"]["documents_unseen"]
        seen = [x for x in mine if int(x["max_exposure"]) > 0]
        assert all(1 <= int(x["first_iteration"]) <= int(x["last_iteration"]) <= 50 for x in seen)
        assert all(x["first_iteration"] == "" for x in mine if int(x["max_exposure"]) == 0)


def test_manifest_first_last_match_real_blend(corpus, tmp_path):
    """First/last iteration per document equal those found by walking the real blend sample by sample."""
    prefixes = [corpus("a", 21, 50, 1, 120), corpus("b", 22, 30, 1, 120)]
    cache = str(tmp_path / "cache")
    train, _, _ = build(prefixes, [1.0, 1.0], "100,0,0", [200, 0, 0], 16, cache, seed=3)
    n, gbs = 150, 5
    rows: list[tuple[str, int, int, int]] = []

    def sink(rep, chunk):  # type: ignore[no-untyped-def]
        for d, f, la in zip(chunk.documents.tolist(), chunk.first.tolist(), chunk.last.tolist()):
            rows.append((rep.digest, d, f, la))

    res = run_audit(discover([cache]), AuditOptions(consumed=n, global_batch_size=gbs), manifest=sink)
    assert not res.findings
    from exposure_util import gpt_sample_spans

    truth: dict[tuple[str, int], list[int]] = {}
    for k in range(n):
        src, j = int(train.dataset_index[k]), int(train.dataset_sample_index[k])
        ds = train.datasets[src]
        for doc, _, _ in gpt_sample_spans(ds, j, 16):
            t = truth.setdefault((ds.unique_description_hash, doc), [k, k])
            t[0], t[1] = min(t[0], k), max(t[1], k)
    got = {(h, d): [f, la] for h, d, f, la in rows if f >= 0}
    assert got == truth


def test_stale_cache_after_corpus_change(corpus, tmp_path, capsys):
    """Rewriting the corpus with other documents makes the cache stale: a boundary finding, exit 1."""
    prefix = corpus("data", 5, 80, 1, 200)
    cache = str(tmp_path / "cache")
    build([prefix], None, "100,0,0", [300, 0, 0], 32, cache)
    from neox_epoch.formats.corpus import write_random_corpus

    write_random_corpus(prefix, 6, 80, 1, 200)  # same document count, other sizes
    rc = main(["audit", cache, "--consumed", "100", "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "FINDING" in out and "sample boundary" in out and "first divergence" in out
    assert os.path.isdir(cache)
