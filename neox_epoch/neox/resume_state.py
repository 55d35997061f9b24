"""The data position a NeoX checkpoint resumes from, saved by the hooks beside each checkpoint.

NeoX resumes its train loader at ``iteration * gradient_accumulation_steps`` loader batches of the *new*
run (:mod:`neox_epoch.semantics.loader`), which is where the old run stopped only when the global batch did not
change. The hooks therefore write ``neox_epoch_state.json`` into every checkpoint tag directory
(``{save}/global_step{N}/``, rank 0, atomically): the samples consumed, the batch shape, the samples the
run draws in all, and what each train dataset was built with. A resumed run reads it from the tag NeoX is
about to load (``{load}/latest``, or the config's ``iteration``) before NeoX builds its data, rebuilds the
same train indices, and starts drawing at the consumed samples.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from neox_epoch.errors import ConfigError
from neox_epoch.formats import fingerprint as fingerprint_format
from neox_epoch.formats.checkpoint import STATE_NAME
from neox_epoch.semantics import TrainBuild
from neox_epoch.semantics.loader import LoaderShape, hooked_start
from neox_epoch.util.inputs import JSON_BYTES, open_input, read_input_text
from neox_epoch.util.output import Output, write_output_text

#: bump when the JSON layout changes
VERSION = 1


@dataclass(frozen=True)
class ResumeState:
    """What the hooks record at a checkpoint."""

    iteration: int
    consumed_samples: int
    """Train samples drawn by the end of ``iteration`` (all batch sizes the run had, summed)."""
    train_batch_size: int
    loader_batch: int
    """micro batch x data-parallel ranks: the samples of one loader batch."""
    samples_total: int
    """The train samples the run draws in all (its first plan: train_iters x train_batch_size)."""
    train_iters: int
    """The run's train_iters when it saved (NeoX's learning-rate scheduler saved its schedule for it)."""
    builds: dict[str, TrainBuild] = field(default_factory=dict)
    """Per train dataset name (``train``, ``train_0``, ...)."""
    drawn: list[int] = field(default_factory=list)
    """Per train source, the samples the blend draws in ``samples_total`` (empty without a blend)."""
    blend_weights: list[float] = field(default_factory=list)
    """The weights handed to NeoX's blend (its draw order), empty without a blend."""
    blend_samples: list[int] = field(default_factory=list)
    """The per-source num_samples handed to NeoX's blend."""
    greedy_weights: list[float] = field(default_factory=list)
    """The float64-normalized weights the counters replay the blend's greedy with."""
    seq_length: int = 0
    """The run's seq_length (0: not recorded)."""
    eval_interval: int = 0
    """The run's eval_interval (0: not recorded): with ``eval_iters``, what its evaluations drew."""
    eval_iters: int = 0
    """The run's eval_iters (0: not recorded)."""
    valid_samples: int = 0
    """Samples of the run's validation dataset, where its evaluations wrap (0: not recorded)."""
    fingerprint: dict[str, Any] | None = None
    """The data fingerprint (:mod:`neox_epoch.formats.fingerprint`): train sources, seq_length, seed, stage plan."""
    stage_boundaries: list[int] = field(default_factory=list)
    """A staged run's first iteration of each stage (empty without stages)."""
    version: int = VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True) + "\n"


def checkpoint_tag_to_load(neox_args: Any) -> str | None:
    """The tag directory NeoX's ``load_checkpoint`` will load, or None (no ``load``, ``finetune``, nothing saved)."""
    load = getattr(neox_args, "load", None)
    if not load or getattr(neox_args, "finetune", False):
        return None
    iteration = getattr(neox_args, "iteration", None)
    if iteration is not None:
        return os.path.join(load, f"global_step{int(iteration)}")
    latest = os.path.join(load, "latest")
    if not os.path.isfile(latest):
        return None
    return os.path.join(load, read_input_text(latest, "DeepSpeed 'latest' file", JSON_BYTES).strip())


def read_state(tag_dir: str) -> ResumeState | None:
    """The state saved in ``tag_dir``, or None when the checkpoint was saved without the hooks."""
    path = os.path.join(tag_dir, STATE_NAME)
    if not os.path.isfile(path):
        return None
    try:
        with open_input(path, "neox-epoch state", JSON_BYTES, encoding="utf-8") as f:
            raw = json.load(f)
    except (OSError, ValueError) as err:
        raise ConfigError(
            f"{path}: not a neox-epoch state ({type(err).__name__}: {err}); it was cut off or edited: "
            "restore it from the checkpoint's copy, or delete it to resume as stock NeoX"
        ) from None
    return state_from_json(raw, path)


def state_from_json(raw: Any, where: str) -> ResumeState:
    """A state from its JSON object (the checkpoint's file, or the ``checkpoint`` record of the run's JSONL)."""
    try:
        if raw.get("version") != VERSION:
            raise ConfigError(
                f"{where}: version {raw.get('version')!r}, this neox-epoch reads version {VERSION}; "
                "resume with the neox-epoch that saved it"
            )
        raw = dict(raw)
        builds = {k: TrainBuild(**v) for k, v in raw.pop("builds").items()}
        return ResumeState(builds=builds, **raw)
    except (AttributeError, ValueError, TypeError, KeyError) as err:
        raise ConfigError(
            f"{where}: not a neox-epoch state ({type(err).__name__}: {err}); it was cut off or edited: "
            "restore it from the checkpoint's copy, or delete it to resume as stock NeoX"
        ) from None


def states_from_log(path: str, records: list[tuple[int, dict[str, Any]]]) -> dict[int, tuple[str, ResumeState]]:
    """The hooks' ``checkpoint`` records (``records``: :func:`neox_epoch.formats.runlog.checkpoint_records` of the run's
    JSONL ``path``): iteration -> (checkpoint tag, state); a later record for the same iteration (a run resumed from
    an earlier checkpoint) replaces the earlier one."""
    found: dict[int, tuple[str, ResumeState]] = {}
    for number, record in records:
        if "state" in record:  # (megatron-core's live counters record "counters")
            state = state_from_json(record.get("state"), f"{path}:{number}")
            found[state.iteration] = (str(record.get("tag") or f"global_step{state.iteration}"), state)
    return found


def write_state(tag_dir: str, state: ResumeState) -> None:
    """Write ``state`` into ``tag_dir`` atomically."""
    write_output_text(
        Output(os.path.join(tag_dir, STATE_NAME), "the hooks' resume state", example=STATE_NAME), state.to_json()
    )


@dataclass(frozen=True)
class ResumeDecision:
    """How the hooks resume a run whose batch shape changed since ``state`` was saved."""

    state: ResumeState
    shape: LoaderShape
    start: int
    """First train sample position the resumed loader draws."""
    train_iters: int
    """The iteration at which the resumed run has drawn what the run draws in all (or the last whole batch)."""
    findings: tuple[str, ...]
    """``resume-check`` findings that still skip or repeat data (empty: exact)."""

    @property
    def changed(self) -> dict[str, list[int]]:
        """What differs from the saved run: key -> [old, new]."""
        out = {}
        if self.state.train_batch_size != self.shape.train_batch_size:
            out["train_batch_size"] = [self.state.train_batch_size, self.shape.train_batch_size]
        if self.state.loader_batch != self.shape.loader_batch:
            out["loader_batch"] = [self.state.loader_batch, self.shape.loader_batch]
        return out


def decide(state: ResumeState, shape: LoaderShape) -> ResumeDecision:
    """Start at the consumed samples; end when the run has drawn its ``samples_total`` (whole new batches)."""
    start = hooked_start(state.consumed_samples, shape)
    left = state.samples_total - state.consumed_samples
    train_iters = state.iteration + max(0, left) // shape.train_batch_size
    findings = []
    if start.repeated:
        lo, hi = start.repeated
        findings.append(
            f"repeat-partial-batch: samples {lo}..{hi - 1} are drawn again: {state.consumed_samples} "
            f"consumed is not a whole number of loader batches of {shape.loader_batch} "
            f"(micro batch x data parallel); choose a micro batch x dp that divides it"
        )
    if left % shape.train_batch_size:
        findings.append(
            f"remainder: the last {left % shape.train_batch_size} of the run's {state.samples_total} "
            f"samples are not drawn: {left} left after iteration {state.iteration} is not a whole number "
            f"of batches of {shape.train_batch_size}; choose a global batch that divides {left}"
        )
    return ResumeDecision(state, shape, start.start, train_iters, tuple(findings))


def started_stages(boundaries: list[int], iteration: int) -> int:
    """Stages a run saved at ``iteration`` had started (stage 1 always; stage k+1 once ``iteration`` passed its
    first iteration ``boundaries[k]``): a resume exactly at a boundary has not started the next stage."""
    return 1 + sum(1 for b in boundaries[1:] if iteration > b)


def fingerprint_changes(
    saved: ResumeState, new: fingerprint_format.DataFingerprint
) -> tuple[list[fingerprint_format.Difference], str]:
    """What differs from the checkpoint's data, and a note on stage changes that are allowed: a stage the saved run
    had not started yet (or only max_passes) may change; a started one may not."""
    if saved.fingerprint is None:
        return [], ""
    old = fingerprint_format.DataFingerprint.from_dict(saved.fingerprint)
    diffs = fingerprint_format.compare(old, new)
    if old.stages is None or new.stages is None:
        return diffs, ""
    started = started_stages(saved.stage_boundaries or [0], saved.iteration)
    before, after = list(old.stages.get("stages") or []), list(new.stages.get("stages") or [])
    if before[:started] != after[:started]:
        return diffs, ""
    kept = [d for d in diffs if not (d.what.startswith("stage ") or d.what == "max_passes")]
    note = ""
    if len(kept) != len(diffs):
        note = (
            f"the stages after stage {started} changed since the checkpoint (iteration {saved.iteration}); the "
            f"{started} started stage(s) are unchanged, so the resume stays exact"
        )
    return kept, note
