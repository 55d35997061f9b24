"""Records, from outside Megatron-LM's code, every row each rank trains (test helper, imported by sitecustomize.py).

``megatron.training.pretrain`` is wrapped right after ``megatron.training`` is imported (pretrain_gpt.py does
``from megatron.training import pretrain`` later, and neox-epoch's hooks wrap whatever is there, so the two
compose), and through it the ``forward_step_func`` it is given: while the model is in training mode, each
``next()`` on the data iterator appends one JSON line to ``$NEOX_EPOCH_MEGATRON_RECORD_DIR/rank<R>-<pid>.jsonl``:
``{"rank", "iteration", "micro", "rows": [{"dataset_id", "blend_index", "sample_id", "tokens"}]}``, where
``iteration`` is the step being trained (``args.curr_iteration + 1``), ``tokens`` the row's tokens plus its last
label (seq_length + 1 token ids), and ``blend_index`` / ``sample_id`` the BlendedDataset's index and the source
dataset's sample index, ``build`` that GPTDataset's cache hash (its ``.npy`` file names) (added beside the
``dataset_id`` megatron-core already returns), so a test rebuilds each row from the ``.bin``/``.idx`` and the cached
``.npy`` indices. ``NEOX_EPOCH_MEGATRON_HOOK_TIMES=1`` makes the recorder write nothing (bench/megatron_hooks_bench.py
uses only the shim).
"""

from __future__ import annotations

import functools
import inspect
import json
import os
from collections.abc import Callable
from typing import Any

RECORD_DIR = "NEOX_EPOCH_MEGATRON_RECORD_DIR"


class _Sink:
    def __init__(self) -> None:
        self.file: Any = None
        self.micro: dict[int, int] = {}

    def write(self, record: dict[str, Any]) -> None:
        if self.file is None:
            rank = int(os.environ.get("RANK", "0"))
            path = os.path.join(os.environ[RECORD_DIR], f"rank{rank}-{os.getpid()}.jsonl")
            self.file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (kept open for the run)
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()


_SINK = _Sink()


def _ints(value: Any) -> list[int]:
    return [int(v) for v in value.reshape(-1).tolist()]


def _record(batch: dict[str, Any]) -> None:
    from megatron.training import get_args

    iteration = int(get_args().curr_iteration) + 1
    micro = _SINK.micro.get(iteration, 0)
    _SINK.micro[iteration] = micro + 1
    tokens, labels = batch["tokens"], batch["labels"]
    rows = []
    for i in range(tokens.shape[0]):
        rows.append(
            {
                "dataset_id": int(batch["dataset_id"][i]),
                "blend_index": int(batch["blend_index"][i]),
                "sample_id": int(batch["sample_id"][i]),
                "build": batch["build"][i],
                "tokens": _ints(tokens[i]) + [int(labels[i][-1])],
            }
        )
    _SINK.write({"rank": int(os.environ.get("RANK", "0")), "iteration": iteration, "micro": micro, "rows": rows})


class _Recording:
    """The data iterator as the forward step sees it: each next() is recorded."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __iter__(self) -> _Recording:
        return self

    def __next__(self) -> Any:
        batch = next(self.inner)
        _record(batch)
        return batch


def _wrap_forward_step(real: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(real)
    def forward_step(data_iterator: Any, model: Any, *args: Any, **kwargs: Any) -> Any:
        if data_iterator is not None and getattr(model, "training", False):
            data_iterator = _Recording(data_iterator)
        return real(data_iterator, model, *args, **kwargs)

    return forward_step


def _patch_training(module: Any) -> None:
    real = module.pretrain
    signature = inspect.signature(real)

    @functools.wraps(real)
    def pretrain(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind_partial(*args, **kwargs)
        bound.arguments["forward_step_func"] = _wrap_forward_step(bound.arguments["forward_step_func"])
        return real(*bound.args, **bound.kwargs)

    module.pretrain = pretrain


def _patch_blended(module: Any) -> None:
    cls = module.BlendedDataset
    real = cls.__getitem__

    def __getitem__(self: Any, idx: int) -> dict[str, Any]:
        sample = real(self, idx)
        sample["blend_index"] = int(idx)
        sample["sample_id"] = int(self.dataset_sample_index[idx])
        sample["build"] = str(self.datasets[sample["dataset_id"]].unique_description_hash)
        return sample

    cls.__getitem__ = __getitem__


def patches() -> dict[str, Callable[[Any], None]]:
    """The after-import patches the shim installs: module name -> patch."""
    return {"megatron.training": _patch_training, "megatron.core.datasets.blended_dataset": _patch_blended}
