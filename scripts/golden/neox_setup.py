"""Loading GPT-NeoX's data code, its 1-process distributed setup, the recorders wrapped around its functions, the
argument object NeoX reads."""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np

from golden.common import NEOX_SEED, die


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
    gd: Any = neox.gpt2_dataset  # attributes replaced below: typed Any
    du: Any = neox.data_utils
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
