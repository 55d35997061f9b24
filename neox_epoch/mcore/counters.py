"""Live per-source pass counters for training loops over megatron-core datasets, keyed on consumed samples.

Megatron-LM's pretraining sampler reads the train dataset in order from ``consumed_train_samples``: after
``c`` consumed samples the model has seen blend positions ``0 .. c-1``, whatever global batches (ramp-up,
a change at a resume) got it there. Which source each position comes from is what the real
``BlendedDataset`` built (its ``dataset_index`` array), so the counters read that array, never a model of it:

* at construction, per-source draw counts at every ``block``-th blend position (one pass over
  ``dataset_index``, a few MB for 10^8 samples), and the blend position where each source starts each
  pass (its ``boundary + 1``-th draw);
* per step, one integer comparison (is the next pass start below ``consumed_samples``?) and a modulo; on a
  logging step, the counts at ``consumed_samples`` = the row of the block below it plus a ``bincount``
  of at most ``block`` entries.

The state is ``consumed_samples``, the per-source draws and the data fingerprint
(:mod:`neox_epoch.formats.fingerprint`: per source name, .idx size, documents, tokens, dtype; seq_length,
seed and the stage plan); :meth:`LiveCounters.load_state_dict` refuses a fingerprint that differs (a stage
plan changed only after the saved stage is fine) and checks the saved draws against the dataset at the saved
position, so a resume whose dataset was built differently (another corpus, another blend, or a plan made for
another global batch) fails in one line instead of counting wrong. States saved before the fingerprint
(the same format, ``"neox_epoch.mcore.counters/1"``, without its key) are still read.

Over the staged dataset of :func:`neox_epoch.mcore.stages.build_stages` the counters also show the stage (a
``stage_start`` record and log line at each boundary, ``stage`` in every counters record, the scalar
``neox_epoch/stage``) and count passes past the one epoch built (pass 2 replays pass 1's order).
"""

from __future__ import annotations

import bisect
import logging
import os
from collections.abc import Mapping
from typing import Any

from neox_epoch.errors import ConfigError
from neox_epoch.formats.fingerprint import DataFingerprint, compare, message
from neox_epoch.formats.runlog import (
    JsonlSink,
    Marker,
    ScalarsWriter,
    SourceCounter,
    SourceState,
    counter_scalars,
    counters_record,
    final_record,
    fmt,
    log_final,
    log_pass_start,
    pass_start_record,
    pass_start_scalar,
    scalars_writer,
    sources_state,
)
from neox_epoch.mcore.counters_state import STATE_FORMAT, CountersStateError, run_fingerprint
from neox_epoch.mcore.draw_counts import BlendCounts, DirectCounts
from neox_epoch.plan.model import Plan
from neox_epoch.util.ranklog import is_rank_zero
from neox_epoch.util.values import is_whole

log = logging.getLogger("neox_epoch.mcore")


def _plan_of(plan_or_setup: Any) -> Plan:
    p = getattr(plan_or_setup, "plan", plan_or_setup)
    if not isinstance(p, Plan):
        raise ConfigError(
            f"plan_or_setup: {type(plan_or_setup).__name__}; expected the ExactSetup from "
            "neox_epoch.mcore.exact.exact_config or its .plan"
        )
    return p


class LiveCounters:
    """Per-source passes over a megatron-core train dataset, stepped by the training loop.

    Use :func:`live_counters` to make one. Every rank can step it (the state is the same everywhere);
    only the logging rank (rank 0) writes the JSONL records, the scalars and the log lines.
    """

    def __init__(
        self,
        train_dataset: Any,
        plan_or_setup: Any,
        *,
        log_dir: str | None = None,
        writer: Any = None,
        log_interval: int = 100,
        active: bool | None = None,
        block: int = 4096,
    ) -> None:
        if not is_whole(log_interval, 1):
            raise ConfigError(f"log_interval: {log_interval!r}; expected a positive integer (iterations)")
        plan = _plan_of(plan_or_setup)
        self.plan = plan
        train = [s for s in plan.sources if s.split == "train"]
        blended = hasattr(train_dataset, "dataset_index") and hasattr(train_dataset, "datasets")
        datasets = list(train_dataset.datasets) if blended else [train_dataset]
        if len(datasets) != len(train):
            raise ConfigError(
                f"train_dataset: {len(datasets)} source dataset(s), the plan has {len(train)} train "
                "sources; pass the train dataset built with this plan's ExactSetup.config and sizes"
            )
        for k, (ds, sp) in enumerate(zip(datasets, train)):
            path = getattr(ds, "dataset_path", None)
            if path is not None and os.path.realpath(str(path)) != os.path.realpath(sp.prefix):
                raise ConfigError(
                    f"train_dataset: source {k} is {path}, the plan has {sp.prefix}; pass the train "
                    "dataset built with this plan's ExactSetup.config"
                )
        self.size = int(len(train_dataset))
        self._counts: BlendCounts | DirectCounts = (
            BlendCounts(train_dataset.dataset_index, len(train), self.size, block)
            if blended
            else DirectCounts(self.size)
        )
        self.stages = getattr(plan_or_setup, "stages_plan", None)
        """The :class:`~neox_epoch.plan.stages.StagesPlan` of a staged dataset (None: no stages)."""

        def passes_counted(sp: Any) -> int:  # a staged source replays its one epoch: count its draws' passes
            return max(sp.epochs_built, 1) if self.stages is None else -(-sp.samples_drawn // sp.samples_per_epoch)

        self.sources = tuple(
            SourceCounter(
                sp.name,
                sp.samples_per_epoch,
                tuple(k * sp.samples_per_epoch for k in range(1, passes_counted(sp))),
                float(sp.passes),
            )
            for sp in train
        )
        self.fingerprint = run_fingerprint(plan, plan_or_setup, datasets)
        """The data fingerprint saved in the state (None when the seed is unknown)."""
        starts: list[tuple[int, int, int]] = []  # (blend position, source, pass number)
        for i, s in enumerate(self.sources):
            for j, b in enumerate(s.boundaries):
                pos = self._counts.position_of_draw(i, b)
                if pos is not None:
                    starts.append((pos, i, j + 2))
        starts.sort()
        self._starts = starts
        self._start_positions = [p for p, _, _ in starts]
        self.log_interval = int(log_interval)
        self.train_iters = int(plan.train_iters)
        self.train_samples = int(plan.train_samples)
        self.active = is_rank_zero() if active is None else bool(active)
        self.sink = JsonlSink(log_dir if self.active else None)
        self._write: ScalarsWriter | None = scalars_writer(writer) if self.active else None
        self.iteration = 0
        self.consumed_samples = 0
        self._next = 0
        self._stage = 0  # index of the stage the last step trained in (staged datasets)
        self._began = False
        self.global_batch_size: int | None = None
        """The samples of the last iteration stepped (the global batch training draws; None: not seen yet)."""
        self._resumed: dict[str, Any] | None = None  # the resume record, written at the first step after it
        self._last_record: int | None = None
        self.markers: list[Marker] = []
        """Pass starts fired so far (this launch), with the iteration that drew them."""

    # ------------------------------------------------------------------------------------------------
    def counts_at(self, consumed_samples: int) -> list[int]:
        """Samples drawn from each source after ``consumed_samples`` samples (exact, from ``dataset_index``)."""
        return self._counts.counts(consumed_samples)

    def passes_at(self, consumed_samples: int) -> dict[str, SourceState]:
        """Per source: samples drawn, fractional passes, the pass in progress (1-based)."""
        return sources_state(self.sources, self.counts_at(consumed_samples))

    def pass_starts(self) -> list[tuple[str, int, int]]:
        """(source, pass, blend position of its first sample) for every pass start inside the dataset."""
        return [(self.sources[i].name, p, pos) for pos, i, p in self._starts]

    # ------------------------------------------------------------------------------------------------
    def _begin(self, iteration: int) -> None:
        if self._began:
            return
        self._began = True
        if not self.active:
            return
        rows = [
            {
                "name": sp.name,
                "prefix": sp.prefix,
                "documents": sp.documents,
                "tokens": sp.tokens,
                "samples_per_epoch": sp.samples_per_epoch,
                "epochs_built": sp.epochs_built,
                "samples_built": sp.samples_built,
                "samples_drawn": sp.samples_drawn,
                "passes": sp.passes,
                "target_samples": sp.target_samples,
            }
            for sp in self.plan.sources
            if sp.split == "train"
        ]
        self.sink.write(
            {
                "event": "plan",
                "iteration": int(iteration),
                "framework": self.plan.framework,
                "framework_version": self.plan.framework_version,
                "train_iters": self.train_iters,
                "train_batch_size": int(self.plan.global_batch_size),
                "train_samples": self.train_samples,
                "seq_length": int(self.plan.seq_length),
                "mode": "exact" if self.plan.settings.get("targets") else "observe",
                "blended": isinstance(self._counts, BlendCounts),
                "dataset_size": self.size,
                "sources": rows,
                "remainder": {"samples": self.plan.remainder_samples, "tokens": self.plan.remainder_tokens},
            }
        )

    def step(self, iteration: int, consumed_samples: int) -> None:
        """Call after each iteration with Megatron-LM's ``iteration`` and ``consumed_train_samples`` (the samples
        consumed including this iteration's). O(1) unless a record is due."""
        c = int(consumed_samples)
        if c < self.consumed_samples:
            raise CountersStateError(
                f"consumed_samples {c} at iteration {iteration} is below the {self.consumed_samples} "
                "already counted; pass the running total (Megatron-LM args.consumed_train_samples)"
            )
        if c > self.size:
            raise CountersStateError(
                f"consumed_samples {c} at iteration {iteration} exceeds the train dataset's "
                f"{self.size} samples; stop at {self.train_samples} (the plan's train_samples)"
            )
        self._begin(int(iteration) - 1)
        if int(iteration) == self.iteration + 1:
            self.global_batch_size = c - self.consumed_samples
        self._write_resume()
        self.iteration, self.consumed_samples = int(iteration), c
        if self._next < len(self._start_positions) and self._start_positions[self._next] < c:
            self._fire()
        if self.stages is not None:
            self._stage_step()
        if self.active and self.iteration % self.log_interval == 0:
            self._record()

    def stage_at(self, consumed_samples: int) -> int:
        """0-based index of the stage that trained the last of ``consumed_samples`` samples (0 before any)."""
        assert self.stages is not None
        last = max(int(consumed_samples) - 1, 0)
        return next(
            (
                k
                for k, st in enumerate(self.stages.stages)
                if last < (st.first_iteration + st.iterations) * self.stages.global_batch_size
            ),
            len(self.stages.stages) - 1,
        )

    def _stage_step(self) -> None:
        assert self.stages is not None
        now = self.stage_at(self.consumed_samples)
        while self._stage < now:
            self._stage += 1
            st = self.stages.stages[self._stage]
            if not self.active:
                continue
            state = self.passes_at(st.first_iteration * self.stages.global_batch_size)
            log.info(
                "neox_epoch: stage %s starts at iteration %d (planned %d); cumulative passes: %s",
                st.name,
                self.iteration,
                st.first_iteration,
                fmt(state),
            )
            self.sink.write(
                {
                    "event": "stage_start",
                    "iteration": self.iteration,
                    "stage": self._stage + 1,
                    "name": st.name,
                    "planned_iteration": st.first_iteration,
                    "consumed_samples": self.consumed_samples,
                    "sources": state,
                }
            )
            if self._write is not None:
                self._write({"neox_epoch/stage": float(self._stage + 1)}, self.iteration)

    def _fire(self) -> None:
        while self._next < len(self._start_positions) and self._start_positions[self._next] < self.consumed_samples:
            pos, i, p = self._starts[self._next]
            self._next += 1
            m = Marker(self.iteration, self.sources[i].name, p, pos)
            self.markers.append(m)
            if not self.active:
                continue
            log_pass_start(log, m)
            self.sink.write({**pass_start_record(m), "consumed_samples": self.consumed_samples})
            if self._write is not None:
                tag, value = pass_start_scalar(m)
                self._write({tag: value}, m.iteration)

    def _record(self) -> None:
        state = self.passes_at(self.consumed_samples)
        self._last_record = self.iteration
        record = counters_record(self.iteration, self.consumed_samples, state)
        scalars = counter_scalars(state)
        if self.stages is not None:
            record["stage"] = self._stage + 1  # the same keys as the NeoX hooks' counters records
            record["stage_name"] = self.stages.stages[self._stage].name
            scalars["neox_epoch/stage"] = float(self._stage + 1)
        self.sink.write(record)
        if self._write is not None:
            self._write(scalars, self.iteration)

    # ------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """What to save in the checkpoint beside Megatron-LM's ``consumed_train_samples`` (plain JSON types); call
        it when saving one: the logging rank also records it in the JSONL (a ``checkpoint`` record), where
        ``neox-epoch resume-check LOG_DIR`` reads it without the checkpoint."""
        state = {
            "format": STATE_FORMAT,
            "iteration": self.iteration,
            "consumed_samples": self.consumed_samples,
            "samples": dict(zip((s.name for s in self.sources), self.counts_at(self.consumed_samples))),
            "global_batch_size_planned": int(self.plan.global_batch_size),
            "dataset_size": self.size,
            "global_batch_size": self.global_batch_size,
        }
        if self.fingerprint is not None:
            state["fingerprint"] = self.fingerprint.to_dict()
        if self.stages is not None:
            state["stage"] = self.stages.stages[self.stage_at(self.consumed_samples)].name
        if self.active:
            self.sink.write({"event": "checkpoint", "iteration": self.iteration, "counters": state})
        return state

    def load_state_dict(self, state: Mapping[str, Any], *, data_change_intended: bool = False) -> None:
        """Continue from a checkpoint's :meth:`state_dict` (the global batch may differ from the saved run's).

        A saved data fingerprint that differs from this run's stops the resume with one line naming what changed
        (a stage plan changed only after the saved stage is not a change of what was trained), unless
        ``data_change_intended``. The saved per-source draws must equal this dataset's draws at the saved
        ``consumed_samples``; else :class:`CountersStateError` names the source and both numbers."""
        if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
            got = state.get("format") if isinstance(state, Mapping) else type(state).__name__
            raise CountersStateError(
                f"counters state: format {got!r}, expected {STATE_FORMAT!r}; pass what "
                "LiveCounters.state_dict() returned"
            )
        c, it = int(state["consumed_samples"]), int(state["iteration"])
        if not data_change_intended:
            self._check_fingerprint(state, c)
        saved: Mapping[str, int] = state["samples"]
        names = [s.name for s in self.sources]
        if sorted(saved) != sorted(names):
            raise CountersStateError(
                f"counters state: sources {sorted(saved)}, this train dataset has {sorted(names)}; "
                "resume with the blend the checkpoint was trained on"
            )
        if c > self.size:
            raise CountersStateError(
                f"counters state: consumed_samples {c}, this train dataset has {self.size} samples; "
                "rebuild it with the checkpoint's plan (the global batch it was planned with)"
            )
        now = self.counts_at(c)
        for name, n in zip(names, now):
            if int(saved[name]) != n:
                raise CountersStateError(
                    f"counters state: {name} had {int(saved[name])} samples drawn at consumed_samples {c} in the "
                    f"checkpoint, this train dataset draws {n} there; rebuild it with the checkpoint's plan "
                    f"(exact_config with global_batch_size {state.get('global_batch_size_planned')}, the same blend "
                    "and epochs) or start the counters without the state"
                )
        self.iteration, self.consumed_samples = it, c
        self._next = bisect.bisect_left(self._start_positions, c)
        self._stage = self.stage_at(c) if self.stages is not None else 0
        self._last_record = None
        self._began = False
        self._begin(it)
        if self.active:
            st = sources_state(self.sources, now)
            log.info("neox_epoch: resumed at iteration %d, consumed samples %d: %s", it, c, fmt(st))
            self._resumed = {
                "event": "resume",
                "iteration": it,
                "consumed_samples": c,
                "sources": st,
                "global_batch_size_planned": state.get("global_batch_size_planned"),
                "saved_global_batch_size": state.get("global_batch_size"),
            }

    def _check_fingerprint(self, state: Mapping[str, Any], consumed: int) -> None:
        saved = state.get("fingerprint")
        if saved is None or self.fingerprint is None:
            return  # a state saved before fingerprints (or a run whose seed is unknown): the draws check remains
        try:
            old = DataFingerprint.from_dict(saved)
        except (ConfigError, KeyError, TypeError, ValueError) as err:
            raise CountersStateError(
                f"counters state: fingerprint unreadable ({err}); pass what LiveCounters.state_dict() returned"
            ) from err
        diffs = compare(old, self.fingerprint)
        done = self.stage_at(consumed) + 1 if self.stages is not None else 0
        kept = [
            d for d in diffs if not (d.what.startswith("stage ") and d.what[6:].isdigit() and int(d.what[6:]) > done)
        ]
        if kept:
            raise CountersStateError(
                f"counters state: {message(kept)}; resume on the data the checkpoint trained on, "
                "or load_state_dict(state, data_change_intended=True) if the change is intended"
            )

    def _write_resume(self) -> None:
        """The resume record, once the first step after it showed the global batch training now draws: a
        different one than the saved run's is the record's ``changed`` (what the run report marks)."""
        if self._resumed is None:
            return
        record, self._resumed = self._resumed, None
        saved, now = record.pop("saved_global_batch_size"), self.global_batch_size
        if saved and now and saved != now:
            record["changed"] = {"train_batch_size": [int(saved), int(now)]}
            record["train_iters"] = record["iteration"] + (self.train_samples - record["consumed_samples"]) // now
        self.sink.write(record)

    def final(self, iteration: int | None = None, consumed_samples: int | None = None) -> dict[str, Any]:
        """The final report (logged and written on the logging rank; a counters record first when the last
        iteration was not a logging one); returned on every rank. Defaults: the last step's numbers."""
        if iteration is not None or consumed_samples is not None:
            self.step(
                self.iteration if iteration is None else iteration,
                self.consumed_samples if consumed_samples is None else consumed_samples,
            )
        self._begin(self.iteration)
        self._write_resume()
        state = self.passes_at(self.consumed_samples)
        report = final_record(
            self.iteration, self.train_iters, self.consumed_samples >= self.train_samples, self.sources, state
        )
        report.update(consumed_samples=self.consumed_samples, train_samples=self.train_samples)
        if self.active:
            if self._last_record != self.iteration:
                self._record()
            log_final(log, report)
            self.sink.write(report)
            self.sink.close()
        return report


def live_counters(
    train_dataset: Any,
    plan_or_setup: Any,
    *,
    log_dir: str | None = None,
    writer: Any = None,
    log_interval: int = 100,
    active: bool | None = None,
) -> LiveCounters:
    """Live per-source pass counters over ``train_dataset`` (the megatron-core train split built with
    ``plan_or_setup``: the :class:`~neox_epoch.mcore.exact.ExactSetup` from ``exact_config`` or its ``.plan``).

    ``log_dir``: JSONL records go to ``<log_dir>/neox_epoch.jsonl`` (None: none). ``writer``: a TensorBoard
    ``SummaryWriter`` (its ``add_scalar(tag, value, step)`` is called) or a W&B run / the ``wandb`` module
    (its ``log({tag: value, ...}, step=iteration)`` is called), or None. ``log_interval``: a counters record
    every this many iterations. ``active``: whether this process writes (default: rank 0 of
    torch.distributed, else ``$RANK`` 0). In the training loop::

        counters = live_counters(train_ds, setup, log_dir=run_dir, writer=tb_writer, log_interval=10)
        if resuming:
            counters.load_state_dict(checkpoint["neox_epoch_counters"])
        for iteration in range(start + 1, ...):
            ...                                   # consumed_samples += global batch of this iteration
            counters.step(iteration, consumed_samples)
        checkpoint["neox_epoch_counters"] = counters.state_dict()
        counters.final()
    """
    return LiveCounters(
        train_dataset, plan_or_setup, log_dir=log_dir, writer=writer, log_interval=log_interval, active=active
    )
