"""A meta-path finder that runs a patch right after a module is first executed: the CPU test doubles'
(neox_cpu/ and megatron_lm_cpu/ sitecustomize.py) way of replacing CUDA-only calls without editing the frameworks."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
from collections.abc import Callable
from typing import Any


class AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``patches[name](module)`` right after the module ``name`` is executed (first import)."""

    def __init__(self, patches: dict[str, Callable[[Any], None]]) -> None:
        self.patches = patches

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        patch = self.patches.get(name)
        if patch is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None:
            return None
        real = spec.loader.exec_module  # type: ignore[union-attr]

        def exec_module(module: Any) -> None:
            real(module)
            patch(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign,union-attr]
        return spec
