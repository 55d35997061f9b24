"""Running a case (accepted or refused) and recording NeoX's epochs and blend."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from golden.calls import CaseSpec, call_neox, dataset_record
from golden.corpora import Corpus, array_sha1, write_corpus
from golden.exposure import Source, exposure
from golden.neox_setup import Neox, capture_fd1


def run_refused_case(
    neox: Neox, case: CaseSpec, workdir: str, log: str
) -> tuple[dict[str, Any], dict[str, Corpus], str]:
    """Call NeoX for a case it must refuse; record the exception it raised (and that nothing was built)."""
    directory = os.path.join(workdir, case.name)
    os.makedirs(directory)
    corpora = {spec.label: write_corpus(spec, directory) for spec in case.corpora()}
    neox.recorder.reset()
    try:
        with capture_fd1(log):
            call_neox(neox, case, directory)
    except ValueError as exc:
        refused = {"exception": type(exc).__name__, "message": str(exc)}
    else:
        raise AssertionError(f"{case.name}: NeoX accepted a case it is expected to refuse")
    assert not neox.recorder.index_builds, "NeoX built datasets before refusing"
    record = {"description": case.description, "mode": case.mode, "params": case.params(), "refused": refused}
    return record, corpora, directory


def run_case(neox: Neox, case: CaseSpec, workdir: str, log: str) -> tuple[dict[str, Any], dict[str, Corpus], str]:
    """Build ``case`` with NeoX in a fresh directory; return its JSON record, corpora and directory."""
    directory = os.path.join(workdir, case.name)
    os.makedirs(directory)
    corpora = {spec.label: write_corpus(spec, directory) for spec in case.corpora()}
    label_of = {c.prefix: label for label, c in corpora.items()}
    rec = neox.recorder
    rec.reset()
    with capture_fd1(log):
        result = call_neox(neox, case, directory)
    loaders = result["loaders"]
    builds = {(b["name"], b["data_prefix"]): b for b in rec.index_builds}
    assert len(builds) == len(rec.index_builds), "two index builds with the same name and prefix"

    def record(ds: Any) -> dict[str, Any]:
        prefix = ds_prefix[id(ds)]
        epochs = 1 if case.epochs_mode() else None
        return dataset_record(ds, builds[(ds.name, prefix)], label_of[prefix], directory, epochs)

    # Which prefix each GPT2Dataset was built from (the dataset object does not keep it).
    ds_prefix: dict[int, str] = {}
    out: dict[str, Any] = {
        "description": case.description,
        "mode": case.mode,
        "params": case.params(),
        "num_samples": case.num_samples(),
        "flags": result["flags"],
    }
    loader_len = {k: (len(v) if v is not None else None) for k, v in loaders.items()}
    out["loader_batches"] = loader_len
    datasets: list[dict[str, Any]] = []
    first_n = case.num_samples()
    if case.epochs_mode():
        iters = result["train_iters"]
        out["train_epochs"] = epochs_record(case, loaders, iters)
        # The loaders (drop_last) are cycled: a split's distinct samples are the first min(drawn, one pass of full
        # loader batches). Training draws train_iters * train_batch_size, evaluation what it draws with train_iters
        # given (every eval_interval and at the end, eval_iters * train_batch_size each; the test split once).
        tbs = case.train_batch_size
        drawn = {
            "train": iters * tbs,
            "valid": (iters // case.eval_interval + 1) * case.eval_iters * tbs,
            "test": case.eval_iters * tbs,
        }
        first_n = {
            k: min(drawn[k], len(v) * v.batch_sampler.batch_size) if v is not None else None for k, v in loaders.items()
        }
        assert first_n["train"] == out["train_epochs"]["trained_samples_first_pass"]
    n = first_n["train"]
    assert n is not None
    if case.mode == "data_path":
        assert case.data_path is not None and case.split is not None
        num_docs = case.data_path.num_documents
        out["split_boundaries"] = [int(x) for x in neox.data_utils.get_train_valid_test_split_(case.split, num_docs)]
        prefix = corpora[case.data_path.label].prefix
        for split in ("train", "valid", "test"):
            loader = loaders[split]
            if loader is None:
                datasets.append({"name": split, "prefix": case.data_path.label, "built": False})
                continue
            ds_prefix[id(loader.dataset)] = prefix
            datasets.append({"built": True, **record(loader.dataset)})
        train = loaders["train"].dataset
        b = builds[("train", prefix)]["documents"]
        sources = [Source(train, corpora[case.data_path.label], b)]
        out["exposure"] = exposure(train, sources, None, n, case.seq_length, log)
    else:
        out["normalize_calls"] = list(rec.normalize_calls)
        if case.weight_by_num_documents:
            fn = neox.data_utils.weights_by_num_docs
            out["weights_by_num_docs"] = {
                split: [float(w) for w in fn([c.num_documents for c in specs], alpha=case.weighted_sampler_alpha)]
                for split, specs in (("train", case.train), ("valid", case.valid), ("test", case.test))
            }
        out["blends"] = {}
        split_specs = {"train": case.train, "valid": case.valid, "test": case.test}
        for split in ("train", "valid", "test"):
            loader = loaders[split]
            blend = loader.dataset
            specs = split_specs[split]
            assert len(blend.datasets) == len(specs)
            for ds, spec in zip(blend.datasets, specs, strict=True):
                ds_prefix[id(ds)] = corpora[spec.label].prefix
                datasets.append({"built": True, **record(ds)})
            first = first_n[split]
            assert first is not None
            out["blends"][split] = blend_record(blend, first)
        blend = loaders["train"].dataset

        def blend_sources() -> list[Source]:
            return [
                Source(ds, corpora[spec.label], builds[(ds.name, corpora[spec.label].prefix)]["documents"])
                for ds, spec in zip(blend.datasets, case.train, strict=True)
            ]

        out["exposure"] = exposure(blend, blend_sources(), blend, n, case.seq_length, log)
        if case.full_blend_exposure:
            out["exposure_full_blend"] = exposure(blend, blend_sources(), blend, len(blend), case.seq_length, log)
    out["datasets"] = datasets
    return out, corpora, directory


def epochs_record(case: CaseSpec, loaders: dict[str, Any], train_iters: int) -> dict[str, Any]:
    """What NeoX's train_epochs mode did: its loader (batch, len) and the train_iters update_iterations set."""
    train = loaders["train"]
    batch = int(train.batch_sampler.batch_size)
    assert case.micro_batch is not None and batch == case.micro_batch * case.data_parallel_size
    assert train.batch_sampler.drop_last and train.batch_sampler.world_size == case.data_parallel_size
    gas = case.gradient_accumulation_steps
    return {
        "train_epochs": case.train_epochs,
        "train_micro_batch_size_per_gpu": case.micro_batch,
        "gradient_accumulation_steps": gas,
        "data_parallel_size": case.data_parallel_size,
        "loader_batch": batch,
        "train_dataset_len": len(train.dataset),
        "train_loader_len": len(train),
        "train_iters": train_iters,
        "train_samples": train_iters * case.train_batch_size,
        "micro_batches": train_iters * gas,
        "trained_samples_first_pass": min(train_iters * gas, len(train)) * batch,
    }


def blend_record(blend: Any, first: int) -> dict[str, Any]:
    """JSON record of one NeoX BlendableDataset: size, weights, and draws per source."""
    k = len(blend.datasets)
    index = np.asarray(blend.dataset_index)
    sample = np.asarray(blend.dataset_sample_index)
    head = min(first, len(blend))
    child_len = [len(ds) for ds in blend.datasets]
    shuffle_len = [int(ds.shuffle_idx.shape[0]) for ds in blend.datasets]

    def past_end(stop: int) -> list[int]:
        """Draws among the first ``stop`` whose sample index is past the child's shuffle_idx (they wrap)."""
        return [int(np.sum(sample[:stop][index[:stop] == i] >= shuffle_len[i])) for i in range(k)]

    def max_index(stop: int) -> list[int | None]:
        out: list[int | None] = []
        for i in range(k):
            sel = sample[:stop][index[:stop] == i]
            out.append(int(sel.max()) if sel.size else None)
        return out

    return {
        "sources": [ds.name for ds in blend.datasets],
        "len": len(blend),
        "child_len": child_len,
        "weights": blend.weights_given,
        "dataset_index_dtype": str(index.dtype),
        "sha1_dataset_index": array_sha1(index),
        "sha1_dataset_sample_index": array_sha1(sample),
        "draws": [int(x) for x in np.bincount(index, minlength=k)],
        "first_n": first,
        "draws_first_n": [int(x) for x in np.bincount(index[:head], minlength=k)],
        "first_n_past_blend": max(0, first - len(blend)),
        "wrapping_draws": past_end(len(blend)),
        "wrapping_draws_first_n": past_end(head),
        "max_sample_index": max_index(len(blend)),
        "max_sample_index_first_n": max_index(head),
    }
