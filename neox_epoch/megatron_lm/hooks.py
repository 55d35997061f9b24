"""The hooks in each Megatron-LM rank: module attributes wrapped in memory, nothing in Megatron-LM's files.

Wrapped, whatever is there at install time (another wrapper of the same names composes: it is called through):

* ``megatron.training.pretrain`` (what ``pretrain_gpt.py``'s ``from megatron.training import pretrain`` reads):
  the final record after training,
* ``megatron.training.training.build_train_valid_test_datasets``: the built train split is checked against the
  plan (:mod:`neox_epoch.megatron_lm.build_check`), the live counters are made over it and, on a resume, the
  checkpoint's ``neox_epoch_state.json`` is loaded (its data fingerprint compared) before the first step,
* ``megatron.training.training.training_log``: after each iteration, ``counters.step(iteration,
  args.consumed_train_samples)`` (O(1) unless a record is due) and the enforce check (one comparison),
* ``megatron.training.training.save_checkpoint``: the counters' state written into the iteration directory.

Counting is :class:`neox_epoch.mcore.counters.LiveCounters` (it reads the built blend's ``dataset_index`` by
consumed samples, so batch ramps and resumes with another batch stay exact); records go to the run log
(:mod:`neox_epoch.formats.runlog`) on rank 0; scalars through Megatron-LM's own writers
(:mod:`neox_epoch.megatron_lm.writers`).
"""

from __future__ import annotations

import functools
import importlib
import logging
from dataclasses import dataclass, field, replace
from typing import Any

from neox_epoch.errors import NeoxEpochError
from neox_epoch.megatron_lm import build_check, state_file
from neox_epoch.megatron_lm.payload import Payload
from neox_epoch.megatron_lm.writers import MegatronWriters
from neox_epoch.plan.model import Plan
from neox_epoch.util.ranklog import is_rank_zero, rank_zero_logger

log = logging.getLogger("neox_epoch.megatron_lm")
_MARK = "_neox_epoch_megatron_lm"


class PastPlanError(NeoxEpochError):
    """A source drew past its planned samples (enforce on)."""


@dataclass
class Hooks:
    """One rank's hook state."""

    payload: Payload
    plan: Plan | None
    counters: Any = None
    writers: MegatronWriters | None = None
    log_dir: str | None = None
    limit: int | None = None
    """Consumed samples past which some source draws more than planned (None: no limit in the dataset)."""
    originals: dict[tuple[Any, str], Any] = field(default_factory=dict)

    # -------------------------------------------------------------------------------------------- data
    def after_build(self, train_ds: Any) -> None:
        if train_ds is None or self.plan is None:
            return
        found = build_check.differences(self.plan, train_ds)
        if found and self.payload.mode == "exact":
            build_check.check(self.plan, train_ds)
        for line in found:  # observing: said, never stopped
            log.warning("neox_epoch: the build differs from the plan of this line: %s", line)
        args = _args()
        from neox_epoch.mcore.counters import LiveCounters

        self.log_dir = self.payload.log_dir or getattr(args, "tensorboard_dir", None) or getattr(args, "save", None)
        rank0 = is_rank_zero()
        self.writers = MegatronWriters.from_megatron()
        interval = self.payload.log_interval or int(getattr(args, "log_interval", 100) or 100)
        kwargs = {
            "writer": self.writers.scalar_writer(self),
            "log_interval": interval,
            "active": rank0 or self.writers.has_any,
        }
        try:
            self.counters = LiveCounters(train_ds, self.plan, log_dir=self.log_dir if rank0 else None, **kwargs)
        except OSError as err:  # the log dir cannot be made: count and show without the JSONL
            log.warning("neox_epoch: cannot write to %s (%s); no run log, training continues", self.log_dir, err)
            self.counters = LiveCounters(train_ds, self.plan, log_dir=None, **kwargs)
        except NeoxEpochError as err:
            if self.payload.mode == "exact":
                raise
            log.warning("neox_epoch: no counters for this build (%s); training continues", err)
            return
        rank_zero_logger("neox_epoch.mcore")  # from here on the counters log on rank 0 only
        self.limit = _limit(self.counters, self.plan) if self.payload.mode == "exact" else None
        resume = self.payload.settings.get("resume")
        if resume:
            self.counters.train_iters = int(resume["train_iters"])
        if rank0 and not found:
            log.info(
                "neox_epoch: the build matches the plan (%d train sources, %d samples); logging to %s",
                len(self.counters.sources),
                self.counters.size,
                self.log_dir or "(no log dir)",
            )
        consumed = int(getattr(args, "consumed_train_samples", 0) or 0)
        if consumed > 0:
            self.resume(args, consumed)

    def resume(self, args: Any, consumed: int) -> None:
        """Continue the counters from the loaded checkpoint's state (its fingerprint compared); a checkpoint
        without one continues from Megatron-LM's consumed samples."""
        iteration = int(getattr(args, "iteration", 0) or 0)
        state = state_file.read(getattr(args, "load", None), iteration)
        if state is None:
            log.warning(
                "neox_epoch: the checkpoint at iteration %d has no %s: counting from its consumed samples "
                "%d (no fingerprint check)",
                iteration,
                state_file.STATE_NAME,
                consumed,
            )
            state = {
                "format": self.counters_format(),
                "iteration": iteration,
                "consumed_samples": consumed,
                "samples": dict(zip((s.name for s in self.counters.sources), self.counters.counts_at(consumed))),
            }
        self.counters.load_state_dict(state)

    def counters_format(self) -> str:
        from neox_epoch.mcore.counters_state import STATE_FORMAT

        return STATE_FORMAT

    def request(self, training: Any, a: tuple[Any, ...], kw: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """A resume with another global batch: the train split is requested for the plan's samples (what the
        checkpoint's run was built for), not for the new train_iters x global batch."""
        resume = self.payload.settings.get("resume") if self.payload.mode == "exact" else None
        if not resume:
            return a, kw
        nums = kw.get("train_valid_test_num_samples", a[1] if len(a) > 1 else None)
        if nums is None:
            nums = training.get_train_valid_test_num_samples()
        nums = [int(resume["train_request"]), *list(nums)[1:]]
        if is_rank_zero():
            log.info("neox_epoch: train split requested for %d samples (the plan's): %s", nums[0], resume["why"])
        kw = {k: v for k, v in kw.items() if k != "train_valid_test_num_samples"}
        return (a[0], nums), kw

    # -------------------------------------------------------------------------------------------- steps
    def after_step(self, iteration: int) -> None:
        if self.counters is None:
            return
        consumed = int(_args().consumed_train_samples)
        try:
            self.counters.step(iteration, consumed)
        except OSError as err:  # our logging never stops the run
            log.warning("neox_epoch: could not write the run log (%s); training continues", err)
        if self.limit is not None and consumed > self.limit and self.payload.enforce:
            raise PastPlanError(self.past_message(iteration, consumed))

    def past_message(self, iteration: int, consumed: int) -> str:
        counts = self.counters.counts_at(consumed)
        assert self.plan is not None
        train = [s for s in self.plan.sources if s.split == "train"]
        past = [
            f"{sp.name} drew {n} samples, past its planned {sp.samples_drawn} ({sp.passes:g} passes)"
            for sp, n in zip(train, counts)
            if n > sp.samples_drawn
        ]
        return (
            f"neox_epoch: {'; '.join(past)} at iteration {iteration} (consumed samples {consumed}); stopping "
            "(launch with --no-enforce to only log)"
        )

    def after_save(self, iteration: int) -> None:
        if self.counters is None:
            return
        args = _args()
        try:
            state = self.counters.state_dict()
            if is_rank_zero():
                state_file.write(getattr(args, "save", None), int(iteration), state)
        except OSError as err:
            log.warning("neox_epoch: could not write %s (%s); training continues", state_file.STATE_NAME, err)

    def after_pretrain(self) -> None:
        if self.counters is not None:
            try:
                self.counters.final()
            except OSError as err:
                log.warning("neox_epoch: could not write the final record (%s)", err)


def _args() -> Any:
    return importlib.import_module("megatron.training.global_vars").get_args()


def _limit(counters: Any, plan: Plan) -> int | None:
    """The smallest consumed-samples count at which a source has drawn more than planned."""
    train = [s for s in plan.sources if s.split == "train"]
    positions = [counters._counts.position_of_draw(i, sp.samples_drawn) for i, sp in enumerate(train)]
    found = [p for p in positions if p is not None]
    return min(found) if found else None


# ------------------------------------------------------------------------------------------------ install


def _wrap(hooks: Hooks, obj: Any, attr: str, make: Any) -> None:
    real = getattr(obj, attr)
    if getattr(real, _MARK, False):
        return
    wrapper = make(real)
    functools.update_wrapper(wrapper, real)
    setattr(wrapper, _MARK, True)
    hooks.originals[(obj, attr)] = real
    setattr(obj, attr, wrapper)


def install(payload: Payload, plan: Plan | None) -> Hooks:
    """Wrap Megatron-LM's names (call before the script runs ``pretrain``)."""
    training = importlib.import_module("megatron.training.training")
    package = importlib.import_module("megatron.training")
    hooks = Hooks(payload, plan)

    def build(real: Any) -> Any:
        def wrapper(*a: Any, **kw: Any) -> Any:
            a, kw = hooks.request(training, a, kw)
            result = real(*a, **kw)
            hooks.after_build(result[0] if isinstance(result, (tuple, list)) and result else None)
            return result

        return wrapper

    def step(real: Any) -> Any:
        def wrapper(*a: Any, **kw: Any) -> Any:
            result = real(*a, **kw)
            hooks.after_step(int(kw["iteration"] if "iteration" in kw else a[3]))
            return result

        return wrapper

    def save(real: Any) -> Any:
        def wrapper(*a: Any, **kw: Any) -> Any:
            result = real(*a, **kw)
            hooks.after_save(int(kw["iteration"] if "iteration" in kw else a[0]))
            return result

        return wrapper

    def pretrain(real: Any) -> Any:
        def wrapper(*a: Any, **kw: Any) -> Any:
            try:
                result = real(*a, **kw)
            except SystemExit:  # --exit-interval / --exit-duration / a signal: Megatron-LM leaves by sys.exit
                hooks.after_pretrain()
                raise
            hooks.after_pretrain()
            return result

        return wrapper

    _wrap(hooks, training, "build_train_valid_test_datasets", build)
    _wrap(hooks, training, "training_log", step)
    _wrap(hooks, training, "save_checkpoint", save)
    _wrap(hooks, package, "pretrain", pretrain)
    if plan is not None and payload.mode == "exact":
        hooks.plan = replace(plan, settings={**plan.settings, **payload.settings})
    return hooks


def uninstall(hooks: Hooks) -> None:
    for (obj, attr), real in hooks.originals.items():
        setattr(obj, attr, real)
    hooks.originals.clear()
