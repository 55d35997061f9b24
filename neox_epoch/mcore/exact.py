"""Exact passes for people who train on megatron-core datasets: a thin adapter around the planner.

Three steps, all cheap next to building the indices (megatron.core is imported only inside functions)::

    from neox_epoch.mcore import exact_config, install, live_counters, verify_build

    setup = exact_config(gpt_dataset_config, epochs=1, global_batch_size=gbs)
    install(setup)                 # logs the plan on rank 0; verifies every matching builder.build()
    train_ds, valid_ds, test_ds = BlendedMegatronDatasetBuilder(
        GPTDataset, setup.sizes, is_built_on_rank, setup.config).build()
    verify_build((train_ds, valid_ds, test_ds), setup)   # explicit form of what install() hooks in
    # train for setup.train_iters iterations (Megatron-LM: --train-iters setup.train_iters)
    counters = live_counters(train_ds, setup, log_dir=run_dir, writer=tb_writer)   # live passes per source
    counters.step(iteration, consumed_samples)                                     # after every iteration

``exact_config`` plans with the semantics of the INSTALLED megatron-core version
(:func:`neox_epoch.formats.detect.megatron_core_version`), replaces the blend weights by weights under which the
builder's greedy blend draws exactly the integer per-source targets, sets ``mid_level_dataset_surplus``
to 0.0 where the version has the field, and gives the train_iters / train_samples and the builder sizes.
``verify_build`` compares what the real builder built (lengths, documents, epochs, per-source draws of
the first ``train_samples`` samples) with the plan and raises :class:`BuildMismatchError` on any difference.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from neox_epoch.errors import ConfigError, NeoxEpochError, PlanError
from neox_epoch.formats.detect import megatron_core_version
from neox_epoch.mcore.counters import LiveCounters, live_counters
from neox_epoch.mcore.counters_state import CountersStateError
from neox_epoch.plan.exact import exact_plan, passes_per_source
from neox_epoch.plan.planner import (
    SPLITS,
    McoreOptions,
    Plan,
    PlanInput,
    SourcePlan,
    SourceSpec,
)
from neox_epoch.util.ranklog import is_rank_zero
from neox_epoch.util.values import is_whole

logger = logging.getLogger("neox_epoch.mcore")

__all__ = [
    "BuildMismatchError",
    "CountersStateError",
    "ExactSetup",
    "LiveCounters",
    "exact_config",
    "install",
    "live_counters",
    "log_plan",
    "plan_lines",
    "verify_build",
]


class BuildMismatchError(NeoxEpochError):
    """The datasets megatron-core built disagree with the exact plan (lengths, epochs or draws)."""


@dataclass(frozen=True)
class ExactSetup:
    """What to hand to megatron-core and to the training loop for exact passes."""

    config: Any
    """The GPTDatasetConfig to build with: verified blend weights, ``mid_level_dataset_surplus`` 0.0."""
    train_iters: int
    """Iterations that draw exactly the planned samples (Megatron-LM ``--train-iters``)."""
    train_samples: int
    """``train_iters * global_batch_size``: the train size to request (Megatron-LM ``--train-samples``)."""
    sizes: tuple[int, int, int]
    """``[train, valid, test]`` samples for ``BlendedMegatronDatasetBuilder(cls, sizes, ...)``."""
    plan: Plan
    """The full plan (per source and split) the build is checked against."""
    version: str
    """The megatron-core version whose semantics were used."""


def _train_blend(config: Any) -> tuple[list[str], list[float] | None, bool]:
    """(prefixes, weights, per_split) of the train split of a GPTDatasetConfig."""
    bps = getattr(config, "blend_per_split", None)
    if bps is not None and any(bps):
        if bps[0] is None:
            raise ConfigError("blend_per_split: the train entry is None; exact passes need train data")
        prefixes, weights = bps[0]
        return list(prefixes), (list(weights) if weights is not None else None), True
    blend = getattr(config, "blend", None)
    if blend is None:
        raise ConfigError("GPTDatasetConfig.blend and blend_per_split are None (mock data): nothing to plan")
    prefixes, weights = blend
    return list(prefixes), (list(weights) if weights is not None else None), False


def _specs(prefixes: Sequence[str], weights: Sequence[float] | None) -> tuple[SourceSpec, ...]:
    return tuple(SourceSpec(p, float(weights[k]) if weights is not None else None) for k, p in enumerate(prefixes))


def _with_fields(config: Any, **changes: Any) -> Any:
    """``dataclasses.replace`` keeping only fields this megatron-core version has."""
    names = {f.name for f in dataclasses.fields(config) if f.init}
    return dataclasses.replace(config, **{k: v for k, v in changes.items() if k in names})


def plan_input(
    config: Any, global_batch_size: int, *, eval_interval: int = 1000, eval_iters: int = 0, version: str | None = None
) -> tuple[str, PlanInput, tuple[SourceSpec, ...], list[str], bool]:
    """(version, plan input, train specs, train prefixes, per-split?) of a GPTDatasetConfig, as megatron-core
    ``version`` (default: the installed one) builds it."""
    version = version or megatron_core_version()
    if not version:
        raise ConfigError("megatron-core is not installed and no version was given: pip install megatron-core")
    if not is_whole(global_batch_size, 1):
        raise ConfigError(f"global_batch_size: {global_batch_size!r}; expected a positive integer")
    prefixes, weights, per_split = _train_blend(config)
    specs = _specs(prefixes, weights)
    valid_specs: tuple[SourceSpec, ...] = ()
    test_specs: tuple[SourceSpec, ...] = ()
    if per_split:
        bps = config.blend_per_split
        valid_specs = _specs(*bps[1]) if bps[1] is not None else ()
        test_specs = _specs(*bps[2]) if bps[2] is not None else ()
    inp = PlanInput(
        framework="megatron-core",
        framework_version=version,
        seq_length=int(config.sequence_length),
        global_batch_size=global_batch_size,
        train_sources=specs,
        valid_sources=valid_specs,
        test_sources=test_specs,
        per_split_paths=per_split,
        split=None if per_split else config.split,
        eval_interval=eval_interval,
        eval_iters=eval_iters,
        seed=int(config.random_seed),
        mcore=McoreOptions(
            add_extra_token_to_sequence=bool(getattr(config, "add_extra_token_to_sequence", True)),
            renormalize_blend_weights=bool(getattr(config, "renormalize_blend_weights", False)),
        ),
    )
    return version, inp, specs, prefixes, per_split


def exact_config(
    config: Any,
    epochs: float | Mapping[str, float],
    global_batch_size: int,
    *,
    eval_interval: int = 1000,
    eval_iters: int = 0,
    version: str | None = None,
) -> ExactSetup:
    """Plan exactly ``epochs`` passes over the train split of ``config`` (a megatron-core GPTDatasetConfig).

    ``epochs`` is one number for every source or ``{name: epochs}`` (name = the prefix's basename, or the
    prefix itself); fractions are allowed. ``eval_interval``/``eval_iters`` size the valid and test splits
    as Megatron-LM does (``eval_iters=0``: no evaluation). ``version`` overrides the installed
    megatron-core version. Raises :class:`PlanError` when the passes cannot be exact.
    """
    version, inp, specs, prefixes, per_split = plan_input(
        config, global_batch_size, eval_interval=eval_interval, eval_iters=eval_iters, version=version
    )
    passes = passes_per_source(epochs, specs)
    plan = exact_plan(inp, passes)
    _check_no_spillover(plan, specs, passes)
    raw_weights = plan.settings.get("weights")
    new_weights = [float(w) for w in raw_weights] if isinstance(raw_weights, (list, tuple)) else None
    changes: dict[str, Any] = {"mid_level_dataset_surplus": 0.0}
    if new_weights is not None:
        if per_split:
            bps = list(config.blend_per_split)
            bps[0] = (list(prefixes), new_weights)
            changes["blend_per_split"] = bps
        else:
            changes["blend"] = (list(prefixes), new_weights)
    new_config = _with_fields(config, **changes)
    sizes = (plan.consumed["train"], plan.consumed["valid"], plan.consumed["test"])
    return ExactSetup(
        config=new_config,
        train_iters=plan.train_iters,
        train_samples=plan.train_samples,
        sizes=sizes,
        plan=plan,
        version=version,
    )


def _check_no_spillover(plan: Plan, specs: Sequence[SourceSpec], passes: Mapping[str, float]) -> None:
    """The drawn samples must lie in the index's whole passes: no jointly shuffled extra epoch."""
    import math

    for s in plan.sources:
        if s.split != "train":
            continue
        want = passes.get(s.name, passes.get(s.prefix, 1.0))
        if s.epochs_built > math.ceil(want - 1e-12) and not s.separate_final_epoch:
            raise PlanError(
                f"{s.name}: megatron-core {plan.framework_version} builds {s.epochs_built} epochs shuffled jointly "
                f"for {want} passes (its mid-level buffer cannot be set to 0 in this version): the draws would "
                "not be exact; use megatron-core >= 0.13.1 (mid_level_dataset_surplus) or weights None"
            )


# ----------------------------------------------------------------------------------------------------------
# logging


def plan_lines(plan: Plan) -> list[str]:
    """The lines :func:`log_plan` logs: run numbers, then per train source samples per epoch, epochs, passes."""
    lines = [
        f"neox-epoch: megatron-core {plan.framework_version}: train_iters {plan.train_iters} x global batch "
        f"{plan.global_batch_size} = {plan.train_samples} train samples; remainder {plan.remainder_samples} samples "
        f"({plan.remainder_tokens} tokens) under one global batch not drawn",
    ]
    for s in plan.sources:
        if s.split != "train":
            continue
        lines.append(
            f"neox-epoch: {s.name}: {s.samples_per_epoch} samples per epoch ({s.tokens} train tokens), "
            f"{s.epochs_built} epoch(s) built ({s.samples_built} samples), {s.samples_drawn} drawn "
            f"(target {s.target_samples}) = {s.passes} passes"
        )
    lines.extend(f"neox-epoch: warning: {w}" for w in plan.warnings)
    return lines


def log_plan(plan: Plan | ExactSetup, log: logging.Logger | None = None) -> None:
    """Log the plan through ``logging`` (INFO), on rank 0 only."""
    p = plan.plan if isinstance(plan, ExactSetup) else plan
    if not is_rank_zero():
        return
    for line in plan_lines(p):
        (log or logger).info(line)


# ----------------------------------------------------------------------------------------------------------
# checking the real build


def _plan_of(plan: Plan | ExactSetup) -> Plan:
    return plan.plan if isinstance(plan, ExactSetup) else plan


def _sub_datasets(ds: Any) -> tuple[list[Any], bool]:
    """(the GPTDatasets, blended?) of a built split."""
    if hasattr(ds, "dataset_index") and hasattr(ds, "datasets"):
        return list(ds.datasets), True
    return [ds], False


def _check_dataset(split: str, k: int, gpt: Any, sp: SourcePlan, problems: list[str]) -> None:
    where = f"{split} source {k} ({sp.name})"
    path = getattr(gpt, "dataset_path", None)
    if path is not None and os.path.realpath(str(path)) != os.path.realpath(sp.prefix):
        problems.append(f"{where}: built from {path}, plan has {sp.prefix}")
    checks: list[tuple[str, object, object]] = [("length", len(gpt), sp.length)]
    indices = getattr(gpt, "indices", None)
    if indices is not None:
        checks.append(("documents", len(indices), sp.documents))
    if getattr(gpt, "num_samples", None) is not None or sp.samples_requested is not None:
        checks.append(("num_samples requested", getattr(gpt, "num_samples", None), sp.samples_requested))
    doc_index = getattr(gpt, "document_index", None)
    if doc_index is not None and indices is not None and len(indices) > 0:
        checks.append(("epochs built", int(len(doc_index)) // len(indices), sp.epochs_built))
    for what, built, planned in checks:
        if built != planned:
            problems.append(f"{where}: {what} built {built}, planned {planned}")


def verify_build(datasets: Sequence[Any], plan: Plan | ExactSetup) -> dict[str, list[int]]:
    """Compare megatron-core's built ``(train, valid, test)`` with ``plan``; return the per-split draws.

    Checked per split and source: the prefix, documents, requested samples, epochs built and length of
    every GPTDataset, and that the first ``consumed`` samples of the split draw exactly the planned
    count from each source. Raises :class:`BuildMismatchError` listing every disagreement.
    """
    import numpy as np

    p = _plan_of(plan)
    if len(datasets) != 3:
        raise BuildMismatchError(f"verify_build: expected (train, valid, test), got {len(datasets)} datasets")
    problems: list[str] = []
    draws: dict[str, list[int]] = {}
    for i, split in enumerate(SPLITS):
        planned = [s for s in p.sources if s.split == split]
        ds = datasets[i]
        if ds is None:
            if planned:
                problems.append(f"{split}: not built, planned {len(planned)} source(s)")
            continue
        if not planned:
            problems.append(f"{split}: built ({len(ds)} samples) but the plan has no {split} split")
            continue
        subs, blended = _sub_datasets(ds)
        if len(subs) != len(planned):
            problems.append(f"{split}: {len(subs)} source dataset(s) built, planned {len(planned)}")
            continue
        for k, (gpt, sp) in enumerate(zip(subs, planned)):
            _check_dataset(split, k, gpt, sp, problems)
        n = int(p.consumed[split])
        if blended:
            size = int(len(ds))
            pb = next((b for b in p.blends if b.split == split), None)
            if pb is not None and pb.size is not None and size != pb.size:
                problems.append(f"{split}: blend size built {size}, planned {pb.size}")
            m = min(n, size)
            got = np.bincount(np.asarray(ds.dataset_index[:m], dtype=np.int64), minlength=len(subs)).tolist()
        else:
            got = [min(n, int(len(ds)))]
        want = [s.samples_drawn for s in planned]
        if got != want:
            problems.append(f"{split}: the first {n} samples draw {got} per source, planned {want}")
        draws[split] = [int(x) for x in got]
    if problems:
        raise BuildMismatchError(
            "megatron-core built something else than the exact plan: "
            + "; ".join(problems)
            + " (were the datasets built with ExactSetup.config and ExactSetup.sizes?)"
        )
    if is_rank_zero():
        logger.info("neox-epoch: build verified: train draws %s = planned targets", draws.get("train"))
    return draws


# ----------------------------------------------------------------------------------------------------------
# install: log once, verify every matching build


def install(setup: ExactSetup, log: logging.Logger | None = None) -> Callable[[], None]:
    """Log ``setup``'s plan (rank 0) and make ``BlendedMegatronDatasetBuilder.build`` verify its result.

    Builds with ``setup.config`` (same object or equal) and ``setup.sizes`` are checked by
    :func:`verify_build` before they are returned; other builds pass through untouched. Returns a
    function that removes the hook.
    """
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder

    log_plan(setup, log)
    original = BlendedMegatronDatasetBuilder.build

    def build(self: Any) -> Any:
        result = original(self)
        sizes = tuple(int(s) if s is not None else None for s in getattr(self, "sizes", ()))
        if (self.config is setup.config or self.config == setup.config) and sizes == tuple(setup.sizes):
            verify_build(result, setup)
        return result

    build.__wrapped__ = original  # type: ignore[attr-defined]
    BlendedMegatronDatasetBuilder.build = build  # type: ignore[method-assign]

    def uninstall() -> None:
        if BlendedMegatronDatasetBuilder.build is build:
            BlendedMegatronDatasetBuilder.build = original  # type: ignore[method-assign]

    return uninstall
