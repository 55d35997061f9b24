"""Ground truth from the REAL megatron-core ``BlendedMegatronDatasetBuilder`` (not a pytest file).

Usage::

    PYTHONPATH=<dir with the wanted megatron-core> python tests/helpers/mcore_truth.py CASES.json OUT.json \
        [--timeout 60] [--jobs 1]

Every case (see ``tests/helpers/mcore_cases.py``) is built with ``BlendedMegatronDatasetBuilder(GPTDataset, sizes,
is_built_on_rank=lambda: True, config=GPTDatasetConfig(...)).build()`` and what megatron-core really built
is written to OUT.json; nothing here predicts anything. Each case runs in a forked worker process (the
megatron modules are imported once, before forking) that first joins a 1-process gloo group, so a case
that hangs (megatron-core loops forever on an empty split with samples requested) is killed after
``--timeout`` seconds and recorded as ``{"error": "Timeout"}``, and a crash does not end the run.

Each case builds into a fresh ``tempfile.mkdtemp`` directory under its ``path_to_cache``, so reruns and
runs of other versions never hit a cache.

Whether the final epoch was shuffled separately is taken from megatron-core's own DEBUG log line
(``> separate_final_epoch: ...``, caught with a logging filter that attributes each record to the
GPTDataset being built); the structure of shuffle_index/document_index is recorded beside it as an
independent check (see ``_gpt_record``).

OUT.json::

    {"megatron_core_version": package_info.__version__ (else the dist version),
     "megatron_core_dist_version", "megatron_core_dir", "null_tokenizer": what was used,
     "config_fields": {optional case key: whether GPTDatasetConfig has that field},
     "python", "numpy", "torch", "import_s", "elapsed_s", "num_cases", "num_errors",
     "cases": [CASE, ...]}                                   # in the order of CASES.json
    CASE (failed):  {"id", "error": exception type | "Timeout" | "Crash", "message": first 300 chars,
                     "origin": "file.py:function" raising, "origin_line", "passed", "ignored",
                     "log_warnings"}                         # Timeout/Crash: id, error, message only
    CASE (built):   {"id", "error": null, "passed": config kwargs given (no tokenizer/cache path),
                     "ignored": optional case keys this version has no field for, "split_matrix",
                     "splits": {"train"|"valid"|"test": SPLIT}, "log_warnings", "elapsed_s"}
    SPLIT None:     {"none": true, "type": null}
    BLENDED:        {"none": false, "type": "BlendedDataset", "len", "size" (attribute, may be null),
                     "weights" (attribute: normalized floats, or the raw int lengths when size is null),
                     "draws": bincount(dataset_index) per contributing dataset, "draws_sequential",
                     "oversampled": [draws_j > len(dataset_j)], "dtypes", "sha1": {dataset_index,
                     dataset_sample_index}, "datasets": [GPT, ...]}
    GPT:            {"none": false, "type": "GPTDataset", "dataset_path", "index_split",
                     "num_samples": the request (may be null), "len", "num_documents" (of the split),
                     "doc_range": [indices[0], indices[-1]+1] or null, "tokens_per_epoch",
                     "num_epochs": len(document_index) // num_documents, "num_epochs_exact",
                     "document_index_len", "sample_index_len", "shuffle_index_len", "dtypes",
                     "sha1": {document_index, sample_index, shuffle_index},
                     "shuffle_first_block", "shuffle_first_block_max", "shuffle_first_block_closed",
                     "document_last_epoch_complete", "separated_by_structure",
                     "log": {"built_anew", "separate_final_epoch", "num_samples_from_final_epoch",
                             "num_samples_per_epoch", "total_number_of_epochs", "total_number_of_samples"},
                     "separate_final_epoch": the logged value (else the structural one),
                     "separate_final_epoch_source": "log" | "structure"}
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib
import json
import logging
import multiprocessing
import multiprocessing.connection
import os
import platform
import sys
import tempfile
import time
import traceback
import warnings
from typing import Any

import numpy as np

SPLITS = ("train", "valid", "test")
VOCAB_SIZE = 65000  # < 65500: megatron writes/reads the test corpora as uint16
MESSAGE_CHARS = 300

# Filled by _import_megatron() in the parent, inherited by the forked workers.
M: dict[str, Any] = {}
# id(GPTDataset) -> (dataset, [log messages emitted while that dataset built its indices])
_GPT_LOGS: dict[int, tuple[Any, list[str]]] = {}
_WARNINGS: list[str] = []


# ----------------------------------------------------------------------------------------- imports


def _import_megatron() -> None:
    """Import the megatron-core dataset modules (once, before forking) and find the NullTokenizer."""
    warnings.filterwarnings("ignore")
    from megatron.core.datasets.blended_dataset import BlendedDataset
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    M.update(
        BlendedDataset=BlendedDataset,
        Builder=BlendedMegatronDatasetBuilder,
        GPTDataset=GPTDataset,
        GPTDatasetConfig=GPTDatasetConfig,
        config_fields={f.name for f in dataclasses.fields(GPTDatasetConfig)},
    )
    M["tokenizer_factory"], M["tokenizer_name"] = _find_null_tokenizer()
    M["version"], M["dist_version"] = _versions()
    import megatron.core

    M["megatron_core_dir"] = os.path.dirname(os.path.abspath(megatron.core.__file__))


def _find_null_tokenizer() -> tuple[Any, str]:
    """megatron.core's NullTokenizer, or a minimal stand-in on versions that ship none.

    0.16.1: ``megatron.core.tokenizers.text.libraries.null_tokenizer.NullTokenizer``. 0.10.0 ships no
    NullTokenizer in megatron.core (it lives in Megatron-LM's megatron/training): there a minimal
    subclass of ``megatron.core.datasets.megatron_tokenizer.MegatronTokenizer`` is used. The tokenizer
    only feeds the cache hash and the pad/eod ids, never the indices.
    """
    for module_name in (
        "megatron.core.tokenizers.text.libraries.null_tokenizer",
        "megatron.core.tokenizers.text.libraries",
        "megatron.core.datasets.null_tokenizer",
    ):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        if hasattr(module, "NullTokenizer"):
            return module.NullTokenizer, f"{module_name}.NullTokenizer"

    base_module = importlib.import_module("megatron.core.datasets.megatron_tokenizer")
    base = getattr(base_module, "MegatronTokenizer", None) or base_module.MegatronLegacyTokenizer

    class NullTokenizer(base):  # type: ignore[misc, valid-type]
        """Stand-in NullTokenizer: token ids are integers, eod = vocab_size, no pad token."""

        def __init__(self, vocab_size: int) -> None:
            super().__init__(vocab_size=vocab_size)
            self._vocab_size = int(vocab_size)

        def tokenize(self, text: str) -> np.ndarray:
            return np.array([int(x) for x in text.split()], dtype=np.int64)

        @property
        def vocab(self) -> dict[str, int]:
            raise NotImplementedError

        @property
        def inv_vocab(self) -> dict[int, str]:
            raise NotImplementedError

        @property
        def vocab_size(self) -> int:
            return self._vocab_size + 1

        @property
        def eod(self) -> int:
            return self._vocab_size

    return NullTokenizer, f"stand-in NullTokenizer({base.__module__}.{base.__name__})"


def _versions() -> tuple[str | None, str | None]:
    """(megatron.core.package_info.__version__, importlib.metadata version of megatron-core)."""
    try:
        from megatron.core import package_info

        version: str | None = str(package_info.__version__)
    except Exception:  # noqa: BLE001 - any failure just means "unknown"
        version = None
    try:
        from importlib.metadata import version as dist_version

        dist: str | None = dist_version("megatron-core")
    except Exception:  # noqa: BLE001
        dist = None
    return version or dist, dist


# ----------------------------------------------------------------------------------------- logging


class _Capture(logging.Filter):
    """Attribute megatron's gpt_dataset log records to the GPTDataset whose indices are being built."""

    def filter(self, record: logging.LogRecord) -> bool:
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_name == "_build_document_sample_shuffle_indices":
                owner = frame.f_locals.get("self")
                if owner is not None:
                    _GPT_LOGS.setdefault(id(owner), (owner, []))[1].append(record.getMessage())
                break
            frame = frame.f_back
        return True


class _WarningCapture(logging.Handler):
    """Keep megatron's WARNING+ messages of the running case."""

    def emit(self, record: logging.LogRecord) -> None:
        _WARNINGS.append(record.getMessage()[:MESSAGE_CHARS])


def _setup_logging() -> None:
    """Let DEBUG records of gpt_dataset through (to our filter only) and silence megatron's output."""
    root = logging.getLogger("megatron")
    root.addHandler(logging.NullHandler())
    root.propagate = False
    handler = _WarningCapture(level=logging.WARNING)
    root.addHandler(handler)
    gpt_logger = logging.getLogger("megatron.core.datasets.gpt_dataset")
    gpt_logger.setLevel(logging.DEBUG)
    gpt_logger.addFilter(_Capture())


def _parse_gpt_log(messages: list[str]) -> dict[str, Any]:
    """Pick megatron's own statements out of the DEBUG/INFO lines of one GPTDataset build."""
    out: dict[str, Any] = {
        "built_anew": any(m.startswith("Build and save") for m in messages),
        "separate_final_epoch": None,
        "num_samples_from_final_epoch": None,
        "num_samples_per_epoch": None,
        "total_number_of_epochs": None,
        "total_number_of_samples": None,
    }
    keys = {
        "> separate_final_epoch:": "separate_final_epoch",
        "> num_samples_from_final_epoch:": "num_samples_from_final_epoch",
        "> num_samples_per_epoch:": "num_samples_per_epoch",
        "> total number of epochs:": "total_number_of_epochs",
        "> total number of samples:": "total_number_of_samples",
    }
    for message in messages:
        text = message.strip()
        for prefix, key in keys.items():
            if text.startswith(prefix):
                value = text[len(prefix) :].strip()
                out[key] = value == "True" if key == "separate_final_epoch" else int(value)
    return out


# ----------------------------------------------------------------------------------------- records


def _sha1(array: Any) -> str | None:
    """sha1 of the raw bytes of an index array (its dtype matters)."""
    if array is None:
        return None
    return hashlib.sha1(np.ascontiguousarray(np.asarray(array)).tobytes()).hexdigest()


def _gpt_record(ds: Any) -> dict[str, Any]:
    """What one GPTDataset really holds.

    Separation check from the arrays alone (``separated_by_structure``): with E > 1 epochs,
    S = ((E-1)*T - a)//L samples before the final epoch (T tokens per epoch, L = sequence_length,
    a = add_extra_token_to_sequence), a separated final epoch makes shuffle_index[:S] a permutation of
    range(S) (``shuffle_first_block_closed``) and the last len(indices) entries of document_index one
    full epoch (``document_last_epoch_complete``). Without separation both hold only by chance (likely
    only for tiny indices), so ``separate_final_epoch`` (megatron's log line) is the authority.
    """
    config = ds.config
    indices = np.asarray(ds.indices)
    num_docs = int(indices.shape[0])
    document_index = np.asarray(ds.document_index)
    sample_index = np.asarray(ds.sample_index)
    shuffle_index = np.asarray(ds.shuffle_index)
    tokens = int(np.sum(ds.dataset.sequence_lengths[indices], dtype=np.int64)) if num_docs else 0
    epochs = int(document_index.shape[0] // num_docs) if num_docs else None

    rec: dict[str, Any] = {
        "type": type(ds).__name__,
        "dataset_path": ds.dataset_path,
        "index_split": ds.index_split.name,
        "num_samples": None if ds.num_samples is None else int(ds.num_samples),
        "len": int(len(ds)),
        "num_documents": num_docs,
        "doc_range": [int(indices[0]), int(indices[-1]) + 1] if num_docs else None,
        "tokens_per_epoch": tokens,
        "num_epochs": epochs,
        "num_epochs_exact": bool(num_docs and document_index.shape[0] % num_docs == 0),
        "document_index_len": int(document_index.shape[0]),
        "sample_index_len": int(sample_index.shape[0]),
        "shuffle_index_len": int(shuffle_index.shape[0]),
        "dtypes": {
            "document_index": document_index.dtype.name,
            "sample_index": sample_index.dtype.name,
            "shuffle_index": shuffle_index.dtype.name,
        },
        "sha1": {
            "document_index": _sha1(document_index),
            "sample_index": _sha1(sample_index),
            "shuffle_index": _sha1(shuffle_index),
        },
    }

    first_block: int | None = None
    closed: bool | None = None
    last_complete: bool | None = None
    if epochs is not None and epochs > 1:
        a = int(bool(config.add_extra_token_to_sequence))
        first_block = ((epochs - 1) * tokens - a) // int(config.sequence_length)
        head = shuffle_index[:first_block]
        closed = bool(head.shape[0] == first_block and (first_block == 0 or int(head.max()) == first_block - 1))
        last = np.sort(document_index[-num_docs:].astype(np.int64))
        last_complete = bool(np.array_equal(last, np.sort(indices.astype(np.int64))))
    rec["shuffle_first_block"] = first_block
    rec["shuffle_first_block_max"] = int(shuffle_index[:first_block].max()) if first_block else None
    rec["shuffle_first_block_closed"] = closed
    rec["document_last_epoch_complete"] = last_complete
    rec["separated_by_structure"] = None if closed is None else bool(closed and last_complete)

    entry = _GPT_LOGS.get(id(ds))
    rec["log"] = _parse_gpt_log(entry[1] if entry is not None and entry[0] is ds else [])
    logged = rec["log"]["separate_final_epoch"]
    rec["separate_final_epoch"] = logged if logged is not None else rec["separated_by_structure"]
    rec["separate_final_epoch_source"] = "log" if logged is not None else "structure"
    return rec


def _blended_record(ds: Any) -> dict[str, Any]:
    """What one BlendedDataset really holds, with a record per contributing dataset."""
    dataset_index = np.asarray(ds.dataset_index)
    dataset_sample_index = np.asarray(ds.dataset_sample_index)
    n = len(ds.datasets)
    draws = np.bincount(dataset_index.astype(np.int64), minlength=n) if dataset_index.size else np.zeros(n, int)
    sequential = all(
        np.array_equal(dataset_sample_index[dataset_index == j], np.arange(int(draws[j]))) for j in range(n)
    )
    return {
        "type": type(ds).__name__,
        "len": int(len(ds)),
        "size": None if ds.size is None else int(ds.size),
        "weights": [w.item() if hasattr(w, "item") else w for w in ds.weights],
        "draws": [int(x) for x in draws],
        "draws_sequential": bool(sequential),
        "oversampled": [bool(int(draws[j]) > len(ds.datasets[j])) for j in range(n)],
        "dtypes": {
            "dataset_index": dataset_index.dtype.name,
            "dataset_sample_index": dataset_sample_index.dtype.name,
        },
        "sha1": {"dataset_index": _sha1(dataset_index), "dataset_sample_index": _sha1(dataset_sample_index)},
        "datasets": [_dataset_record(d) for d in ds.datasets],
    }


def _dataset_record(ds: Any) -> dict[str, Any]:
    """Dispatch on the dataset type (None -> {"none": true})."""
    if ds is None:
        return {"none": True, "type": None}
    if isinstance(ds, M["BlendedDataset"]):
        rec = _blended_record(ds)
    elif isinstance(ds, M["GPTDataset"]):
        rec = _gpt_record(ds)
    elif isinstance(ds, list):  # multiple validation sets (newer versions)
        return {"none": False, "type": "list", "datasets": [_dataset_record(d) for d in ds]}
    else:
        return {"none": False, "type": type(ds).__name__}
    return {"none": False, **rec}


# ----------------------------------------------------------------------------------------- build


def _blend(entry: Any) -> Any:
    """[prefixes, weights-or-null] -> (prefixes, weights) as megatron expects; None stays None."""
    if entry is None:
        return None
    prefixes, weights = entry
    return (list(prefixes), None if weights is None else [float(w) for w in weights])


def _config_kwargs(case: dict[str, Any], cache_dir: str) -> tuple[dict[str, Any], list[str]]:
    """GPTDatasetConfig keyword arguments for a case, and the optional case keys this version lacks."""
    fields = M["config_fields"]
    kwargs: dict[str, Any] = {
        "random_seed": int(case["seed"]),
        "sequence_length": int(case["seq_length"]),
        "tokenizer": M["tokenizer_factory"](VOCAB_SIZE),
        "path_to_cache": cache_dir,
        "reset_position_ids": False,
        "reset_attention_mask": False,
        "eod_mask_loss": False,
    }
    if case.get("blend_per_split") is not None:
        kwargs["blend_per_split"] = [_blend(b) for b in case["blend_per_split"]]
    else:
        kwargs["blend"] = _blend([case["prefixes"], case.get("weights")])
        kwargs["split"] = case["split"]
    ignored = []
    for key in (
        "mid_level_dataset_surplus",
        "renormalize_blend_weights",
        "add_extra_token_to_sequence",
        "drop_last_partial_validation_sequence",
    ):
        if case.get(key) is None:
            continue
        if key in fields:
            kwargs[key] = case[key]
        else:
            ignored.append(key)
    return kwargs, ignored


def _run_case(case: dict[str, Any]) -> dict[str, Any]:
    """Build one case (inside the worker process) and record what was built."""
    import torch.distributed as dist

    os.makedirs(case["path_to_cache"], exist_ok=True)
    cache_dir = tempfile.mkdtemp(prefix=f"mcore-{M['version']}-", dir=case["path_to_cache"])
    if not dist.is_initialized():
        store = os.path.join(cache_dir, "gloo.store")
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    _GPT_LOGS.clear()
    _WARNINGS.clear()
    kwargs, ignored = _config_kwargs(case, cache_dir)
    passed = {k: v for k, v in kwargs.items() if k not in ("tokenizer", "path_to_cache")}
    sizes = [None if s is None else int(s) for s in case["sizes"]]
    try:
        config = M["GPTDatasetConfig"](**kwargs)
        builder = M["Builder"](M["GPTDataset"], sizes, is_built_on_rank=lambda: True, config=config)
        datasets = builder.build()
    except Exception as err:  # noqa: BLE001 - every failure of the real builder is a fact to record
        tb = traceback.extract_tb(err.__traceback__)
        origin = f"{os.path.basename(tb[-1].filename)}:{tb[-1].name}" if tb else None
        return {
            "id": case["id"],
            "error": type(err).__name__,
            "message": str(err)[:MESSAGE_CHARS],
            "origin": origin,
            "origin_line": (tb[-1].line or "")[:MESSAGE_CHARS] if tb else None,
            "passed": passed,
            "ignored": ignored,
            "log_warnings": list(_WARNINGS),
        }
    splits = {name: _dataset_record(ds) for name, ds in zip(SPLITS, datasets, strict=True)}
    return {
        "id": case["id"],
        "error": None,
        "passed": passed,
        "ignored": ignored,
        "split_matrix": None if config.split_matrix is None else [list(b) if b else None for b in config.split_matrix],
        "splits": splits,
        "log_warnings": list(_WARNINGS),
    }


def _worker(case: dict[str, Any], conn: Any) -> None:
    """Forked worker: build, send the JSON text back, and leave without running exit handlers."""
    code = 0
    try:
        t0 = time.perf_counter()
        result = _run_case(case)
        result["elapsed_s"] = round(time.perf_counter() - t0, 4)
        conn.send(json.dumps(result))
    except BaseException as err:  # noqa: BLE001
        code = 1
        try:
            conn.send(
                json.dumps({"id": case.get("id"), "error": type(err).__name__, "message": str(err)[:MESSAGE_CHARS]})
            )
        except BaseException:  # noqa: BLE001
            pass
    finally:
        conn.close()
        os._exit(code)


class _Job:
    """One running worker process."""

    def __init__(self, ctx: Any, case: dict[str, Any]) -> None:
        self.case = case
        self.recv, send = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=_worker, args=(case, send), daemon=True)
        self.start = time.monotonic()
        self.proc.start()
        send.close()
        self.result: dict[str, Any] | None = None

    def poll(self, timeout: float) -> bool:
        """Collect the result if there is one; True when this job is finished."""
        if self.recv.poll(0):
            try:
                self.result = json.loads(self.recv.recv())
            except EOFError:
                self.result = None
            self.proc.join()
            if self.result is None:
                self.result = self._crash()
            return True
        if not self.proc.is_alive():
            self.proc.join()
            if self.recv.poll(0):
                return self.poll(timeout)
            self.result = self._crash()
            return True
        if time.monotonic() - self.start > timeout:
            self.proc.kill()
            self.proc.join()
            self.result = {
                "id": self.case.get("id"),
                "error": "Timeout",
                "message": f"no result within {timeout:g} s (killed)",
            }
            return True
        return False

    def _crash(self) -> dict[str, Any]:
        return {
            "id": self.case.get("id"),
            "error": "Crash",
            "message": f"worker process exited with code {self.proc.exitcode} and no result",
        }


def run_cases(cases: list[dict[str, Any]], timeout: float, jobs: int) -> list[dict[str, Any]]:
    """Run every case in its own forked worker, at most ``jobs`` at once; results in case order."""
    ctx = multiprocessing.get_context("fork")
    results: list[dict[str, Any] | None] = [None] * len(cases)
    pending = list(enumerate(cases))
    running: list[tuple[int, _Job]] = []
    while pending or running:
        while pending and len(running) < jobs:
            i, case = pending.pop(0)
            running.append((i, _Job(ctx, case)))
        still = []
        for i, job in running:
            if job.poll(timeout):
                results[i] = job.result
            else:
                still.append((i, job))
        running = still
        if running:
            handles = [job.recv for _, job in running] + [job.proc.sentinel for _, job in running]
            multiprocessing.connection.wait(handles, timeout=0.05)
    return [r if r is not None else {"error": "Crash", "message": "no result"} for r in results]


def main(argv: list[str] | None = None) -> int:
    """Command line: CASES.json OUT.json [--timeout S] [--jobs N]."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("cases")
    parser.add_argument("out")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per case (default 60)")
    parser.add_argument("--jobs", type=int, default=1, help="cases built at once (default 1)")
    args = parser.parse_args(argv)

    with open(args.cases, encoding="utf-8") as f:
        cases = json.load(f)
    if isinstance(cases, dict):
        cases = cases["cases"]

    t0 = time.perf_counter()
    _import_megatron()
    _setup_logging()
    import torch

    t_import = time.perf_counter() - t0
    results = run_cases(cases, args.timeout, max(1, args.jobs))
    out = {
        "megatron_core_version": M["version"],
        "megatron_core_dist_version": M["dist_version"],
        "megatron_core_dir": M["megatron_core_dir"],
        "null_tokenizer": M["tokenizer_name"],
        "config_fields": {
            k: k in M["config_fields"]
            for k in (
                "mid_level_dataset_surplus",
                "renormalize_blend_weights",
                "add_extra_token_to_sequence",
                "drop_last_partial_validation_sequence",
            )
        },
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "import_s": round(t_import, 3),
        "elapsed_s": round(time.perf_counter() - t0, 3),
        "num_cases": len(cases),
        "num_errors": sum(1 for r in results if r.get("error")),
        "cases": results,
    }
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
