"""What one installation of the NeoX hooks holds (:class:`State`), and the small pieces every hook module
shares: the rank, the loader shape, the train iterator's replay guard."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from neox_epoch.errors import NeoxEpochError
from neox_epoch.formats import fingerprint as fingerprint_format
from neox_epoch.neox.block import HookBlock
from neox_epoch.neox.counters import JsonlSink, PassCounters
from neox_epoch.neox.planning import RunPlan
from neox_epoch.neox.resume_state import (
    ResumeDecision,
    ResumeState,
)
from neox_epoch.semantics import neox_index, stage_order
from neox_epoch.semantics.loader import LoaderShape
from neox_epoch.util.ranklog import rank_zero_logger

log = rank_zero_logger("neox_epoch.neox")


#: why valid and test keep NeoX's own build (its 1.005 buffer, epochs shuffled jointly)
EVAL_NOTE = (
    "built as NeoX builds them (x1.005, epochs shuffled jointly): evaluation does not train, so how often it "
    "sees a token changes no weight; only the train split is made exact"
)


class WrapError(NeoxEpochError):
    """``enforce``: NeoX would have wrapped an index past a dataset's end (``idx % len``)."""


@dataclass
class DatasetRecord:
    """One ``_build_index_mappings`` call NeoX made."""

    name: str
    prefix: str
    documents: int
    tokens: int
    num_samples: int | None
    epochs: int
    samples_built: int
    separated: bool


@dataclass
class State:
    """Everything one installation holds (one per process)."""

    hook: HookBlock
    modules: dict[str, ModuleType]
    originals: dict[tuple[str, str], Any] = field(default_factory=dict)
    run: RunPlan | None = None
    counters: PassCounters | None = None
    builds: list[DatasetRecord] = field(default_factory=list)
    in_build: bool = False
    normalize_calls: int = 0
    table: list[dict[str, Any]] = field(default_factory=list)
    sink: JsonlSink = field(default_factory=lambda: JsonlSink(None))
    blend_request: tuple[list[float], list[int]] | None = None
    """The train blend's (weights, num_samples) as handed to NeoX."""
    saved: ResumeState | None = None
    """What the checkpoint being resumed recorded (None: a new run, or saved without the hooks)."""
    resume: ResumeDecision | None = None
    """Set when the batch shape changed since ``saved``: where to start drawing and when to stop."""
    consumed_base: int = 0
    """Samples consumed at ``iteration_base`` (the iteration training started or resumed at)."""
    iteration_base: int = 0
    valid_samples: int = 0
    """len of the validation dataset NeoX built (0: none), recorded with each checkpoint's state."""
    fingerprint: fingerprint_format.DataFingerprint | None = None
    """The run's data fingerprint (computed once, saved with every checkpoint state)."""

    @property
    def block(self) -> Any:
        return self.hook.block

    def original(self, module: str, name: str) -> Any:
        return self.originals[(module, name)]


def loader_shape(neox_args: Any) -> LoaderShape:
    """The run's train loader shape from NeoX's args (dp = train_batch_size / (micro x grad-accum))."""
    micro = int(getattr(neox_args, "train_micro_batch_size_per_gpu", 1) or 1)
    gas = accumulation_steps(neox_args)
    return LoaderShape(micro, int(neox_args.train_batch_size) // (micro * gas), gas)


def set_arg(neox_args: Any, key: str, value: Any) -> None:
    if hasattr(neox_args, "update_value"):
        neox_args.update_value(key, value)
    else:
        setattr(neox_args, key, value)


def accumulation_steps(neox_args: Any) -> int:
    """NeoX's gradient_accumulation_steps: loader batches per iteration."""
    return int(getattr(neox_args, "gradient_accumulation_steps", 1) or 1)


def replay_message(iteration: int, batches: int, gas: int) -> str:
    """The one line for a train loader used up at ``iteration`` (1-based) after ``batches`` batches."""
    return (
        f"iteration {iteration}: the train loader's {batches} batches are used up after iteration {batches // gas}"
        f" and NeoX's itertools.cycle would replay them from its first batch (the same samples again); the run "
        "draws more than was built: replan it (neox-epoch plan), or lower train_iters"
    )


class ReplayGuard:
    """NeoX's train iterator, counting the batches taken: past the loader's end (where ``itertools.cycle``
    starts replaying its first batches) it raises :class:`WrapError` (``enforce``) or logs one warning
    naming the iteration. The position is ``iteration * gradient_accumulation_steps`` plus the batches
    taken since (``first``: the loader batch a resume with another batch shape starts at), so it also holds
    after a resume (NeoX's own start offset is taken modulo the loader)."""

    def __init__(self, inner: Any, neox_args: Any, batches: int, enforce: bool, first: int | None = None) -> None:
        self.inner, self.neox_args, self.batches, self.enforce = inner, neox_args, int(batches), enforce
        self.gas = accumulation_steps(neox_args)
        self.position = int(getattr(neox_args, "iteration", 0) or 0) * self.gas if first is None else first
        self.warned = False

    def __iter__(self) -> ReplayGuard:
        return self

    def __next__(self) -> Any:
        if self.position >= self.batches:
            iteration = int(getattr(self.neox_args, "iteration", 0) or 0) + 1
            msg = replay_message(iteration, self.batches, self.gas)
            if self.enforce:
                raise WrapError(msg + " (enforce is on)")
            if not self.warned:
                log.warning("neox_epoch: %s", msg)
            self.warned = True
        self.position += 1
        return next(self.inner)


def base_name(name: str) -> str:
    """NeoX's dataset name without the suffix of an epoch-separated or staged index."""
    return name.replace(neox_index.NAME_SUFFIX, "").replace(stage_order.STAGES_SUFFIX, "")
