"""The run plan the hooks apply: the planner (``neox_epoch.plan.planner``) fed with NeoX's own parsed values.

Every rank computes it from the same .idx files and config values, so the result is identical on all
ranks; settings handed in by ``neox-epoch launch`` are checked against it (a corpus changed between the
launch and the worker start is an error, not a silent difference).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from neox_epoch.errors import ConfigError, PlanError
from neox_epoch.formats.neox_config import EpochBlock, NeoxConfig
from neox_epoch.plan.exact import exact_plan, passes_per_source
from neox_epoch.plan.from_neox import plan_input_from_neox, schedule_keys
from neox_epoch.plan.planner import Plan, PlanInput, SourcePlan, SourceSpec, make_plan
from neox_epoch.plan.schedule import Schedule, attach_neox
from neox_epoch.plan.stage_schedule import neox_lr_schedule, with_stage_decay
from neox_epoch.plan.staged import StagedRun, plan_staged
from neox_epoch.plan.stages import refuse_over_cap

#: NeoX argument names the planner reads (NeoXArgs attributes / merged YAML keys)
PLAN_KEYS = (
    "seq_length",
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "global_num_gpus",
    "num_gpus",
    "num_nodes",
    "pipe_parallel_size",
    "model_parallel_size",
    "train_data_paths",
    "valid_data_paths",
    "test_data_paths",
    "train_data_weights",
    "valid_data_weights",
    "test_data_weights",
    "data_path",
    "split",
    "train_iters",
    "train_epochs",
    "warmup",
    "lr_decay_iters",
    "pack_impl",
    "eval_interval",
    "eval_iters",
    "seed",
    "weight_by_num_documents",
    "weighted_sampler_alpha",
    "allow_chopped",
    # the schedule keys a new train_iters touches (neox_epoch.plan.schedule)
    "lr_decay_fraction",
    "lr_decay_style",
    "min_lr",
    "save",
    "load",
    "checkpoint_factor",
    "checkpoint_scale",
    "extra_save_iters",
    "exit_interval",
    "use_checkpoint_lr_scheduler",
)


@dataclass(frozen=True)
class RunPlan:
    """The plan for one NeoX run under the hooks."""

    plan: Plan
    """The planner's result (per source and split)."""
    train: tuple[SourcePlan, ...]
    """The train split's sources, in NeoX's dataset order."""
    targets: dict[str, float] | None
    """Passes asked per source label (None: observe only, train_iters from the config)."""
    blended: bool
    """train_data_paths mode: the train split is a BlendableDataset."""
    weights: tuple[float, ...] | None
    """The float64-normalized weights the blend's greedy uses (None when not blended)."""
    buffer: float | None
    """Per-source factor replacing NeoX's 1.005 (None with exact targets or in data_path mode)."""
    exact_targets: tuple[int, ...] | None
    """Exact per-source num_samples (blends in exact mode)."""
    separate_epochs: bool
    """Each epoch of a train index shuffled on its own."""
    spillover: tuple[str, ...]
    """Sources whose index is drawn partly across jointly shuffled epochs (fractional passes > 1)."""
    schedule: Schedule = field(default_factory=lambda: Schedule((), ()))
    """train_iters and the learning-rate/checkpoint/eval keys that follow it (neox_epoch.plan.schedule)."""
    staged: StagedRun | None = None
    """The stage plan (None without ``stages`` in the block): the hooks build each source pass by pass and draw
    the stages in order."""

    @property
    def train_iters(self) -> int:
        return self.plan.train_iters

    @property
    def train_batch_size(self) -> int:
        return self.plan.global_batch_size

    def overwrite(self) -> dict[str, Any]:
        """The values to hand NeoX (as from_ymls overwrite values, or set on NeoXArgs): train_iters and every
        schedule key that changed (train_epochs cleared in train_epochs mode)."""
        return {"train_iters": self.train_iters, **self.schedule.overwrite()}

    def changes(self) -> list[str]:
        """``key old -> new (action): why`` for every value :meth:`overwrite` changes, for the logs."""
        return [c.line() for c in self.schedule.changes if c.key in self.schedule.overwrite()]

    def settings(self) -> dict[str, Any]:
        """What the launcher hands to the workers (and the JSON record repeats)."""
        out: dict[str, Any] = {"train_iters": self.train_iters, "train_batch_size": self.train_batch_size}
        if self.buffer is not None:
            out["blend_buffer"] = self.buffer
        if self.exact_targets is not None:
            out["targets"] = {s.name: t for s, t in zip(self.train, self.exact_targets)}
            out["weights"] = self.plan.planned_weights()
        return out


def values_from_args(neox_args: Any) -> dict[str, Any]:
    """The planner's keys read off a NeoXArgs object (or any object with those attributes)."""
    return {k: getattr(neox_args, k, None) for k in PLAN_KEYS}


def _targets(block: EpochBlock, labels: list[str], prefixes: list[str], train_epochs: Any) -> dict[str, float] | None:
    ep = block.epochs
    if ep is None and train_epochs:
        ep = float(train_epochs)
    if ep is None:
        return None
    if isinstance(ep, Mapping):
        known = set(labels) | set(prefixes)
        unknown = sorted(str(k) for k in ep if str(k) not in known)
        if unknown:
            raise ConfigError(f"neox_epoch.epochs: unknown source(s) {unknown}; give one of {labels} (name or path)")
    return passes_per_source(ep, [SourceSpec(p, name=lab) for p, lab in zip(prefixes, labels)])


def make_run_plan(values: Mapping[str, Any], block: EpochBlock, settings: Mapping[str, Any] | None = None) -> RunPlan:
    """Plan the run described by NeoX's ``values`` under ``block``; check ``settings`` handed in, if any."""
    vals = {k: v for k, v in values.items() if v is not None}
    train_epochs = vals.pop("train_epochs", None)
    given_iters = vals.get("train_iters")
    settings = dict(settings or {})
    if settings.get("train_batch_size") and not vals.get("train_batch_size"):
        vals["train_batch_size"] = settings["train_batch_size"]
    cfg = NeoxConfig(values=vals, origin={}, block=block)
    inp: PlanInput = plan_input_from_neox(cfg)
    inp = replace(inp, framework_version="neox-hooks", warmup_iters=None)
    labels = [s.label for s in inp.train_sources]
    staged = plan_staged(inp, block.stages_config()) if block.stages is not None else None
    targets = (
        staged.passes() if staged else _targets(block, labels, [s.prefix for s in inp.train_sources], train_epochs)
    )
    blended = inp.per_split_paths
    if targets is not None and block.max_passes is not None and staged is None:
        refuse_over_cap(block.max_passes, targets)
    if staged is not None:
        plan, buffer = staged.plan, None
    elif targets is not None:
        plan, buffer = _epochs_plan(inp, block, targets, len(labels))
    else:
        plan, buffer = _iters_plan(inp, block, given_iters, len(labels))
    train = tuple(s for s in plan.sources if s.split == "train")
    weights, exact_targets = (
        _blend_weights(plan, train, targets is not None and len(labels) > 1) if blended else (None, None)
    )
    keys = replace(schedule_keys(cfg), train_epochs=int(train_epochs) if train_epochs else None)
    plan, schedule = attach_neox(plan, keys, _old_train_iters(inp, given_iters, train_epochs), targets)
    if staged is not None and staged.config.decay is not None:  # lr_decay_iters on the asked stage boundary
        plan, schedule = with_stage_decay(
            plan, schedule, keys, neox_lr_schedule(cfg, keys, staged), inp.warmup_share_limit
        )
    rp = RunPlan(
        plan=plan,
        train=train,
        targets=targets,
        blended=blended,
        weights=weights,
        buffer=buffer,
        exact_targets=exact_targets,
        separate_epochs=block.separate_epochs,
        spillover=_spillover(train, targets, block.separate_epochs or staged is not None),
        schedule=schedule,
        staged=staged,
    )
    _check_settings(rp, settings)
    _check_enforced(rp, block, given_iters, settings)
    return rp


def _epochs_plan(
    inp: PlanInput, block: EpochBlock, targets: dict[str, float], sources: int
) -> tuple[Plan, float | None]:
    """The exact plan for the passes asked, and the blend buffer it settles on (None for a blend's exact targets)."""
    plan = exact_plan(replace(inp, train_iters=None), targets)
    if block.blend_buffer not in (None, "exact") and sources > 1:
        raise ConfigError(
            f"neox_epoch.blend_buffer: {block.blend_buffer} with epochs for a blend of {sources} "
            'sources; exact epochs need exact targets: remove blend_buffer or set it to "exact"'
        )
    bb = plan.settings.get("blend_buffer")
    return plan, float(bb) if isinstance(bb, (int, float)) else None


def _iters_plan(inp: PlanInput, block: EpochBlock, given_iters: Any, sources: int) -> tuple[Plan, float | None]:
    """The plan under the config's train_iters (no epochs asked), and the blend buffer of a train_data_paths run."""
    if given_iters is None:
        raise ConfigError(
            "neox_epoch: no epochs in the block and no train_iters in the config; add "
            '"epochs": N to the neox_epoch block'
        )
    buffer: float | None = None
    if inp.per_split_paths:
        bb = block.blend_buffer
        if bb == "exact":
            raise ConfigError('neox_epoch.blend_buffer: "exact" needs epochs; add "epochs": N to the block')
        buffer = float(bb) if bb is not None else (1.0 if sources == 1 else 1.005)
        inp = replace(inp, neox=replace(inp.neox, blend_buffer=buffer))
    return make_plan(inp), buffer


def _blend_weights(
    plan: Plan, train: tuple[SourcePlan, ...], exact: bool
) -> tuple[tuple[float, ...], tuple[int, ...] | None]:
    """The train blend's weights and, for ``exact`` targets, each train source's exact num_samples."""
    (b,) = [b for b in plan.blends if b.split == "train"]
    weights = tuple(float(w) for w in (b.weights or ()))
    return weights, tuple(int(s.target_samples or s.samples_drawn) for s in train) if exact else None


def _spillover(
    train: tuple[SourcePlan, ...], targets: dict[str, float] | None, separate_epochs: bool
) -> tuple[str, ...]:
    """Train sources whose fractional pass draws part of an index of several jointly shuffled epochs."""
    if targets is None or separate_epochs:
        return ()
    spill = []
    for s in train:
        want = targets.get(s.name, targets.get(s.prefix, 0.0))
        if s.epochs_built > 1 and abs(want - round(want)) > 1e-9:
            spill.append(s.name)
    return tuple(spill)


def _check_enforced(rp: RunPlan, block: EpochBlock, given_iters: Any, settings: Mapping[str, Any]) -> None:
    """Under ``enforce``: refuse a config train_iters that misses the exact epochs, and cross-epoch spillover."""
    if rp.targets is not None and given_iters is not None and int(given_iters) != rp.train_iters:
        if block.enforce and settings.get("train_iters") != int(given_iters):
            raise PlanError(
                f"train_iters: the config sets {given_iters} but {rp.train_iters} give exactly the "
                "requested epochs; remove train_iters from the config (neox_epoch computes it)"
            )
    if rp.spillover and block.enforce:
        raise PlanError(
            f"neox_epoch.epochs: fractional passes over {list(rp.spillover)} draw part of an index of "
            'jointly shuffled epochs (cross-epoch spillover); set "separate_epochs": true'
        )


def _old_train_iters(inp: PlanInput, given_iters: Any, train_epochs: Any) -> int | None:
    """The run's train_iters before exact mode: the config's, or what NeoX derives from train_epochs."""
    if given_iters is not None:
        return int(given_iters)
    if not train_epochs:
        return None
    try:
        stock = replace(inp, train_iters=None, neox=replace(inp.neox, train_epochs=int(train_epochs)))
        return make_plan(stock).train_iters
    except PlanError:
        return None


def _check_settings(rp: RunPlan, settings: Mapping[str, Any]) -> None:
    mine = rp.settings()
    for key in ("train_iters", "train_batch_size", "targets"):
        if key in settings and key in mine and settings[key] != mine[key]:
            raise PlanError(
                f"neox_epoch: {key} handed to this worker is {settings[key]!r} but the data here gives "
                f"{mine[key]!r} (corpus or config changed since the launch?); relaunch"
            )
    if "weights" in settings and rp.weights is not None and settings["weights"]:
        got = [float(w) for w in settings["weights"]]
        total = sum(got)
        norm = [w / total for w in got]
        if any(not math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0) for a, b in zip(norm, rp.weights)):
            raise PlanError(
                f"neox_epoch.weights: {got} differ from the weights the plan verified {list(rp.weights)}; "
                "rewrite the overlay with neox-epoch plan --write-config"
            )
