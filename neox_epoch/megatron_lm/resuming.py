"""A launch that resumes (``--load`` with a checkpoint that has ``neox_epoch_state.json``): the train iterations
the rest of the plan takes with this launch's global batch.

Megatron-LM continues from the checkpoint's iteration and ``consumed_train_samples`` and stops at
``--train-iters``; with another global batch than the saved run's, the plan's ``train_iters`` (made for a run
from sample 0) would stop early or run past the blend. The iterations left are ``(train_samples - consumed) //
global batch``; a remainder is said, not hidden. Torch-free.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from neox_epoch.errors import NeoxEpochError
from neox_epoch.formats.fingerprint import DataFingerprint, compare, fingerprint, message
from neox_epoch.megatron_lm import state_file
from neox_epoch.megatron_lm.line import values_of

TRACKER = "latest_checkpointed_iteration.txt"


class ChangedData(NeoxEpochError):
    """The data a resume would train on differs from the data the checkpoint trained on."""


@dataclass(frozen=True)
class ResumePoint:
    iteration: int
    consumed_samples: int
    global_batch_size: int | None
    fingerprint: dict[str, Any] | None = None
    path: str = ""
    dataset_size: int | None = None
    """Samples of the train split the checkpoint's run built (its request): the resumed run asks for the same."""
    planned_global_batch_size: int | None = None
    """The global batch the checkpoint's run was planned with."""


def resume_point(flags: Sequence[str]) -> ResumePoint | None:
    """The checkpoint ``--load`` (else ``--save``, as Megatron-LM's auto-resume) resumes from, when it carries
    neox-epoch's state; None otherwise (a fresh run, or a checkpoint saved without the hooks)."""
    loads, saves = values_of(flags, "--load"), values_of(flags, "--save")
    load = (loads[-1] if loads else None) or (saves[-1] if saves else None)
    if not load or not os.path.isfile(os.path.join(load, TRACKER)):
        return None
    with open(os.path.join(load, TRACKER), encoding="utf-8") as f:
        text = f.read().strip()
    if not text.isdigit():
        return None  # "release" or damaged: Megatron-LM says so itself
    iteration = int((values_of(flags, "--ckpt-step") or [text])[-1])
    state = state_file.read(load, iteration)
    if state is None or "consumed_samples" not in state:
        return None
    gbs = state.get("global_batch_size")
    fp = state.get("fingerprint")
    return ResumePoint(
        iteration,
        int(state["consumed_samples"]),
        int(gbs) if gbs else None,
        fp if isinstance(fp, dict) else None,
        os.path.join(state_file.iteration_dir(load, iteration), state_file.STATE_NAME),
        _whole(state.get("dataset_size")),
        _whole(state.get("global_batch_size_planned")),
    )


def _whole(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def check_data(point: ResumePoint, prefixes: Sequence[str], seq_length: int, seed: int) -> None:
    """Stop (before anything starts) when the train data differs from the checkpoint's fingerprint."""
    if point.fingerprint is None:
        return
    saved = DataFingerprint.from_dict(point.fingerprint)
    diffs = compare(saved, fingerprint(list(prefixes), int(seq_length), int(seed), saved.stages))
    if diffs:
        raise ChangedData(
            f"{point.path}: {message(diffs)}; resume on the data the checkpoint trained on, or "
            "start a new run (another --save / no --load)"
        )


def resumed_iters(point: ResumePoint, train_samples: int, global_batch_size: int) -> tuple[int, str]:
    """(train_iters, why) for a launch resuming at ``point`` with ``global_batch_size``."""
    left = max(0, int(train_samples) - point.consumed_samples)
    iters = point.iteration + left // global_batch_size
    why = (
        f"resume at iteration {point.iteration}, consumed samples {point.consumed_samples}: train_iters = "
        f"{point.iteration} + (train_samples - consumed) // global_batch_size = {point.iteration} + "
        f"({train_samples} - {point.consumed_samples}) // {global_batch_size} = {iters}"
    )
    if left % global_batch_size:
        why += f"; the last {left % global_batch_size} samples are not a whole global batch: not trained (remainder)"
    return iters, why
