"""A test double for the GPU, so that GPT-NeoX's own train.py runs on CPU ranks (gloo) in the tests.

Why it exists: CI has no GPU, and NeoX (ea7aefd8) calls CUDA in a handful of places that have nothing to
do with the data path the tests prove. Nothing of NeoX is edited: this file is on the PYTHONPATH of the
test's launches only (deepy, the deepspeed launcher and every rank import it at start-up), and it does
nothing unless ``NEOX_EPOCH_CPU_SHIM=1``. What it replaces (each one fails the run without it, see
shared notes "neox-cpu-training"):

=========================================  ======================================================
NeoX's call                                CPU answer
=========================================  ======================================================
``torch.cuda.LongTensor``/``ByteTensor``   the CPU tensor types
``torch.cuda.current_device()``            ``torch.device("cpu")``
``Tensor.cuda()`` / ``Module.cuda()``      return self
``torch.cuda.synchronize()``               no-op
``torch.cuda.get/set_rng_state``           the CPU generator's state
``initialize_megatron`` asserts CUDA       called with ``allow_no_cuda=True``
model parallel and the model-parallel      during ``_initialize_distributed`` and ``_set_random_seed``
seed only when a GPU is counted            only: device_count = local world size, set_device no-op
=========================================  ======================================================

``torch.cuda.is_available()`` stays False (NeoX's DataLoader would pin memory). DeepSpeed's CPU
accelerator (``DS_ACCELERATOR=cpu``) does gloo and the launch. When ``NEOX_EPOCH_RECORD_DIR`` is set,
the batch recorder (``batch_recorder.py`` beside this file) is attached too.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

SHIM_VAR = "NEOX_EPOCH_CPU_SHIM"


# tests/helpers (after_import.py, shared by both test doubles) at the END of sys.path: it shadows nothing
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from after_import import AfterImport  # noqa: E402


def _torch() -> None:
    import torch

    def cpu_tensor(dtype: Any) -> Callable[..., Any]:
        def make(*args: Any, **kwargs: Any) -> Any:
            if len(args) == 1 and not isinstance(args[0], int):
                return torch.tensor(args[0], dtype=dtype)
            return torch.empty(*args, dtype=dtype, **kwargs)

        return make

    torch.cuda.LongTensor = cpu_tensor(torch.long)  # type: ignore[attr-defined,assignment]
    torch.cuda.ByteTensor = cpu_tensor(torch.uint8)  # type: ignore[attr-defined,assignment]
    torch.cuda.current_device = lambda: torch.device("cpu")  # type: ignore[assignment,return-value]
    torch.cuda.synchronize = lambda *a, **k: None  # type: ignore[assignment]
    torch.cuda.get_rng_state = lambda *a, **k: torch.get_rng_state()  # type: ignore[assignment]
    torch.cuda.set_rng_state = lambda state, *a, **k: torch.set_rng_state(state)  # type: ignore[assignment]
    torch.Tensor.cuda = lambda self, *a, **k: self  # type: ignore[method-assign]
    torch.nn.Module.cuda = lambda self, *a, **k: self  # type: ignore[method-assign]


def _counting_gpus(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` run while torch counts one 'GPU' per local rank (and set_device does nothing)."""
    import torch

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        count, set_device = torch.cuda.device_count, torch.cuda.set_device
        # the ranks on this node: deepspeed's launcher sets LOCAL_SIZE, torchrun LOCAL_WORLD_SIZE
        local = os.environ.get("LOCAL_SIZE") or os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get("WORLD_SIZE")
        torch.cuda.device_count = lambda: int(local or 1)
        torch.cuda.set_device = lambda *a, **k: None
        try:
            return fn(*args, **kwargs)
        finally:
            torch.cuda.device_count, torch.cuda.set_device = count, set_device

    return wrapped


def _initialize(module: Any) -> None:
    real = module.initialize_megatron

    def initialize_megatron(neox_args: Any, allow_no_cuda: bool = False) -> Any:
        return real(neox_args, allow_no_cuda=True)

    module.initialize_megatron = initialize_megatron
    module._initialize_distributed = _counting_gpus(module._initialize_distributed)
    module._set_random_seed = _counting_gpus(module._set_random_seed)


def _training(module: Any) -> None:
    if os.environ.get("NEOX_EPOCH_RECORD_DIR"):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import batch_recorder

        batch_recorder.attach(module)


if os.environ.get(SHIM_VAR) == "1":
    _torch()
    sys.meta_path.insert(0, AfterImport({"megatron.initialize": _initialize, "megatron.training": _training}))
