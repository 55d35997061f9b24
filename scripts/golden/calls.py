"""One case: its spec, the call of NeoX's build_train_valid_test_data_loaders, the record of each dataset built."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from golden.common import NEOX_SEED
from golden.corpora import CorpusSpec, array_sha1
from golden.neox_setup import Neox, neox_args


@dataclass
class CaseSpec:
    """One call of NeoX's ``build_train_valid_test_data_loaders``."""

    name: str
    description: str
    mode: str
    """"data_path" (one corpus + split) or "train_data_paths" (one dataset per path, blended)."""
    seq_length: int
    train_iters: int | None
    """None: NeoX's train_epochs mode (then ``train_epochs`` is set and NeoX's update_iterations computes it)."""
    train_batch_size: int
    eval_interval: int
    eval_iters: int
    data_path: CorpusSpec | None = None
    split: str | None = None
    train: list[CorpusSpec] = field(default_factory=list)
    valid: list[CorpusSpec] = field(default_factory=list)
    test: list[CorpusSpec] = field(default_factory=list)
    train_weights: list[float] | None = None
    weight_by_num_documents: bool = False
    weighted_sampler_alpha: float = 1.0
    seed: int = NEOX_SEED
    copy_index_files: bool = False
    copy_corpora: bool = True
    full_blend_exposure: bool = False
    """Also record the exposure of a pass over the whole blend (``len(blend)`` samples, wraps included)."""
    train_epochs: int | None = None
    """NeoX train_epochs (with train_iters None): every split built for one epoch, train_iters from the loader."""
    micro_batch: int | None = None
    """train_micro_batch_size_per_gpu (train_epochs cases; NeoX's ``batch_size``)."""
    gradient_accumulation_steps: int = 1
    data_parallel_size: int = 1
    """The data-parallel world size NeoX's make_data_loader reads from mpu (train_epochs cases)."""
    pass_weights: bool = True
    """Give NeoX ``train_data_weights``; False: leave them out of ``params`` (the config gives none, NeoX's
    calculate_derived still turns them into ``[1.0] * len(paths)``, which is what NeoX is called with)."""

    def epochs_mode(self) -> bool:
        """NeoX's train_epochs mode: no train_iters, datasets built for one epoch."""
        return self.train_epochs is not None and self.train_iters is None

    def corpora(self) -> list[CorpusSpec]:
        """Every corpus the case reads, without repeats, in first-use order."""
        seen: dict[str, CorpusSpec] = {}
        for spec in ([self.data_path] if self.data_path else []) + self.train + self.valid + self.test:
            assert seen.get(spec.label, spec) == spec, f"two corpora labelled {spec.label}"
            seen[spec.label] = spec
        return list(seen.values())

    def params(self) -> dict[str, Any]:
        """The case's NeoX arguments, with corpus labels instead of paths."""
        out: dict[str, Any] = {
            "seq_length": self.seq_length,
            "seed": self.seed,
            "train_iters": self.train_iters,
            "train_batch_size": self.train_batch_size,
            "eval_interval": self.eval_interval,
            "eval_iters": self.eval_iters,
            "pack_impl": "packed",
            "allow_chopped": True,
            "data_impl": "mmap",
        }
        if self.mode == "data_path":
            assert self.data_path is not None
            out.update(data_path=self.data_path.label, split=self.split)
        else:
            out.update(
                train_data_paths=[c.label for c in self.train],
                valid_data_paths=[c.label for c in self.valid],
                test_data_paths=[c.label for c in self.test],
                train_data_weights=self.weights() if self.pass_weights else None,
                weight_by_num_documents=self.weight_by_num_documents,
                weighted_sampler_alpha=self.weighted_sampler_alpha,
            )
        if self.train_epochs is not None:
            assert self.micro_batch is not None
            assert (
                self.train_batch_size == self.micro_batch * self.gradient_accumulation_steps * self.data_parallel_size
            )
            out.update(
                train_epochs=self.train_epochs,
                train_micro_batch_size_per_gpu=self.micro_batch,
                gradient_accumulation_steps=self.gradient_accumulation_steps,
                global_num_gpus=self.data_parallel_size,  # pipe and model parallel sizes are 1: dp = GPUs
            )
        return out

    def weights(self) -> list[float]:
        """train_data_weights as NeoX derives them (``[1.0] * len(paths)`` when not given)."""
        return list(self.train_weights) if self.train_weights is not None else [1.0] * len(self.train)

    def num_samples(self) -> dict[str, int | None]:
        """NeoX's train/valid/test sample counts from iterations (None each in train_epochs mode)."""
        if self.epochs_mode():
            return {"train": None, "valid": None, "test": None}
        assert self.train_iters is not None
        tbs = self.train_batch_size
        return {
            "train": self.train_iters * tbs,
            "valid": (self.train_iters // self.eval_interval + 1) * self.eval_iters * tbs,
            "test": self.eval_iters * tbs,
        }


@contextlib.contextmanager
def data_parallel_stand_in(neox: Neox, size: int) -> Iterator[None]:
    """Make NeoX's ``mpu`` report a data-parallel world of ``size`` with this process as its rank 0.

    ``make_data_loader`` reads dp from ``mpu.get_data_parallel_world_size()`` (loader batch = micro * dp).
    One process cannot form a dp group of 2 or more, so for those cases the two mpu queries are answered
    in memory (restored afterwards): the loader NeoX builds is then rank 0's, the rank whose
    ``len(train_loader)`` update_iterations turns into train_iters.
    """
    mpu = neox.data_utils.mpu
    assert mpu.get_data_parallel_world_size() == 1 and mpu.get_data_parallel_rank() == 0
    if size == 1:
        yield
        return
    saved = mpu.get_data_parallel_world_size, mpu.get_data_parallel_rank
    mpu.get_data_parallel_world_size = lambda: size
    mpu.get_data_parallel_rank = lambda: 0
    try:
        yield
    finally:
        mpu.get_data_parallel_world_size, mpu.get_data_parallel_rank = saved


def call_neox(neox: Neox, case: CaseSpec, directory: str) -> dict[str, Any]:
    """Run NeoX's ``build_train_valid_test_data_loaders`` for ``case`` on corpora in ``directory``.

    In train_epochs mode, then NeoX's own ``megatron.training.update_iterations`` on the loaders it built.
    """

    def path(spec: CorpusSpec) -> str:
        return os.path.join(directory, spec.label)

    common: dict[str, Any] = dict(
        train_iters=case.train_iters,
        train_batch_size=case.train_batch_size,
        eval_interval=case.eval_interval,
        eval_iters=case.eval_iters,
        seq_length=case.seq_length,
        seed=case.seed,
    )
    if case.train_epochs is not None:
        common.update(
            train_epochs=case.train_epochs,
            train_micro_batch_size_per_gpu=case.micro_batch,
            gradient_accumulation_steps=case.gradient_accumulation_steps,
        )
    if case.mode == "data_path":
        assert case.data_path is not None and case.split is not None
        args = neox_args(data_path=path(case.data_path), split=case.split, **common)
    else:
        args = neox_args(
            train_data_paths=[path(c) for c in case.train],
            valid_data_paths=[path(c) for c in case.valid],
            test_data_paths=[path(c) for c in case.test],
            train_data_weights=case.weights(),
            valid_data_weights=[1.0] * len(case.valid),
            test_data_weights=[1.0] * len(case.test),
            weight_by_num_documents=case.weight_by_num_documents,
            weighted_sampler_alpha=case.weighted_sampler_alpha,
            **common,
        )
    with data_parallel_stand_in(neox, case.data_parallel_size):
        loaders = neox.data_utils.build_train_valid_test_data_loaders(args)
    out = {
        "loaders": loaders,
        "flags": {"do_train": int(args.do_train), "do_valid": int(args.do_valid), "do_test": int(args.do_test)},
    }
    if case.epochs_mode():
        from megatron.training import update_iterations  # imported late: it pulls in the model code

        before = args.train_iters
        update_iterations(args, loaders)
        out["train_iters"] = args.train_iters
        assert before is None and isinstance(out["train_iters"], int)
    return out


def dataset_record(
    ds: Any, build: dict[str, Any], label: str, directory: str, num_epochs: int | None = None
) -> dict[str, Any]:
    """JSON record of one NeoX GPT2Dataset and the index files NeoX wrote for it.

    ``num_epochs``: what NeoX must have passed to ``_build_index_mappings`` (1 in train_epochs mode).
    """
    documents = build["documents"]
    assert build["contiguous"], "a split's documents are always a contiguous range"
    assert build["seq_length"] == ds.seq_length and build["num_epochs"] == num_epochs
    num_docs = documents[1] - documents[0]
    assert ds.doc_idx.shape[0] % num_docs == 0
    tokens = int(np.sum(ds.indexed_dataset.sizes[documents[0] : documents[1]], dtype=np.int64))
    base = f"{label}_{ds.name}_indexmap_"
    files = sorted(f for f in os.listdir(directory) if f.startswith(base) and f.endswith(".npy"))
    assert len(files) == 3, files
    return {
        "name": ds.name,
        "prefix": label,
        "documents": list(documents),
        "num_documents": num_docs,
        "tokens_per_epoch": tokens,
        "num_samples": build["num_samples"],
        "num_epochs_arg": build["num_epochs"],
        "epochs": int(ds.doc_idx.shape[0] // num_docs),
        "doc_idx_len": int(ds.doc_idx.shape[0]),
        "sample_idx_rows": int(ds.sample_idx.shape[0]),
        "shuffle_idx_len": int(ds.shuffle_idx.shape[0]),
        "len": len(ds),
        "dtypes": {k: str(getattr(ds, k).dtype) for k in ("doc_idx", "sample_idx", "shuffle_idx")},
        "sha1": {k: array_sha1(getattr(ds, k)) for k in ("doc_idx", "sample_idx", "shuffle_idx")},
        "cache_files": ["{prefix}" + f[len(label) :] for f in files],
    }
