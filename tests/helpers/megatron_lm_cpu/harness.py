"""Launch Megatron-LM's real pretrain_gpt.py on CPU (2 ranks, torchrun, gloo) through ``neox-epoch launch`` and
read back what it trained (test helper for tests/test_megatron_lm_training*.py).

The launch runs with this directory first on PYTHONPATH and ``NEOX_EPOCH_MEGATRON_CPU=1`` (sitecustomize.py: the
CUDA stand-ins, a test double for the GPU) and ``NEOX_EPOCH_MEGATRON_RECORD_DIR`` (recorder.py: every trained row).
``rows()`` gives the recorded rows; ``rebuild()`` rebuilds a row's tokens from the ``.bin``/``.idx`` and the
``.npy`` indices megatron-core cached, as GPTDataset does, so the test checks every recorded token.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from neox_epoch.formats.corpus import write_random_corpus
from neox_epoch.formats.idx import read_header

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
SEQ = 64
MODEL = [
    "--num-layers",
    "2",
    "--hidden-size",
    "64",
    "--num-attention-heads",
    "4",
    "--seq-length",
    str(SEQ),
    "--max-position-embeddings",
    str(SEQ),
    "--micro-batch-size",
    "2",
    "--lr",
    "1e-3",
    "--tokenizer-type",
    "NullTokenizer",
    "--vocab-size",
    "65536",
    "--split",
    "100,0,0",
    "--eval-iters",
    "0",
    "--eval-interval",
    "1000",
    "--transformer-impl",
    "local",
    "--no-gradient-accumulation-fusion",
    "--no-persist-layer-norm",
    "--distributed-backend",
    "gloo",
    "--hidden-dropout",
    "0",
    "--attention-dropout",
    "0",
    "--clip-grad",
    "0.0",
    "--ckpt-format",
    "torch",
    "--log-interval",
    "1",
    "--seed",
    "1234",
]


@dataclass
class Run:
    """One scenario's directory: corpora a and b, the checkpoints, the records, the run log."""

    root: str
    script: str
    env: dict[str, str]
    procs: list[subprocess.CompletedProcess[str]] = field(default_factory=list)

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def flags(self, batch: int, *extra: str) -> list[str]:
        return [
            *MODEL,
            "--global-batch-size",
            str(batch),
            "--train-iters",
            "1000",
            "--data-path",
            "0.5",
            self.path("a"),
            "0.5",
            self.path("b"),
            "--save",
            self.path("ckpt"),
            "--tensorboard-dir",
            self.path("tb"),
            "--data-cache-path",
            self.path("cache"),
            *extra,
        ]

    def launch(self, batch: int, *extra: str) -> subprocess.CompletedProcess[str]:
        argv = [
            os.path.join(os.path.dirname(sys.executable), "neox-epoch"),
            "launch",
            "--source-epochs",
            "a=1",
            "b=2",
            "torchrun",
            "--nproc-per-node",
            "2",
            "--master-port",
            str(_free_port()),
            self.script,
            *self.flags(batch, *extra),
        ]
        proc = subprocess.run(argv, env=self.env, cwd=self.root, capture_output=True, text=True, timeout=900)
        self.procs.append(proc)
        return proc

    def copy(self, root: str) -> Run:
        """A copy of this run's directory (corpora, checkpoints, records, log) to go on from elsewhere."""
        shutil.copytree(self.root, root)
        env = dict(self.env, NEOX_EPOCH_MEGATRON_RECORD_DIR=os.path.join(root, "rec"))
        return Run(root, self.script, env)

    def jsonl(self) -> list[dict[str, Any]]:
        with open(self.path("tb", "neox_epoch.jsonl"), encoding="utf-8") as f:
            return [json.loads(line) for line in f]

    def rows(self) -> list[dict[str, Any]]:
        """Every recorded row, with its step's rank, iteration and micro-batch."""
        out = []
        for path in sorted(glob.glob(self.path("rec", "*.jsonl"))):
            with open(path, encoding="utf-8") as f:
                for line in f:
                    rec = json.loads(line)
                    for row in rec["rows"]:
                        out.append({**row, "rank": rec["rank"], "iteration": rec["iteration"], "micro": rec["micro"]})
        return out

    def report(self) -> dict[str, Any]:
        proc = subprocess.run(
            [os.path.join(os.path.dirname(sys.executable), "neox-epoch"), "report", "--json", self.path("tb")],
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
        )
        return json.loads(proc.stdout)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def new_run(root: str, script: str, env: dict[str, str]) -> Run:
    """A fresh scenario directory with the two corpora (a: 16 documents, b: 12, 20-100 tokens each)."""
    os.makedirs(os.path.join(root, "rec"))
    write_random_corpus(os.path.join(root, "a"), 1, 16, 20, 100)
    write_random_corpus(os.path.join(root, "b"), 2, 12, 20, 100)
    env = dict(env)
    env["PYTHONPATH"] = os.pathsep.join([HERE, REPO, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env.update(
        NEOX_EPOCH_MEGATRON_CPU="1",
        NEOX_EPOCH_MEGATRON_RECORD_DIR=os.path.join(root, "rec"),
        CUDA_DEVICE_MAX_CONNECTIONS="1",
    )
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    return Run(root, script, env)


class Source:
    """One source's GPTDataset as megatron-core cached it: rebuilds sample ``i``'s seq_length + 1 tokens."""

    def __init__(self, prefix: str, cache: str, build: str) -> None:
        header = read_header(prefix)
        raw = np.memmap(prefix + ".idx", dtype=np.uint8, mode="r")
        n = header.sequence_count
        self.sizes = np.frombuffer(raw, dtype=np.int32, count=n, offset=header.sizes_offset)
        self.pointers = np.frombuffer(raw, dtype=np.int64, count=n, offset=header.pointers_offset)
        self.bin = np.memmap(prefix + ".bin", dtype=header.dtype, mode="r")
        found = os.path.join(cache, f"{build}-GPTDataset-train-")
        with open(found + "description.txt", encoding="utf-8") as f:
            assert os.path.basename(json.load(f)["dataset_path"]) == os.path.basename(prefix)
        self.document_index = np.load(found + "document_index.npy")
        self.sample_index = np.load(found + "sample_index.npy")
        self.shuffle_index = np.load(found + "shuffle_index.npy")

    def doc(self, d: int) -> np.ndarray:
        start = int(self.pointers[d]) // self.bin.itemsize
        return np.asarray(self.bin[start : start + int(self.sizes[d])])

    def spans(self, i: int) -> list[tuple[int, int, int]]:
        """Sample ``i``'s (document, start, stop) pieces, seq_length + 1 tokens in all (GPTDataset's walk)."""
        j = int(self.shuffle_index[i])
        (beg, off_beg), (end, off_end) = self.sample_index[j], self.sample_index[j + 1]
        if beg == end:
            return [(int(self.document_index[beg]), int(off_beg), int(off_end) + 1)]
        pieces = [(int(self.document_index[beg]), int(off_beg), int(self.sizes[self.document_index[beg]]))]
        for k in range(int(beg) + 1, int(end)):
            d = int(self.document_index[k])
            pieces.append((d, 0, int(self.sizes[d])))
        pieces.append((int(self.document_index[end]), 0, int(off_end) + 1))
        return pieces

    def tokens(self, i: int) -> list[int]:
        return [int(t) for d, a, b in self.spans(i) for t in self.doc(d)[a:b]]

    def inputs(self, i: int, seq: int = SEQ) -> list[tuple[int, int]]:
        """Sample ``i``'s input tokens as (document, offset): the first seq_length of its tokens."""
        return [(d, o) for d, a, b in self.spans(i) for o in range(a, b)][:seq]


def sources(run: Run, names: tuple[str, ...] = ("a", "b")) -> dict[tuple[int, str], Source]:
    """The source datasets the recorded rows came from, per (dataset_id, build)."""
    return {
        (r["dataset_id"], r["build"]): Source(run.path(names[r["dataset_id"]]), run.path("cache"), r["build"])
        for r in run.rows()
    }
