"""Test-side recorder of every micro-batch GPT-NeoX's model actually trains (and evaluates) on.

Not product code: the tests attach it (through ``sitecustomize.py`` beside this file, when
``NEOX_EPOCH_RECORD_DIR`` is set) to NeoX's own ``megatron.training.get_batch``, the function every
forward step gets its tokens from, so what is recorded is what the model consumed, after NeoX's data
loader, its distributed sampler and its resume offset. ``forward_step(is_train=True)`` marks training;
everything else is evaluation.

Each rank appends rows to ``{dir}/{kind}-rank{rank}.bin`` (kind = train or eval; the tests give each
launch its own directory), int64, one row per sample: ``iteration, text[0], ..., text[seq_length]``, where
``iteration`` is the 1-based iteration the sample is trained in (the current one for evaluation) and ``text`` is the
sample's seq_length + 1 tokens (inputs, plus the last label). Rows are written and flushed per call, so a
run that stops (exit_interval, an error) keeps everything it trained on.
"""

from __future__ import annotations

import contextvars
import os
from typing import Any

import numpy as np

_TRAINING: contextvars.ContextVar[bool] = contextvars.ContextVar("neox_epoch_training", default=False)


def read(path: str, seq_length: int) -> tuple[np.ndarray, np.ndarray]:
    """(iterations, texts) of one recorder file: shapes (n,) and (n, seq_length + 1)."""
    rows = np.fromfile(path, dtype=np.int64).reshape(-1, seq_length + 2)
    return rows[:, 0], rows[:, 1:]


def attach(training: Any) -> None:
    """Wrap ``training.forward_step`` (to know when it trains) and ``training.get_batch`` (to record)."""
    import torch

    out_dir = os.environ["NEOX_EPOCH_RECORD_DIR"]
    os.makedirs(out_dir, exist_ok=True)
    real_forward, real_get_batch = training.forward_step, training.get_batch

    def forward_step(*args: Any, **kwargs: Any) -> Any:
        token = _TRAINING.set(bool(kwargs.get("is_train", False)))
        try:
            return real_forward(*args, **kwargs)
        finally:
            _TRAINING.reset(token)

    def get_batch(neox_args: Any, data_iterator: Any) -> Any:
        out = real_get_batch(neox_args=neox_args, data_iterator=data_iterator)
        tokens, labels = out[0], out[1]
        text = torch.cat([tokens, labels[:, -1:]], dim=1).to(torch.int64).cpu().numpy()
        train = _TRAINING.get()
        iteration = int(neox_args.iteration) + (1 if train else 0)
        rows = np.concatenate([np.full((text.shape[0], 1), iteration, dtype=np.int64), text], axis=1)
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        name = f"{'train' if train else 'eval'}-rank{rank}.bin"
        with open(os.path.join(out_dir, name), "ab") as f:
            f.write(np.ascontiguousarray(rows).tobytes())
        return out

    training.forward_step = forward_step
    training.get_batch = get_batch
