#!/usr/bin/env python3
"""Golden numbers from REAL GPT-NeoX data code, written as test fixtures.

Usage::

    NEOX_DIR=/path/to/gpt-neox python scripts/neox_golden.py OUT_DIR [--neox-commit SHA]

Run it with a Python environment that can import NeoX's data code (see ``scripts/neox_env.sh``) and
in which ``neox_epoch`` is importable. Nothing of NeoX is copied: the script imports NeoX from
``$NEOX_DIR`` and calls its own functions.

For every case the script writes deterministic random corpora (``neox_epoch.formats.corpus``) into a fresh
temporary directory, builds a minimal argument object with exactly the attributes NeoX reads, and
calls NeoX's ``build_train_valid_test_data_loaders`` -- the function ``megatron/training.py`` calls --
which in turn runs ``get_train_valid_test_split_`` / ``build_train_valid_test_datasets`` (``data_path``
mode) or ``get_normalized_weights_and_num_samples`` / ``weights_by_num_docs`` /
``build_weighted_datasets`` / ``build_the_dataset`` / ``BlendableDataset`` (``train_data_paths`` mode).
Those inner functions are wrapped in memory (never edited) only to record the arguments NeoX passed
and the results it got. The one CUDA call on that path (``torch.cuda.LongTensor``) is replaced by a
CPU tensor factory; distributed state is a 1-process gloo group plus NeoX's ``mpu``.

In NeoX's ``train_epochs`` mode (the ``e*`` cases: train_iters None, every split built for one epoch) the
script then calls NeoX's own ``megatron.training.update_iterations`` on the loaders NeoX built, and records
the train_iters it sets, the loader's batch and length. The loader batch is micro * dp, dp read from NeoX's
``mpu``; a data-parallel size above 1 is answered in memory for this one process, as its rank 0. The ``r*``
cases are configurations NeoX refuses in that mode; the exception and message are recorded.

Then, for the first ``train_iters * train_batch_size`` samples of each case's training dataset (in
``train_epochs`` mode: the distinct samples of the cycled loader, at most one pass of full batches), the
script maps every sample back to (document, token position) through the dataset's own
``doc_idx``/``sample_idx``/``shuffle_idx`` (and the blend's ``dataset_index``/``dataset_sample_index``),
checks the mapped tokens against ``dataset[i]['text']`` for every sample, and records how often each
token of each source was an input token (``tokens[:-1]``).

Output: ``OUT_DIR/neox_golden.json`` (sorted keys, indent 1) and ``OUT_DIR/neox_cache/`` holding the
named corpora (.bin/.idx) and the NeoX index files (.npy) of the headline case and of the blend cases,
laid out as NeoX's own data directory would be (index files beside the corpora).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import inspect
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import ModuleType, SimpleNamespace
from typing import Any, NoReturn

import numpy as np

#: NeoX's default seed (neox_args.seed)
NEOX_SEED = 1234
#: the case whose exposure is the project's headline
HEADLINE_CASE = "b_one_path_one_epoch"
#: files bigger than this are not copied into the fixture cache
MAX_COPY_BYTES = 512 * 1024
#: the fixture cache must stay below this
MAX_CACHE_BYTES = 2 * 1024 * 1024
WRAP_WARNING = "WARNING: Got index out of bounds"


def die(message: str) -> NoReturn:
    """Print a one-line error and exit with status 2."""
    first = message.strip().splitlines()[0] if message.strip() else "unknown error"
    print(f"neox_golden: error: {first}", file=sys.stderr)
    sys.exit(2)


# ----------------------------------------------------------------------------------------------
# Corpora
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CorpusSpec:
    """Parameters of one deterministic random corpus (``neox_epoch.formats.corpus.write_random_corpus``)."""

    label: str
    seed: int
    num_documents: int
    min_len: int
    max_len: int


@dataclass
class Corpus:
    """A written corpus: its spec, where it lives, and its tokens read back without NeoX."""

    spec: CorpusSpec
    prefix: str
    sizes: np.ndarray
    """int64 document lengths."""
    offsets: np.ndarray
    """int64 token offset of each document in ``tokens`` (len = documents + 1)."""
    tokens: np.ndarray
    """All tokens, concatenated in document order (int64)."""


def write_corpus(spec: CorpusSpec, directory: str) -> Corpus:
    """Write ``spec`` as ``directory/<label>.bin/.idx`` and read it back with the project's reader."""
    from neox_epoch.formats.corpus import write_random_corpus
    from neox_epoch.formats.idx import read_header, sizes_memmap, tokens_memmap

    prefix = os.path.join(directory, spec.label)
    write_random_corpus(prefix, spec.seed, spec.num_documents, spec.min_len, spec.max_len)
    header = read_header(prefix)
    sizes = np.array(sizes_memmap(header), dtype=np.int64)
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    tokens = np.array(tokens_memmap(header), dtype=np.int64)
    assert tokens.shape[0] == offsets[-1], "token count of .bin disagrees with the .idx sizes"
    return Corpus(spec=spec, prefix=prefix, sizes=sizes, offsets=offsets, tokens=tokens)


def file_sha1(path: str) -> str:
    """sha1 of a file's bytes."""
    with open(path, "rb") as f:
        return hashlib.sha1(f.read()).hexdigest()


def array_sha1(array: np.ndarray) -> str:
    """sha1 of an array's C-ordered bytes."""
    return hashlib.sha1(np.ascontiguousarray(array).tobytes()).hexdigest()


def corpus_record(corpus: Corpus) -> dict[str, Any]:
    """JSON record of a corpus: how to regenerate it and checksums to verify the regeneration."""
    s = corpus.spec
    return {
        "seed": s.seed,
        "num_documents": s.num_documents,
        "min_len": s.min_len,
        "max_len": s.max_len,
        "dtype": "uint16",
        "num_tokens": int(corpus.offsets[-1]),
        "sha1_bin": file_sha1(corpus.prefix + ".bin"),
        "sha1_idx": file_sha1(corpus.prefix + ".idx"),
    }


# ----------------------------------------------------------------------------------------------
# NeoX
# ----------------------------------------------------------------------------------------------


@dataclass
class Recorder:
    """What NeoX's inner data functions were called with, collected by in-memory wrappers."""

    index_builds: list[dict[str, Any]] = field(default_factory=list)
    normalize_calls: list[dict[str, Any]] = field(default_factory=list)
    blends: list[dict[str, Any]] = field(default_factory=list)

    def reset(self) -> None:
        """Forget everything recorded so far."""
        self.index_builds.clear()
        self.normalize_calls.clear()
        self.blends.clear()


@dataclass
class Neox:
    """Handles on NeoX's imported modules and the recorder wrapped around them."""

    torch: ModuleType
    data_utils: ModuleType
    gpt2_dataset: ModuleType
    blendable_dataset: ModuleType
    recorder: Recorder
    neox_dir: str


def load_neox(neox_dir: str | None) -> Neox:
    """Import NeoX's data code from ``neox_dir``; exit with a one-line message if that fails."""
    if not neox_dir:
        die("NEOX_DIR is not set: point it at a GPT-NeoX checkout (see scripts/neox_env.sh)")
    neox_dir = os.path.abspath(neox_dir)
    if not os.path.isfile(os.path.join(neox_dir, "megatron", "data", "gpt2_dataset.py")):
        die(f"NEOX_DIR={neox_dir} is not a GPT-NeoX checkout (no megatron/data/gpt2_dataset.py)")
    sys.path.insert(0, neox_dir)
    try:
        import megatron
        import torch
        from megatron.data import blendable_dataset, data_utils, gpt2_dataset
    except BaseException as exc:  # any import failure gets the same one-line message
        die(f"cannot import GPT-NeoX's data code from NEOX_DIR={neox_dir}: {type(exc).__name__}: {exc}")
    where = os.path.realpath(os.path.dirname(megatron.__file__))
    if not where.startswith(os.path.realpath(neox_dir) + os.sep):
        die(f"'megatron' was imported from {where}, not from NEOX_DIR={neox_dir}")
    try:
        from megatron.data import helpers  # noqa: F401 - compiled at run time by NeoX
    except ImportError:
        die(f"NeoX's C++ helpers are not compiled: run `make -C {neox_dir}/megatron/data` (see scripts/neox_env.sh)")
    return Neox(torch, data_utils, gpt2_dataset, blendable_dataset, Recorder(), neox_dir)


def init_distributed(neox: Neox, workdir: str) -> None:
    """1-process gloo group, NeoX's mpu, and a CPU stand-in for the barrier's ``torch.cuda.LongTensor``."""
    torch = neox.torch
    from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology
    from megatron import mpu

    store = os.path.join(workdir, "gloo_store")
    torch.distributed.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    topology = PipeModelDataParallelTopology(num_pp=1, num_mp=1, num_dp=1)
    mpu.initialize_model_parallel(1, topology=topology)

    def cpu_long_tensor(data: Any) -> Any:
        """CPU replacement for ``torch.cuda.LongTensor(list)`` (NeoX's barrier and flag broadcast)."""
        return torch.tensor(data, dtype=torch.long)

    torch.cuda.LongTensor = cpu_long_tensor  # type: ignore[attr-defined]


def install_recorders(neox: Neox) -> None:
    """Wrap (in memory) the NeoX functions whose arguments and results the fixtures record."""
    rec = neox.recorder
    gd, du = neox.gpt2_dataset, neox.data_utils
    real_build = gd._build_index_mappings
    real_normalize = du.get_normalized_weights_and_num_samples
    real_blend = du.BlendableDataset

    build_signature = inspect.signature(real_build)

    def build_index_mappings(*args: Any, **kwargs: Any) -> Any:
        """Record one ``_build_index_mappings`` call, then run NeoX's."""
        call = build_signature.bind(*args, **kwargs).arguments
        documents = np.asarray(call["documents"])
        out = real_build(*args, **kwargs)
        rec.index_builds.append(
            {
                "name": call["name"],
                "data_prefix": call["data_prefix"],
                "documents": (int(documents[0]), int(documents[-1]) + 1),
                "contiguous": bool(np.array_equal(documents, np.arange(documents[0], documents[-1] + 1))),
                "num_samples": call["num_samples"],
                "num_epochs": call["num_epochs"],
                "seq_length": call["seq_length"],
                "seed": call["seed"],
            }
        )
        return out

    def normalize(weights: list[float], num_samples: int | None) -> Any:
        """Record one ``get_normalized_weights_and_num_samples`` call, then run NeoX's."""
        out_weights, out_samples = real_normalize(weights, num_samples)
        rec.normalize_calls.append(
            {
                "weights_in": [float(w) for w in weights],
                "num_samples_in": num_samples,
                "weights": [float(w) for w in out_weights],
                "num_samples": list(out_samples),
            }
        )
        return out_weights, out_samples

    class RecordingBlendableDataset(real_blend):  # type: ignore[misc, valid-type]
        """NeoX's BlendableDataset, remembering the weights it was given."""

        def __init__(self, datasets: list[Any], weights: list[float]) -> None:
            self.weights_given = [float(w) for w in weights]
            super().__init__(datasets, weights)
            rec.blends.append({"dataset": self})

    gd._build_index_mappings = build_index_mappings
    du.get_normalized_weights_and_num_samples = normalize
    du.BlendableDataset = RecordingBlendableDataset


@contextlib.contextmanager
def capture_fd1(path: str) -> Iterator[None]:
    """Send file descriptor 1 (Python prints and NeoX's C++ ``std::cout``) to ``path``."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 1)
        try:
            yield
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)


PATH_FIELDS = [
    f"{pre}{split}{kind}_data_paths"
    for pre in ("", "pos_", "neg_")
    for split in ("train", "valid", "test")
    for kind in ("", "_label")
] + [f"{split}_reward_data_paths" for split in ("train", "valid", "test")]


def neox_args(**overrides: Any) -> SimpleNamespace:
    """A minimal stand-in for NeoXArgs with exactly the attributes the data path reads.

    Defaults are NeoX's (``pack_impl`` packed, ``allow_chopped`` True, ``use_shared_fs`` True,
    ``mmap_warmup`` False, ``dataset_impl`` gpt2, ``weighted_sampler_alpha`` 1.0) except
    ``data_impl`` ("mmap": NeoX's default "infer" is broken) and ``num_workers`` (0: in-process).
    An attribute NeoX reads that is missing here raises AttributeError instead of a silent default.
    """
    args: dict[str, Any] = {name: None for name in PATH_FIELDS}
    args.update(
        train_epochs=None,
        train_iters=None,
        eval_interval=1000,
        eval_iters=10,
        train_batch_size=None,
        train_micro_batch_size_per_gpu=None,
        batch_size=None,
        gradient_accumulation_steps=1,
        do_train=None,
        do_valid=None,
        do_test=None,
        is_pipe_parallel=False,
        dataset_impl="gpt2",
        data_impl="mmap",
        pack_impl="packed",
        allow_chopped=True,
        data_path=None,
        split="969, 30, 1",
        use_shared_fs=True,
        seq_length=2048,
        seed=NEOX_SEED,
        mmap_warmup=False,
        num_workers=0,
        train_data_weights=None,
        valid_data_weights=None,
        test_data_weights=None,
        weight_by_num_documents=False,
        weighted_sampler_alpha=1.0,
        precompute_model_name=None,
    )
    unknown = set(overrides) - set(args)
    assert not unknown, f"not a NeoX data argument: {sorted(unknown)}"
    args.update(overrides)
    if args["batch_size"] is None:
        # NeoX's calculate_derived sets batch_size = train_micro_batch_size_per_gpu; without a micro batch the
        # cases run with dp = 1 and gas = 1, so the micro batch is train_batch_size
        micro = args["train_micro_batch_size_per_gpu"]
        args["batch_size"] = micro if micro is not None else args["train_batch_size"]
    return SimpleNamespace(**args)


# ----------------------------------------------------------------------------------------------
# Cases
# ----------------------------------------------------------------------------------------------


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


# ----------------------------------------------------------------------------------------------
# Exposure
# ----------------------------------------------------------------------------------------------


@dataclass
class Source:
    """One GPT2Dataset of a training set, with its corpus and the input-token coverage counts."""

    ds: Any
    corpus: Corpus
    documents: tuple[int, int]
    cover: np.ndarray = field(init=False)
    samples: int = 0
    wrapped: int = 0

    def __post_init__(self) -> None:
        self.cover = np.zeros(self.corpus.tokens.shape[0], dtype=np.int64)

    def positions(self, j: int) -> np.ndarray:
        """Flat corpus positions of the tokens of sample ``j`` of this dataset, the way __getitem__ reads them.

        Past the end of ``shuffle_idx`` NeoX's IndexError handler retries with ``j % len(dataset)``.
        """
        ds = self.ds
        if j >= ds.shuffle_idx.shape[0]:
            self.wrapped += 1
            j = j % len(ds)
        s = int(ds.shuffle_idx[j])
        f, off_f = (int(x) for x in ds.sample_idx[s])
        last, off_l = (int(x) for x in ds.sample_idx[s + 1])
        start = self.corpus.offsets
        doc = [int(d) for d in ds.doc_idx[f : last + 1]]
        if f == last:
            return np.arange(start[doc[0]] + off_f, start[doc[0]] + off_l + 1)
        parts = [np.arange(start[doc[0]] + off_f, start[doc[0] + 1])]
        parts += [np.arange(start[d], start[d + 1]) for d in doc[1:-1]]
        parts.append(np.arange(start[doc[-1]], start[doc[-1]] + off_l + 1))
        return np.concatenate(parts)


def exposure(train: Any, sources: list[Source], blend: Any | None, n: int, seq_length: int, log: str) -> dict[str, Any]:
    """Coverage of each source's split by the inputs of the first ``n`` training samples.

    Every sample's mapped tokens are compared with ``train[i]['text']`` (NeoX's own __getitem__), and
    the number of index wraps the mapping predicts with the number of wrap warnings NeoX printed.
    """
    mismatches = padded = blend_wrapped = 0
    log_start = os.path.getsize(log) if os.path.exists(log) else 0
    with capture_fd1(log):
        for i in range(n):
            if blend is None:
                src, j = sources[0], i
            else:
                b = i
                if b >= len(blend):
                    blend_wrapped += 1
                    b = b % len(blend)
                src, j = sources[int(blend.dataset_index[b])], int(blend.dataset_sample_index[b])
            pos = src.positions(j)[: seq_length + 1]
            expected = np.zeros(seq_length + 1, dtype=np.int64)
            expected[: pos.shape[0]] = src.corpus.tokens[pos]
            padded += int(pos.shape[0] < seq_length + 1)
            if not np.array_equal(train[i]["text"], expected):
                mismatches += 1
            np.add.at(src.cover, pos[:seq_length], 1)
            src.samples += 1
    with open(log, "rb") as f:
        f.seek(log_start)
        neox_warnings = f.read().decode(errors="replace").count(WRAP_WARNING)
    if mismatches:
        raise AssertionError(f"{mismatches} of {n} samples: mapped tokens differ from NeoX's dataset[i]['text']")
    records = []
    for src in sources:
        a, b = src.documents
        cover = src.cover[src.corpus.offsets[a] : src.corpus.offsets[b]]
        outside = int(src.cover.sum() - cover.sum())
        assert outside == 0, "a sample read tokens outside its split"
        hist = np.bincount(cover)
        total = int(cover.shape[0])
        records.append(
            {
                "name": src.ds.name,
                "prefix": src.corpus.spec.label,
                "documents": [a, b],
                "tokens": total,
                "samples": src.samples,
                "wrapped_samples": src.wrapped,
                "input_tokens": int(cover.sum()),
                "histogram": {str(k): int(v) for k, v in enumerate(hist) if v},
                "fraction_unseen": round(float(hist[0]) / total, 6) if total else None,
                "fraction_once": round(float(hist[1]) / total, 6) if total and len(hist) > 1 else 0.0,
                "fraction_twice": round(float(hist[2]) / total, 6) if total and len(hist) > 2 else 0.0,
                "fraction_more": round(float(hist[3:].sum()) / total, 6) if total else None,
                "max_times_seen": int(len(hist) - 1),
            }
        )
    wrapped = blend_wrapped + sum(s.wrapped for s in sources)
    assert neox_warnings == wrapped, f"NeoX printed {neox_warnings} wrap warnings, the mapping expected {wrapped}"
    return {
        "samples": n,
        "seq_length": seq_length,
        "checked_samples": n,
        "padded_samples": padded,
        "blend_wrapped_samples": blend_wrapped,
        "neox_wrap_warnings": neox_warnings,
        "sources": records,
    }


# ----------------------------------------------------------------------------------------------
# Running a case
# ----------------------------------------------------------------------------------------------


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

        def sources() -> list[Source]:
            return [
                Source(ds, corpora[spec.label], builds[(ds.name, corpora[spec.label].prefix)]["documents"])
                for ds, spec in zip(blend.datasets, case.train, strict=True)
            ]

        out["exposure"] = exposure(blend, sources(), blend, n, case.seq_length, log)
        if case.full_blend_exposure:
            out["exposure_full_blend"] = exposure(blend, sources(), blend, len(blend), case.seq_length, log)
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


# ----------------------------------------------------------------------------------------------
# The cases
# ----------------------------------------------------------------------------------------------

CORPUS_A = CorpusSpec("corpus_a", 11, 1000, 1, 300)
CORPUS_B = CorpusSpec("corpus_b", 12, 200, 1, 300)
CORPUS_VALID = CorpusSpec("corpus_valid", 13, 40, 1, 300)
CORPUS_TEST = CorpusSpec("corpus_test", 14, 20, 1, 300)
CORPUS_C0 = CorpusSpec("corpus_c0", 21, 400, 1, 300)
CORPUS_C1 = CorpusSpec("corpus_c1", 22, 60, 1, 300)
CORPUS_C2 = CorpusSpec("corpus_c2", 23, 250, 20, 120)


def one_epoch_iters(spec: CorpusSpec, seq_length: int, tbs: int, documents: tuple[int, int] | None = None) -> int:
    """train_iters of exactly one pass: S = (T-1)//seq_length samples, len = S-1, iters = (S-1)//tbs."""
    from neox_epoch.formats.corpus import random_documents

    docs = random_documents(spec.seed, spec.num_documents, spec.min_len, spec.max_len)
    a, b = documents if documents is not None else (0, spec.num_documents)
    tokens = sum(len(d) for d in docs[a:b])
    samples = (tokens - 1) // seq_length
    return (samples - 1) // tbs


def named_cases() -> list[CaseSpec]:
    """Cases a (data_path + split), b (one path, 'exactly one epoch'), c (three weighted paths)."""
    return [
        CaseSpec(
            name="a1_split_969_30_1",
            description="data_path + split 969,30,1 on a 1000-document corpus",
            mode="data_path",
            data_path=CORPUS_A,
            split="969,30,1",
            seq_length=64,
            train_iters=250,
            train_batch_size=8,
            eval_interval=100,
            eval_iters=5,
        ),
        CaseSpec(
            name="a2_split_98_1_1",
            description="data_path + split 98,1,1 on a 200-document corpus",
            mode="data_path",
            data_path=CORPUS_B,
            split="98,1,1",
            seq_length=32,
            train_iters=300,
            train_batch_size=4,
            eval_interval=50,
            eval_iters=3,
        ),
        CaseSpec(
            name="a3_split_one_epoch",
            description="data_path + split 969,30,1, train_iters = one pass over the train split (no 1.005 factor)",
            mode="data_path",
            data_path=CORPUS_A,
            split="969,30,1",
            seq_length=64,
            train_iters=one_epoch_iters(CORPUS_A, 64, 8, (0, 969)),
            train_batch_size=8,
            eval_interval=1000,
            eval_iters=2,
        ),
        CaseSpec(
            name=HEADLINE_CASE,
            description="train_data_paths with one path, train_iters = (S-1)//tbs: exactly one epoch asked",
            mode="train_data_paths",
            train=[CORPUS_A],
            valid=[CORPUS_VALID],
            test=[CORPUS_TEST],
            seq_length=64,
            train_iters=one_epoch_iters(CORPUS_A, 64, 8),
            train_batch_size=8,
            eval_interval=1000,
            eval_iters=2,
            copy_index_files=True,
            full_blend_exposure=True,
        ),
        CaseSpec(
            name="c1_three_paths_3_1_2",
            description="train_data_paths with three sources, weights 3:1:2",
            mode="train_data_paths",
            train=[CORPUS_C0, CORPUS_C1, CORPUS_C2],
            valid=[CORPUS_VALID],
            test=[CORPUS_TEST],
            train_weights=[3.0, 1.0, 2.0],
            seq_length=32,
            train_iters=300,
            train_batch_size=8,
            eval_interval=100,
            eval_iters=2,
            copy_index_files=True,
            full_blend_exposure=True,
        ),
        CaseSpec(
            name="c2_three_paths_by_num_docs",
            description="three sources, weight_by_num_documents with weighted_sampler_alpha 0.3",
            mode="train_data_paths",
            train=[CORPUS_C0, CORPUS_C1, CORPUS_C2],
            valid=[CORPUS_VALID],
            test=[CORPUS_TEST],
            train_weights=[3.0, 1.0, 2.0],
            weight_by_num_documents=True,
            weighted_sampler_alpha=0.3,
            seq_length=32,
            train_iters=300,
            train_batch_size=8,
            eval_interval=100,
            eval_iters=2,
            copy_index_files=True,
            full_blend_exposure=True,
        ),
    ]


def train_epochs_cases() -> list[CaseSpec]:
    """NeoX's train_epochs mode (train_iters None): data_path + split and two train paths without weights,
    train_epochs 1 and 3, gradient_accumulation_steps 1 and 2, data-parallel sizes 1 to 4."""
    return [
        CaseSpec(
            name="e1_split_epochs1_dp4",
            description="train_epochs 1, data_path + split 90,5,5, micro 2 * gas 1 * dp 4 = 8",
            mode="data_path",
            data_path=CORPUS_A,
            split="90,5,5",
            seq_length=64,
            train_iters=None,
            train_epochs=1,
            train_batch_size=8,
            micro_batch=2,
            gradient_accumulation_steps=1,
            data_parallel_size=4,
            eval_interval=100,
            eval_iters=5,
        ),
        CaseSpec(
            name="e2_split_epochs3_gas2",
            description="train_epochs 3, data_path + split 90,5,5, micro 3 * gas 2 * dp 2 = 12",
            mode="data_path",
            data_path=CORPUS_B,
            split="90,5,5",
            seq_length=32,
            train_iters=None,
            train_epochs=3,
            train_batch_size=12,
            micro_batch=3,
            gradient_accumulation_steps=2,
            data_parallel_size=2,
            eval_interval=50,
            eval_iters=3,
        ),
        CaseSpec(
            name="e3_two_paths_epochs1_gas2",
            description="train_epochs 1, two train paths, train_data_weights not given, micro 5 * gas 2 * dp 1 = 10",
            mode="train_data_paths",
            train=[CORPUS_C0, CORPUS_C1],
            valid=[CORPUS_VALID],
            test=[CORPUS_TEST],
            pass_weights=False,
            seq_length=32,
            train_iters=None,
            train_epochs=1,
            train_batch_size=10,
            micro_batch=5,
            gradient_accumulation_steps=2,
            data_parallel_size=1,
            eval_interval=100,
            eval_iters=2,
        ),
        CaseSpec(
            name="e4_two_paths_epochs3_dp3",
            description="train_epochs 3, two train paths, train_data_weights not given, micro 2 * gas 1 * dp 3 = 6",
            mode="train_data_paths",
            train=[CORPUS_C0, CORPUS_C2],
            valid=[CORPUS_VALID],
            test=[CORPUS_TEST],
            pass_weights=False,
            seq_length=32,
            train_iters=None,
            train_epochs=3,
            train_batch_size=6,
            micro_batch=2,
            gradient_accumulation_steps=1,
            data_parallel_size=3,
            eval_interval=100,
            eval_iters=2,
        ),
    ]


def refused_cases() -> list[CaseSpec]:
    """train_epochs configurations NeoX's validate_train_epochs refuses before building anything."""
    paths = dict(
        mode="train_data_paths",
        train=[CORPUS_C0, CORPUS_C1],
        valid=[CORPUS_VALID],
        test=[CORPUS_TEST],
        seq_length=32,
        train_iters=None,
        train_epochs=1,
        train_batch_size=8,
        micro_batch=4,
        gradient_accumulation_steps=2,
        eval_interval=100,
        eval_iters=2,
    )
    return [
        CaseSpec(
            name="r1_epochs_weights_3_1",
            description="train_epochs with train_data_weights 3:1",
            train_weights=[3.0, 1.0],
            **paths,
        ),  # type: ignore[arg-type]
        CaseSpec(
            name="r2_epochs_weights_2_2",
            description="train_epochs with equal weights that are not 1.0",
            train_weights=[2.0, 2.0],
            **paths,
        ),  # type: ignore[arg-type]
        CaseSpec(
            name="r3_epochs_by_num_documents",
            description="train_epochs with weight_by_num_documents",
            weight_by_num_documents=True,
            weighted_sampler_alpha=0.3,
            pass_weights=False,
            **paths,
        ),  # type: ignore[arg-type]
        CaseSpec(
            name="r4_epochs_and_iters",
            description="train_epochs and train_iters both given",
            mode="data_path",
            data_path=CORPUS_A,
            split="969,30,1",
            seq_length=64,
            train_iters=100,
            train_epochs=1,
            train_batch_size=8,
            micro_batch=8,
            eval_interval=100,
            eval_iters=2,
        ),
    ]


SPLITS = ["969,30,1", "98,1,1", "90,5,5", "80/10/10", "949,50,1", "1"]


def random_corpus(rng: np.random.RandomState, label: str, lo: int = 20, hi: int = 400) -> CorpusSpec:
    """A random corpus spec: lo..hi documents, lengths within 1..300."""
    min_len = int(rng.randint(1, 60))
    return CorpusSpec(
        label, int(rng.randint(0, 2**31 - 1)), int(rng.randint(lo, hi + 1)), min_len, int(rng.randint(min_len, 301))
    )


def random_cases(count: int) -> list[CaseSpec]:
    """Randomized small cases (both modes) with their parameters drawn from fixed seeds."""
    cases = []
    for k in range(count):
        rng = np.random.RandomState(1000 + k)
        mode = "data_path" if k % 2 == 0 else "train_data_paths"
        seq = int(rng.randint(8, 129))
        tbs = int(rng.choice([1, 2, 4, 8, 16]))
        eval_interval = int(rng.randint(10, 300))
        eval_iters = int(rng.randint(1, 6))
        factor = float(rng.uniform(0.1, 2.5))
        name = f"d{k}_random_{'split' if mode == 'data_path' else 'paths'}"
        if mode == "data_path":
            corpus = random_corpus(rng, f"{name}_corpus")
            mean_len = (corpus.min_len + corpus.max_len) / 2
            iters = max(1, int(factor * corpus.num_documents * mean_len / seq / tbs))
            cases.append(
                CaseSpec(
                    name=name,
                    description=f"random data_path case (seed {1000 + k}), ~{factor:.2f} epochs asked",
                    mode=mode,
                    data_path=corpus,
                    split=SPLITS[int(rng.randint(len(SPLITS)))],
                    seq_length=seq,
                    train_iters=iters,
                    train_batch_size=tbs,
                    eval_interval=eval_interval,
                    eval_iters=eval_iters,
                    copy_corpora=False,
                )
            )
        else:
            n_src = int(rng.randint(1, 4))
            train = [random_corpus(rng, f"{name}_train{i}") for i in range(n_src)]
            weights = [float(w) for w in rng.randint(1, 6, size=n_src)]
            by_docs = bool(rng.randint(2)) and n_src > 1
            alpha = float(rng.choice([0.3, 0.5, 1.0]))
            tokens = sum(c.num_documents * (c.min_len + c.max_len) / 2 for c in train)
            iters = max(1, int(factor * tokens / seq / tbs))
            cases.append(
                CaseSpec(
                    name=name,
                    description=f"random train_data_paths case (seed {1000 + k}), ~{factor:.2f} epochs asked",
                    mode=mode,
                    train=train,
                    valid=[random_corpus(rng, f"{name}_valid", 5, 40)],
                    test=[random_corpus(rng, f"{name}_test", 5, 40)],
                    train_weights=weights,
                    weight_by_num_documents=by_docs,
                    weighted_sampler_alpha=alpha if by_docs else 1.0,
                    seq_length=seq,
                    train_iters=iters,
                    train_batch_size=tbs,
                    eval_interval=eval_interval,
                    eval_iters=eval_iters,
                    copy_corpora=False,
                )
            )
    return cases


# ----------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------


def _git(*args: str) -> str:
    """Output of a git command, or "" when it fails."""
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def neox_commit(neox_dir: str, given: str | None) -> str:
    """The NeoX commit: as given, else from ``$NEOX_GIT_DIR`` or the checkout's own git, else "unknown"."""
    if given:
        return given
    if os.environ.get("NEOX_GIT_DIR"):
        out = _git(f"--git-dir={os.environ['NEOX_GIT_DIR']}", "rev-parse", "HEAD")
        if out:
            return out
    # Only trust the checkout's git if NEOX_DIR is the top of that work tree (not inside another repo).
    top = _git("-C", neox_dir, "rev-parse", "--show-toplevel")
    if top and os.path.realpath(top) == os.path.realpath(neox_dir):
        return _git("-C", neox_dir, "rev-parse", "HEAD") or "unknown"
    return "unknown"


def versions(neox: Neox) -> dict[str, str]:
    """Versions of the libraries the numbers came from."""
    import deepspeed

    return {
        "torch": neox.torch.__version__,
        "numpy": np.__version__,
        "deepspeed": deepspeed.__version__,
        "python": platform.python_version(),
    }


def copy_fixtures(out_dir: str, results: list[tuple[CaseSpec, dict[str, Corpus], str]]) -> dict[str, Any]:
    """Copy named corpora and the index files of the flagged cases into ``out_dir/neox_cache``."""
    cache = os.path.join(out_dir, "neox_cache")
    os.makedirs(cache)
    copied: list[str] = []
    skipped: list[str] = []

    def copy(src: str) -> None:
        dst = os.path.join(cache, os.path.basename(src))
        if os.path.getsize(src) > MAX_COPY_BYTES:
            skipped.append(os.path.basename(src))
            return
        if os.path.exists(dst):
            assert file_sha1(dst) == file_sha1(src), f"two different files named {os.path.basename(src)}"
            return
        shutil.copyfile(src, dst)
        copied.append(os.path.basename(src))

    for case, corpora, directory in results:
        if not case.copy_corpora:
            continue
        for corpus in corpora.values():
            copy(corpus.prefix + ".bin")
            copy(corpus.prefix + ".idx")
        if case.copy_index_files:
            for f in sorted(os.listdir(directory)):
                if "_indexmap_" in f and f.endswith(".npy"):
                    copy(os.path.join(directory, f))
    total = sum(os.path.getsize(os.path.join(cache, f)) for f in copied)
    if total > MAX_CACHE_BYTES:
        die(f"fixture cache would be {total} bytes, over {MAX_CACHE_BYTES}")
    return {"files": sorted(copied), "skipped_too_big": sorted(skipped), "bytes": total}


def headline(record: dict[str, Any]) -> dict[str, Any]:
    """Key numbers of the headline case."""
    (train,) = [d for d in record["datasets"] if d["name"] == "train_0"]
    (exp,) = record["exposure"]["sources"]
    p = record["params"]
    samples_one_epoch = (train["tokens_per_epoch"] - 1) // p["seq_length"]
    return {
        "case": HEADLINE_CASE,
        "tokens": train["tokens_per_epoch"],
        "seq_length": p["seq_length"],
        "train_batch_size": p["train_batch_size"],
        "samples_one_epoch": samples_one_epoch,
        "train_iters": p["train_iters"],
        "samples_consumed": record["num_samples"]["train"],
        "num_samples_requested": train["num_samples"],
        "epochs_built": train["epochs"],
        "len": train["len"],
        "fraction_unseen": exp["fraction_unseen"],
        "fraction_once": exp["fraction_once"],
        "fraction_twice": exp["fraction_twice"],
        "fraction_more": exp["fraction_more"],
        "histogram": exp["histogram"],
    }


def main(argv: list[str] | None = None) -> int:
    """Entry point: build every case with NeoX and write the fixtures to OUT_DIR."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", help="directory for neox_golden.json and neox_cache/")
    parser.add_argument("--neox-commit", help="NeoX commit to record (default: asked of git, else 'unknown')")
    parser.add_argument("--random-cases", type=int, default=8, help="number of randomized cases (default 8)")
    parser.add_argument("--keep-workdir", action="store_true", help="keep the temporary directory and NeoX's log")
    args = parser.parse_args(argv)

    started = time.time()
    try:
        import neox_epoch.formats.corpus  # noqa: F401
    except ImportError:
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        try:
            import neox_epoch.formats.corpus  # noqa: F401
        except ImportError as exc:
            die(f"cannot import neox_epoch: {exc}")
    neox = load_neox(os.environ.get("NEOX_DIR"))
    workdir = tempfile.mkdtemp(prefix="neox_golden_")
    log = os.path.join(workdir, "neox.log")
    try:
        with capture_fd1(log):
            init_distributed(neox, workdir)
        install_recorders(neox)
        cases = named_cases() + random_cases(args.random_cases) + train_epochs_cases()
        refused = refused_cases()
        records: dict[str, Any] = {}
        refused_records: dict[str, Any] = {}
        results = []
        all_corpora: dict[str, Corpus] = {}
        refused_names = {case.name for case in refused}
        for case in cases + refused:
            t0 = time.time()
            runner = run_refused_case if case.name in refused_names else run_case
            try:
                record, corpora, directory = runner(neox, case, workdir, log)
            except Exception:
                print(f"neox_golden: case {case.name} failed; NeoX's log: {log}", file=sys.stderr)
                args.keep_workdir = True
                raise
            (refused_records if case.name in refused_names else records)[case.name] = record
            results.append((case, corpora, directory))
            all_corpora.update(corpora)
            print(f"{case.name}: {time.time() - t0:.1f} s", file=sys.stderr)

        out_json = os.path.join(args.out_dir, "neox_golden.json")
        os.makedirs(args.out_dir, exist_ok=True)
        if os.path.exists(out_json):
            os.remove(out_json)
        shutil.rmtree(os.path.join(args.out_dir, "neox_cache"), ignore_errors=True)
        fixtures = copy_fixtures(args.out_dir, results)
        copied = set(fixtures["files"])
        golden = {
            "generator": "scripts/neox_golden.py",
            "neox_commit": neox_commit(neox.neox_dir, args.neox_commit),
            "versions": versions(neox),
            "corpora": {
                label: {**corpus_record(c), "copied": f"{label}.bin" in copied}
                for label, c in sorted(all_corpora.items())
            },
            "cases": records,
            "refused": refused_records,
            "headline": headline(records[HEADLINE_CASE]),
            "neox_cache": fixtures,
        }
        with open(out_json, "w", encoding="utf-8") as f:
            json.dump(golden, f, sort_keys=True, indent=1)
            f.write("\n")
    finally:
        if args.keep_workdir:
            print(f"neox_golden: work directory kept: {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    h = golden["headline"]
    print(
        f"wrote {out_json}: {len(records)} cases in {time.time() - started:.1f} s; headline: "
        f"{h['epochs_built']} epochs built, unseen {h['fraction_unseen']:.4f}, once {h['fraction_once']:.4f}, "
        f"twice {h['fraction_twice']:.4f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
