"""A test double for the GPU, so that Megatron-LM's own pretrain_gpt.py trains on CPU ranks (gloo) in the tests.

Why it exists: CI has no GPU, and Megatron-LM (core_v0.19.0 / core_v0.16.1) calls CUDA in a handful of places
that have nothing to do with the data path the tests prove. Nothing of Megatron-LM is edited: this directory is
first on the PYTHONPATH of the test's launches only (torchrun and every rank import this file at start-up), and
it does nothing unless ``NEOX_EPOCH_MEGATRON_CPU=1``. What it replaces (each one fails the run without it, see
the shared notes "megatron-lm-cpu-training"):

================================================  ==============================================================
Megatron-LM's call                                CPU answer
================================================  ==============================================================
torch.compile (fused bias-dropout)                ``TORCH_COMPILE_DISABLE=1``
``torch.cuda.current_device()``                   0
``torch.cuda.synchronize()``                      no-op
``torch.cuda[.random].get/set_rng_state``         the CPU generator's state
``device="cuda"`` tensors, ``Tensor.cuda()``      kept on CPU (one torch function mode)
``torch.cuda.Stream`` / streams                   inert
``initialize_megatron`` asserts CUDA              called with ``allow_no_cuda=True``
model-parallel groups / seed need a device count  ``device_count()`` = local world size, ``set_device`` no-op
``compile_helpers()`` runs ``make`` in the tree   no-op (the wheel ships the compiled helpers)
the tree's scripts shadow the wheel's megatron    ``helpers_cpp`` found in the installed wheel's datasets dir
0.16.1: ``fused_kernels.load`` runs nvcc         no-op (fp32 with --transformer-impl local never calls them)
================================================  ==============================================================

The tests pass ``--clip-grad 0.0`` (clip_grads asserts ``torch.cuda.FloatTensor``). When
``NEOX_EPOCH_MEGATRON_RECORD_DIR`` is set, the recorder (``recorder.py`` beside this file) is attached too;
when ``NEOX_EPOCH_MEGATRON_HOOK_TIMES`` is set, the hook timer (``hook_timer.py``, for the bench).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from typing import Any

SHIM_VAR = "NEOX_EPOCH_MEGATRON_CPU"


# tests/helpers (after_import.py, shared by both test doubles) at the END of sys.path: it shadows nothing
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from after_import import AfterImport  # noqa: E402


def _cpu(device: Any) -> Any:
    import torch

    if isinstance(device, int) and not isinstance(device, bool):
        return "cpu"
    if isinstance(device, str) and device.startswith("cuda"):
        return "cpu"
    if isinstance(device, torch.device) and device.type == "cuda":
        return torch.device("cpu")
    return device


class _Stream:
    """An inert CUDA stream."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def wait_stream(self, *args: Any, **kwargs: Any) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def __enter__(self) -> _Stream:
        return self

    def __exit__(self, *args: Any) -> bool:
        return False


def _torch_stand_ins() -> None:
    import torch
    from torch.overrides import TorchFunctionMode

    class CpuMode(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = dict(kwargs or {})
            if "device" in kwargs:
                kwargs["device"] = _cpu(kwargs["device"])
            if func is torch.Tensor.to and len(args) > 1:
                args = (args[0], _cpu(args[1]), *args[2:])
            if func is torch.Tensor.cuda:
                return args[0]
            return func(*args, **kwargs)

    cuda = torch.cuda
    cuda.current_device = lambda: 0
    cuda.synchronize = lambda *a, **k: None
    cuda.get_rng_state = lambda *a, **k: torch.get_rng_state()
    cuda.set_rng_state = lambda state, *a, **k: torch.set_rng_state(state)
    cuda.random.get_rng_state = cuda.get_rng_state
    cuda.random.set_rng_state = cuda.set_rng_state
    cuda.device_count = lambda: int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    # the DataLoader asks torch.accelerator (through that device count) whether to pin memory, then initialises CUDA
    # ("Found no NVIDIA driver", seen in a fresh clone's CI): there is no accelerator, say so
    torch.accelerator.is_available = lambda: False  # type: ignore[assignment]
    cuda.set_device = lambda *a, **k: None
    torch.Tensor.cuda = lambda self, *a, **k: self  # type: ignore[method-assign]
    cuda.Stream = _Stream  # type: ignore[misc,assignment]
    cuda.current_stream = lambda *a, **k: _Stream()
    cuda.default_stream = lambda *a, **k: _Stream()
    cuda.stream = lambda *a, **k: contextlib.nullcontext()
    CpuMode().__enter__()


def _patch_initialize(module: Any) -> None:
    real = module.initialize_megatron

    def initialize_megatron(*args: Any, **kwargs: Any) -> Any:
        kwargs["allow_no_cuda"] = True
        return real(*args, **kwargs)

    module.initialize_megatron = initialize_megatron


def _patch_dataset_utils(module: Any) -> None:
    module.compile_helpers = lambda: None


def _patch_fused_kernels(module: Any) -> None:
    """core_v0.16.1's initialize always JIT-builds the CUDA softmax kernels (nvcc); fp32 runs never use them."""
    module.load = lambda *args, **kwargs: None


def _patch_datasets(module: Any) -> None:
    """Running the tree's script puts the tree's megatron first; its datasets package has no compiled helpers,
    so the installed megatron-core wheel's directory (which has them) is searched after it."""
    from importlib import metadata

    try:
        wheel = str(metadata.distribution("megatron-core").locate_file("megatron/core/datasets"))
    except metadata.PackageNotFoundError:
        return
    if os.path.isdir(wheel) and wheel not in module.__path__:
        module.__path__.append(wheel)


def _install() -> None:
    os.environ["TORCH_COMPILE_DISABLE"] = "1"
    _torch_stand_ins()
    patches: dict[str, Callable[[Any], None]] = {
        "megatron.training.initialize": _patch_initialize,
        "megatron.core.datasets.utils": _patch_dataset_utils,
        "megatron.core.datasets": _patch_datasets,
        "megatron.legacy.fused_kernels": _patch_fused_kernels,
    }
    if os.environ.get("NEOX_EPOCH_MEGATRON_RECORD_DIR"):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import recorder

        patches.update(recorder.patches())
    if os.environ.get("NEOX_EPOCH_MEGATRON_HOOK_TIMES"):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import hook_timer

        patches["neox_epoch.megatron_lm.hooks"] = hook_timer.patch
    sys.meta_path.insert(0, AfterImport(patches))


if os.environ.get(SHIM_VAR) == "1":
    _install()
