"""Data stages on megatron-core: the blend changes at planned iterations and every source continues where it stopped.

megatron-core's builder has no per-source start offset (docs/stages-research.md): a blend built for a stage
draws each source's samples 0, 1, 2, ... of that source's GPTDataset. So the stages are built differently:

* each train source's GPTDataset is built ONCE, by the real ``BlendedMegatronDatasetBuilder``, for exactly one
  epoch (its own document and sample shuffle, ``num_samples`` = its samples per epoch: one epoch, nothing
  shuffled across epochs);
* stage k draws source s's draws ``start .. start + draws - 1`` (:func:`neox_epoch.plan.stages.plan_stages`:
  right after what stages 1..k-1 drew), position p naming the GPTDataset's sample ``p % samples_per_epoch``:
  every sample of a source is drawn once before any is drawn twice, and pass 2 replays pass 1's order;
* inside a stage the sources interleave as megatron-core's own exhaustive blending does
  (``helpers.build_exhaustive_blending_indices``: the greedy ``argmax(w_i * x - count_i)`` with the weights
  ``draws_i / stage samples``, each source exactly its planned draws).

::

    from neox_epoch.mcore import build_stages, exact_stages, live_counters

    setup = exact_stages(gpt_dataset_config, {"stages": [{"name": "s1", "passes": {"a": 1}},
                                                         {"name": "s2", "passes": {"a": 0.5, "b": 1}}]},
                         global_batch_size=gbs)
    train_ds = build_stages(setup)            # a map-style dataset of setup.train_samples samples
    # train for setup.train_iters iterations (Megatron-LM: --train-iters setup.train_iters), reading train_ds
    # in order from consumed_train_samples, as Megatron-LM's pretraining sampler does
    counters = live_counters(train_ds, setup, log_dir=run_dir, writer=tb_writer)   # stage + cumulative passes

megatron.core is imported only inside :func:`build_stages`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from neox_epoch.errors import ConfigError
from neox_epoch.mcore.exact import BuildMismatchError, _with_fields, plan_input
from neox_epoch.plan.model import Plan, SourcePlan
from neox_epoch.plan.planner import make_plan
from neox_epoch.plan.stage_schedule import StageSchedule, mcore_stage_schedule
from neox_epoch.plan.stages import StagesConfig, StagesPlan, plan_stages
from neox_epoch.util.ranklog import is_rank_zero

logger = logging.getLogger("neox_epoch.mcore")

__all__ = ["StagedDataset", "StagesSetup", "build_stages", "exact_stages", "stage_lines"]


@dataclass(frozen=True)
class StagesSetup:
    """What :func:`exact_stages` planned: the stages, the per-source builds, the run's length."""

    config: Any
    """The GPTDatasetConfig given, with ``mid_level_dataset_surplus`` 0.0 (each source is built from it alone)."""
    stages: StagesConfig
    stages_plan: StagesPlan
    """Per stage and source: draws and where they start in the source's own order; boundaries in iterations."""
    plan: Plan
    """Per train source: documents, tokens, samples per epoch (one epoch built), total draws and passes; what
    :func:`~neox_epoch.mcore.counters.live_counters` counts against."""
    source_configs: tuple[Any, ...]
    """Per train source (blend order): the GPTDatasetConfig that builds its one epoch (blend ``([prefix], None)``)."""
    version: str
    """The megatron-core version whose semantics were used."""

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.plan.sources)

    @property
    def train_iters(self) -> int:
        return self.stages_plan.train_iters

    @property
    def train_samples(self) -> int:
        return self.stages_plan.train_samples

    @property
    def boundaries(self) -> tuple[int, ...]:
        """Iterations at which stage 2, 3, ... start."""
        return self.stages_plan.boundaries

    def lr_schedule(
        self,
        *,
        lr: float | None = None,
        min_lr: float = 0.0,
        warmup_iters: int = 0,
        warmup_fraction: float | None = None,
        style: str = "linear",
        wsd_style: str = "exponential",
        init_lr: float = 0.0,
    ) -> StageSchedule:
        """The learning-rate schedule over the stages: warmup once, the decay where the stage plan's ``decay``
        puts it. ``.settings`` are the Megatron-LM flags (``--lr-decay-iters``; with ``from_stage``
        ``--lr-decay-style WSD --lr-wsd-decay-iters --lr-wsd-decay-style``); ``.scheduler`` the keyword arguments of
        megatron-core's ``OptimizerParamScheduler`` (steps in samples; step it by the global batch per iteration);
        ``.points`` the rate at each stage's first iteration. ``style`` etc. are the run's own flags."""
        return mcore_stage_schedule(
            self.stages_plan,
            self.stages.decay,
            style=style,
            wsd_style=wsd_style,
            warmup_iters=warmup_iters,
            warmup_fraction=warmup_fraction,
            lr=lr,
            min_lr=min_lr,
            init_lr=init_lr,
        )

    def sizes(self, k: int) -> list[int]:
        """``[train, valid, test]`` for source k's build: its samples per epoch (exactly one epoch), no eval."""
        return [int(self.plan.sources[k].samples_per_epoch), 0, 0]


def _stages_config(stages: StagesConfig | Mapping[str, Any]) -> StagesConfig:
    if isinstance(stages, StagesConfig):
        return stages
    return StagesConfig.from_mapping(stages)


def _source_names(train: Sequence[SourcePlan], stages: StagesConfig) -> dict[str, str]:
    """Stage source name -> plan source name: the prefix's basename, or the prefix itself."""
    by: dict[str, str] = {}
    for sp in train:
        by[sp.name] = sp.name
        by.setdefault(sp.prefix, sp.name)
    names = {name for stage in stages.stages for name in stage.sources}
    for name in names:
        if name not in by:
            from neox_epoch.errors import did_you_mean

            raise ConfigError(
                f"stages: source {name!r} is not in the train blend{did_you_mean(name, [s.name for s in train])}; "
                f"the train sources are {', '.join(s.name for s in train)} (name = the prefix's last "
                "path component, or the prefix)"
            )
    return by


def _renamed(stages: StagesConfig, by: Mapping[str, str]) -> StagesConfig:
    """The stages with every source named as the plan names it."""
    out = []
    for st in stages.stages:
        changes: dict[str, Any] = {}
        for key in ("passes", "weights"):
            value = getattr(st, key)
            if value is not None:
                changes[key] = {by[s]: v for s, v in value.items()}
        out.append(dataclasses.replace(st, **changes))
    cap = stages.max_passes
    if isinstance(cap, Mapping):
        cap = {by.get(s, s): v for s, v in cap.items()}
    return StagesConfig(stages=tuple(out), max_passes=cap, decay=stages.decay)


def exact_stages(
    config: Any, stages: StagesConfig | Mapping[str, Any], global_batch_size: int, *, version: str | None = None
) -> StagesSetup:
    """Plan ``stages`` (a :class:`~neox_epoch.plan.stages.StagesConfig` or its mapping) over the train blend of
    ``config`` (a megatron-core GPTDatasetConfig; its weights are not used, the stages give the draws).

    Each source's samples per epoch are the installed (or ``version``'s) megatron-core's; stage boundaries fall
    on whole global batches of ``global_batch_size``. Raises :class:`~neox_epoch.errors.ConfigError` for a stage
    naming a source outside the blend and :class:`~neox_epoch.errors.PlanError` for targets over ``max_passes``
    (before anything is built)."""
    stages = _stages_config(stages)
    version, inp, _specs, prefixes, per_split = plan_input(config, global_batch_size, version=version)
    base = make_plan(dataclasses.replace(inp, train_iters=1))
    train = [s for s in base.sources if s.split == "train"]
    names = _source_names(train, stages)
    renamed = _renamed(stages, names)
    per_epoch = {s.name: int(s.samples_per_epoch) for s in train}
    plan = plan_stages(renamed, per_epoch, global_batch_size)
    totals = plan.total_draws()
    sources = tuple(
        dataclasses.replace(
            s,
            samples_requested=s.samples_per_epoch,
            epochs_built=1,
            samples_built=s.samples_per_epoch,
            length=s.samples_per_epoch,
            separate_final_epoch=False,
            samples_drawn=totals[s.name],
            passes=round(totals[s.name] / s.samples_per_epoch, 6),
            target_samples=totals[s.name],
            tokens_unseen=0,
            tokens_unseen_exact=False,
            formula="one epoch built; drawn by stage",
        )
        for s in train
    )
    counted = dataclasses.replace(
        base,
        train_iters=plan.train_iters,
        train_samples=plan.train_samples,
        consumed={"train": plan.train_samples, "valid": 0, "test": 0},
        sources=sources,
        blends=(),
        warnings=(),
        arithmetic=(),
        settings={"targets": [totals[s.name] for s in train], "stages": renamed.to_mapping()},
        remainder_samples=0,
        remainder_tokens=0,
    )
    base_config = _with_fields(config, mid_level_dataset_surplus=0.0)
    if per_split:  # the train entry alone, the whole prefix (as blend_per_split reads it)
        source_configs = tuple(
            _with_fields(base_config, blend=None, blend_per_split=[([prefixes[k]], None), None, None])
            for k in range(len(train))
        )
    else:
        source_configs = tuple(
            _with_fields(base_config, blend=([prefixes[k]], None), blend_per_split=None) for k in range(len(train))
        )
    return StagesSetup(
        config=base_config,
        stages=renamed,
        stages_plan=plan,
        plan=counted,
        source_configs=source_configs,
        version=version,
    )


# ----------------------------------------------------------------------------------------------------------
# the staged train dataset


class StagedDataset:
    """The train samples of every stage in training order, over the real per-source GPTDatasets.

    ``dataset_index[i]``: the source of position i (blend order); ``dataset_sample_index[i]``: the sample of
    that source's GPTDataset; ``draw_index[i]``: the source's draw number (``draw % samples_per_epoch`` is the
    sample). ``__getitem__`` returns what megatron-core's BlendedDataset returns: ``{"dataset_id": j, **sample}``.
    """

    def __init__(self, datasets: Sequence[Any], setup: StagesSetup) -> None:
        import numpy as np

        self.datasets = list(datasets)
        self.setup = setup
        names = setup.names
        size = setup.train_samples
        self.dataset_index = np.zeros(size, dtype=np.int16)
        self.draw_index = np.zeros(size, dtype=np.int64)
        first = 0
        for stage in setup.stages_plan.stages:
            counts = [stage.draw_of(n).draws if stage.draw_of(n) else 0 for n in names]  # type: ignore[union-attr]
            index, within = _exhaustive(counts)
            self.dataset_index[first : first + stage.samples] = index
            starts = np.array(
                [stage.draw_of(n).start if stage.draw_of(n) else 0 for n in names],  # type: ignore[union-attr]
                dtype=np.int64,
            )
            self.draw_index[first : first + stage.samples] = starts[index.astype(np.int64)] + within
            first += stage.samples
        per_epoch = np.array([s.samples_per_epoch for s in setup.plan.sources], dtype=np.int64)
        self.dataset_sample_index = self.draw_index % per_epoch[self.dataset_index.astype(np.int64)]

    def __len__(self) -> int:
        return int(len(self.dataset_index))

    def __getitem__(self, idx: int) -> dict[str, Any]:
        j = int(self.dataset_index[idx])
        return {"dataset_id": j, **self.datasets[j][int(self.dataset_sample_index[idx])]}


def _exhaustive(counts: Sequence[int]) -> tuple[Any, Any]:
    """megatron-core's exhaustive blending of ``counts`` samples per source: (source per position, the source's
    draw number within the stage). Sources with no draws are left out (the helper would draw them past 0)."""
    import numpy as np
    from megatron.core.datasets import helpers

    used = [k for k, n in enumerate(counts) if n > 0]
    total = int(sum(counts))
    index = np.zeros(total, dtype=np.int16)
    within = np.zeros(total, dtype=np.int64)
    if used:
        helpers.build_exhaustive_blending_indices(
            index, within, np.asarray([counts[k] for k in used], dtype=np.int64), len(used)
        )
    return np.asarray(used, dtype=np.int16)[index] if used else index, within


def build_stages(
    setup: StagesSetup, is_built_on_rank: Callable[[], bool] = lambda: True, dataset_class: Any = None
) -> StagedDataset:
    """Build each train source's one epoch with megatron-core's ``BlendedMegatronDatasetBuilder`` (from
    ``setup.source_configs``) and return the staged train dataset over them, checked against the plan:
    each source's samples per epoch, one epoch built, and every stage drawing exactly its planned draws.
    Raises :class:`~neox_epoch.mcore.exact.BuildMismatchError` on any difference."""
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder

    if dataset_class is None:
        from megatron.core.datasets.gpt_dataset import GPTDataset

        dataset_class = GPTDataset
    datasets = []
    for k, cfg in enumerate(setup.source_configs):
        built = BlendedMegatronDatasetBuilder(dataset_class, setup.sizes(k), is_built_on_rank, cfg).build()[0]
        datasets.append(built)
    staged = StagedDataset(datasets, setup)
    verify_stages(staged, setup)
    if is_rank_zero():
        for line in stage_lines(setup):
            logger.info(line)
    return staged


def verify_stages(staged: StagedDataset, setup: StagesSetup) -> None:
    """The built per-source datasets hold one epoch of the planned size; each stage draws its planned range."""
    import numpy as np

    problems: list[str] = []
    for ds, sp in zip(staged.datasets, setup.plan.sources):
        if ds is None:
            problems.append(f"{sp.name}: not built on this rank")
            continue
        if len(ds) != sp.samples_per_epoch:
            problems.append(f"{sp.name}: {len(ds)} samples built, planned one epoch of {sp.samples_per_epoch}")
        doc_index, indices = getattr(ds, "document_index", None), getattr(ds, "indices", None)
        if doc_index is not None and indices is not None and len(indices) and len(doc_index) != len(indices):
            problems.append(f"{sp.name}: {len(doc_index) // len(indices)} epochs built, planned 1")
    first = 0
    for stage in setup.stages_plan.stages:
        got = np.bincount(
            staged.dataset_index[first : first + stage.samples].astype(np.int64), minlength=len(setup.names)
        ).tolist()
        want = [stage.draw_of(n).draws if stage.draw_of(n) else 0 for n in setup.names]  # type: ignore[union-attr]
        if got != want:
            problems.append(f"stage {stage.name!r}: draws {got} per source, planned {want}")
        first += stage.samples
    if problems:
        raise BuildMismatchError(
            "megatron-core built something else than the stage plan: "
            + "; ".join(problems)
            + " (build with build_stages(setup), from setup.source_configs)"
        )


def stage_lines(setup: StagesSetup) -> list[str]:
    """Per stage: its iterations and per source the draws, where they start and the cumulative passes."""
    sp = setup.stages_plan
    lines = [
        f"neox-epoch: megatron-core {setup.version}: {len(sp.stages)} stages, train_iters {sp.train_iters} x "
        f"global batch {sp.global_batch_size} = {sp.train_samples} train samples; stage boundaries at iterations "
        f"{', '.join(map(str, sp.boundaries)) or 'none'}"
    ]
    done: dict[str, int] = dict.fromkeys(setup.names, 0)
    for st in sp.stages:
        parts = []
        for d in st.draws:
            done[d.source] += d.draws
            parts.append(
                f"{d.source} {d.draws} from pass {d.start_pass + 1} sample {d.start_offset} "
                f"(cumulative {done[d.source] / d.samples_per_epoch:.4g} passes)"
            )
        lines.append(
            f"neox-epoch: stage {st.name}: iterations {st.first_iteration}..{st.end_iteration - 1}: " + "; ".join(parts)
        )
        lines.extend(f"neox-epoch: stage {st.name}: note: {n}" for n in st.notes)
    return lines
