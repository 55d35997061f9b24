"""Run GPT-NeoX's real dataset-building path on a CPU, with or without the hooks, and measure coverage.

Verification tool (used by tests/neox/test_neox_integration.py, runnable by hand)::

    python -m neox_epoch.neox.probe --neox-dir NEOX --case case.json --out result.json

``case.json``: ``{"args": {NeoX data arguments}, "block": {neox_epoch block} or null}``. The process
starts a 1-rank gloo group and NeoX's ``mpu``, replaces the one CUDA call on the index path
(``torch.cuda.LongTensor``) with a CPU tensor, installs the hooks when a block is given, and calls
``megatron.training.build_train_valid_test_data_loaders`` -- the name NeoX's ``pretrain`` calls. Then,
for the first ``train_iters * train_batch_size`` samples of the train dataset, it maps each sample to
its source's document stream through NeoX's own ``doc_idx``/``sample_idx``/``shuffle_idx`` (and the
blend's ``dataset_index``/``dataset_sample_index``), checks the mapped tokens against NeoX's
``dataset[i]["text"]`` and counts how often each token of each source's train split was an input
token. With hooks it also steps the live counters through every iteration and compares them with the
blend's real draws. Nothing of NeoX is copied; its modules are imported from ``--neox-dir``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from types import SimpleNamespace
from typing import Any

import numpy as np

from neox_epoch.util.output import Output, write_output_text

PATH_FIELDS = [
    f"{pre}{split}{kind}_data_paths"
    for pre in ("", "pos_", "neg_")
    for split in ("train", "valid", "test")
    for kind in ("", "_label")
] + [f"{split}_reward_data_paths" for split in ("train", "valid", "test")]


def neox_args(**overrides: Any) -> SimpleNamespace:
    """A stand-in for NeoXArgs with the attributes the data path reads (NeoX defaults; data_impl mmap)."""
    args: dict[str, Any] = dict.fromkeys(PATH_FIELDS)
    args.update(
        train_epochs=None,
        train_iters=None,
        eval_interval=1000,
        eval_iters=10,
        train_batch_size=None,
        batch_size=None,
        gradient_accumulation_steps=1,
        is_pipe_parallel=False,
        dataset_impl="gpt2",
        data_impl="mmap",
        pack_impl="packed",
        allow_chopped=True,
        data_path=None,
        split="969, 30, 1",
        use_shared_fs=True,
        seq_length=2048,
        seed=1234,
        mmap_warmup=False,
        num_workers=0,
        train_data_weights=None,
        valid_data_weights=None,
        test_data_weights=None,
        weight_by_num_documents=False,
        weighted_sampler_alpha=1.0,
        precompute_model_name=None,
        iteration=0,
        log_interval=10,
    )
    args.update(overrides)
    if args["batch_size"] is None:
        args["batch_size"] = args["train_batch_size"]
    return SimpleNamespace(**args)


def init_cpu(workdir: str) -> None:
    """1-process gloo group, NeoX's mpu, CPU stand-in for torch.cuda.LongTensor."""
    import torch
    from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology
    from megatron import mpu

    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group("gloo", init_method=f"file://{workdir}/store", rank=0, world_size=1)
    mpu.initialize_model_parallel(1, topology=PipeModelDataParallelTopology(num_pp=1, num_mp=1, num_dp=1))
    torch.cuda.LongTensor = lambda data: torch.tensor(data, dtype=torch.long)  # type: ignore[attr-defined]


def stream_of(ds: Any) -> tuple[np.ndarray, int, int]:
    """Corpus token positions of a GPT2Dataset's document stream (doc_idx order), and its split range."""
    sizes = np.asarray(ds.indexed_dataset.sizes, dtype=np.int64)
    offsets = np.zeros(sizes.shape[0] + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    doc_idx = np.asarray(ds.doc_idx, dtype=np.int64)
    lens = sizes[doc_idx]
    starts = np.repeat(offsets[doc_idx] - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens)
    stream = starts + np.arange(int(lens.sum()), dtype=np.int64)
    docs = np.unique(doc_idx)
    return stream, int(offsets[docs[0]]), int(offsets[docs[-1] + 1])


def coverage(train: Any, n: int, seq: int, check: int) -> list[dict[str, Any]]:
    """Per source: how often each train-split token is an input token among the first n samples."""
    blended = hasattr(train, "dataset_index")
    children = list(train.datasets) if blended else [train]
    if blended:
        pos = np.arange(n) % len(train)
        src = np.asarray(train.dataset_index)[pos].astype(np.int64)
        idx = np.asarray(train.dataset_sample_index)[pos]
    else:
        src, idx = np.zeros(n, dtype=np.int64), np.arange(n)
    out = []
    rng = np.random.RandomState(0)
    checked = set(rng.choice(n, size=min(check, n), replace=False).tolist())
    for k, ds in enumerate(children):
        stream, lo, hi = stream_of(ds)
        j = idx[src == k]
        wrapped = int(np.sum(j >= ds.shuffle_idx.shape[0]))
        j = np.where(j >= ds.shuffle_idx.shape[0], j % len(ds), j)
        s = np.asarray(ds.shuffle_idx)[j].astype(np.int64)
        cover = np.zeros(hi, dtype=np.int64)
        positions = (s[:, None] * seq + np.arange(seq)[None, :]).reshape(-1)
        np.add.at(cover, stream[positions], 1)
        cover = cover[lo:hi]
        hist = np.bincount(cover)
        out.append(
            {
                "name": ds.name,
                "tokens": int(hi - lo),
                "samples": int(j.shape[0]),
                "wrapped": wrapped,
                "input_tokens": int(cover.sum()),
                "histogram": {str(i): int(v) for i, v in enumerate(hist) if v},
                "epochs": int(ds.doc_idx.shape[0] // np.unique(np.asarray(ds.doc_idx)).shape[0]),
                "len": len(ds),
            }
        )
        # cross-check the mapping against NeoX's own __getitem__ on a sample of positions
        tokens_all = _all_tokens(ds)
        for i in sorted(checked):
            if int(src[i]) != k:
                continue
            jj = int(idx[i]) if int(idx[i]) < ds.shuffle_idx.shape[0] else int(idx[i]) % len(ds)
            s0 = int(ds.shuffle_idx[jj])
            want = tokens_all[stream[s0 * seq : s0 * seq + seq]]
            got = np.asarray(train[i]["text"][:seq])
            if not np.array_equal(got[: want.shape[0]], want):
                raise AssertionError(f"sample {i} ({ds.name}[{jj}]): mapped tokens differ from NeoX's __getitem__")
    return out


def _all_tokens(ds: Any) -> np.ndarray:
    sizes = np.asarray(ds.indexed_dataset.sizes)
    return np.concatenate([np.asarray(ds.indexed_dataset.get(d), dtype=np.int64) for d in range(sizes.shape[0])])


def run(case: dict[str, Any], neox_dir: str, workdir: str) -> dict[str, Any]:
    sys.path.insert(0, os.path.abspath(neox_dir))
    os.environ.setdefault("RANK", "0")
    init_cpu(workdir)
    import megatron.training as training

    args = neox_args(**case["args"])
    state = None
    if case.get("block") is not None:
        import neox_epoch.neox

        state = neox_epoch.neox.install(case["block"], case.get("settings"))
    loaders = training.build_train_valid_test_data_loaders(neox_args=args)
    training.update_iterations(neox_args=args, data_loaders=loaders)
    train = loaders["train"].dataset
    n = int(args.train_iters) * int(args.train_batch_size)
    result: dict[str, Any] = {
        "train_iters": int(args.train_iters),
        "train_batch_size": int(args.train_batch_size),
        "samples": n,
        "sources": coverage(train, n, int(args.seq_length), case.get("check", 400)),
    }
    if state is not None and state.counters is not None:
        c = state.counters
        c.start(int(case.get("start_iteration", 0)))
        bad = []
        real = np.asarray(train.dataset_index) if hasattr(train, "dataset_index") else None
        for it in range(c.start_iteration + 1, c.train_iters + 1):
            c.step(it)
            if real is not None and (it % 7 == 0 or it == c.train_iters):
                want = np.bincount(real[: it * c.train_batch_size], minlength=len(c.sources)).tolist()
                if c.counts_at(it) != want:
                    bad.append((it, c.counts_at(it), want))
        result["final"] = c.final(c.train_iters)
        result["counter_mismatches"] = bad[:5]
        result["markers"] = [m.__dict__ for m in c.markers]
        result["plan"] = state.run.settings() if state.run else None
        result["table"] = state.table
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--neox-dir", required=True)
    p.add_argument("--case", required=True, help="JSON file: {args, block, settings}")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    with open(a.case, encoding="utf-8") as f:
        case = json.load(f)
    with tempfile.TemporaryDirectory(prefix="neox_probe_") as work:
        result = run(case, a.neox_dir, work)
    write_output_text(Output(a.out, "--out", example="probe.json"), json.dumps(result, indent=1), [a.case])
    return 0


if __name__ == "__main__":
    sys.exit(main())
