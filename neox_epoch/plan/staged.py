"""A staged GPT-NeoX run: the stage plan (:mod:`neox_epoch.plan.stages`) on NeoX's own sources and batch.

Each train source's samples per pass are ``(T - 1) // seq_length`` (the hooks build every pass of a staged
source on its own: :mod:`neox_epoch.semantics.stage_order`). :func:`plan_staged` plans the stages, then the
one run NeoX is asked for: ``train_iters`` the stages' total and, per source, exactly its total draws (the sum
of each stage's draws). NeoX's train blend is built with those totals as its weights and requests, but never
drawn from: the hooks replace its order by the stages' (each stage with its own blend), so no one blend over
the whole run has to draw the totals exactly. :func:`stages_json` is the ``stages`` key of
``neox-epoch plan --json`` and of the hooks' JSONL plan record; :func:`render_stages` its text.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from neox_epoch.errors import ConfigError, PlanError
from neox_epoch.plan.builds import framework_of
from neox_epoch.plan.exact import _exact_run
from neox_epoch.plan.inputs import PlanInput
from neox_epoch.plan.model import Plan
from neox_epoch.plan.planner import make_plan
from neox_epoch.plan.stages import StagesConfig, StagesPlan, plan_stages
from neox_epoch.semantics.stage_order import samples_per_pass


@dataclass(frozen=True)
class StagedRun:
    """The stage plan and the plan of the one NeoX run that trains it."""

    stages: StagesPlan
    plan: Plan
    labels: tuple[str, ...]
    """Train sources in NeoX's dataset order (their labels, as the stages name them)."""
    config: StagesConfig

    @property
    def totals(self) -> tuple[int, ...]:
        drawn = self.stages.total_draws()
        return tuple(drawn[s] for s in self.labels)

    def passes(self) -> dict[str, float]:
        """Cumulative passes per source over the whole run (the run's targets)."""
        return {s: self.stages.cumulative_passes()[s] for s in self.labels}

    def passes_built(self) -> dict[str, int]:
        """Passes the hooks build per source: the passes its total target needs (:meth:`StagesPlan.passes_built`)."""
        built = self.stages.passes_built()
        return {s: built[s] for s in self.labels}


def samples_per_source(inp: PlanInput) -> dict[str, int]:
    """Each train source's samples per pass, by label (one probe plan reads the sources' train tokens)."""
    probe = make_plan(replace(inp, train_iters=1, train_samples=None, warmup_iters=None))
    tokens = {s.prefix: s.tokens for s in probe.sources if s.split == "train"}
    return {spec.label: samples_per_pass(tokens[spec.prefix], inp.seq_length) for spec in inp.train_sources}


def plan_staged(inp: PlanInput, config: StagesConfig) -> StagedRun:
    """Plan ``config`` on ``inp``'s train sources (train_data_paths): the stages, then NeoX's one run."""
    if not inp.per_split_paths:
        raise ConfigError(
            "neox_epoch.stages: needs train_data_paths (one prefix per source, named by the stages); "
            "data_path with split has one train source: list the sources in train_data_paths"
        )
    labels = tuple(spec.label for spec in inp.train_sources)
    if len(set(labels)) != len(labels):
        raise ConfigError(
            f"neox_epoch.stages: train_data_paths has two sources named alike ({list(labels)}); the "
            "stages name sources by the prefix's last path component: rename one of the files"
        )
    spe = samples_per_source(inp)
    stages = plan_stages(config, spe, inp.global_batch_size)
    drawn = stages.total_draws()
    idle = [s for s in labels if drawn[s] == 0]
    if idle:
        raise ConfigError(
            f"neox_epoch.stages: train source(s) {idle} are in train_data_paths but no stage draws them; "
            "give them a target in a stage, or remove them from train_data_paths"
        )
    plan, settings = _stage_run(inp, stages.train_iters, labels, [drawn[s] for s in labels])
    arithmetic = [
        f"stages: {len(stages.stages)}; train_iters = sum of the stages' whole global batches = "
        f"{' + '.join(str(r.iterations) for r in stages.stages)} = {stages.train_iters}"
    ]
    plan = replace(
        plan,
        settings={"train_iters": stages.train_iters, "train_samples": stages.train_samples, **settings},
        arithmetic=tuple(arithmetic) + plan.arithmetic,
    )
    plan = _as_staged_builds(plan, stages, labels, inp.seq_length)
    if plan.train_iters != stages.train_iters:  # pragma: no cover - _exact_run keeps the iterations asked
        raise PlanError(f"stages: the run plan has {plan.train_iters} iterations, the stages {stages.train_iters}")
    return StagedRun(stages, plan, labels, config)


def _stage_run(inp: PlanInput, iters: int, labels: tuple[str, ...], totals: list[int]) -> tuple[Plan, dict[str, Any]]:
    """NeoX's one run for the stages: ``iters`` iterations, its train blend weighted and requested by each source's
    total draws (exact mode's settings), no weight search: the stages' draws replace the blend's order."""
    if len(totals) == 1:  # one source: its exact run (no blend to weigh)
        return _exact_run(replace(inp, train_iters=None, train_samples=None), iters, list(labels), totals, 1, {})
    fw = framework_of(inp)
    settings: dict[str, Any] = {}
    neox = replace(inp.neox, exact_requests=tuple(totals) if fw.exact_requests else None)
    if inp.neox.weight_by_num_documents:  # document-count weights would replace the totals
        neox = replace(neox, weight_by_num_documents=False)
        settings["weight_by_num_documents"] = False
    weights = [float(t) for t in totals]
    run = replace(inp, train_iters=iters, train_samples=None, blend_weights_override=tuple(weights), neox=neox)
    plan = make_plan(run)
    settings.update({"weights": weights, "targets": dict(zip(labels, totals)), **dict(fw.exact_block)})
    return plan, settings


def _as_staged_builds(plan: Plan, stages: StagesPlan, labels: tuple[str, ...], seq_length: int) -> Plan:
    """The train rows as the hooks build them (whole passes, each on its own: no cross-epoch spillover, so its
    warnings go), with the expected unseen tokens: a full pass leaves its stream's tail (under one sample) unseen,
    a token misses every full pass with probability ``r`` (the tail's share) and a partial pass drawing ``f`` of
    its samples with ``1 - f (1 - r)``."""
    drawn, spe, built = stages.total_draws(), stages.samples_per_epoch, stages.passes_built()
    rows = []
    for s in plan.sources:
        if s.split != "train" or s.name not in drawn:
            rows.append(s)
            continue
        n, t = spe[s.name], drawn[s.name]
        passes = built[s.name]
        r = max(0.0, (s.tokens - n * seq_length) / s.tokens)
        full, frac = divmod(t, n)
        unseen = s.tokens * r**full * (1 - frac / n * (1 - r)) if frac else s.tokens * r**full
        rows.append(
            replace(
                s,
                samples_drawn=t,
                target_samples=t,
                epochs_built=passes,
                samples_built=passes * n,
                length=passes * n,
                separate_final_epoch=True,
                tokens_unseen=round(unseen),
                tokens_unseen_exact=full == 1 and not frac,
                formula=f"staged: {passes} passes of (tokens - 1) // seq_length = {n} samples, each "
                "pass built on its own (neox_epoch.semantics.stage_order)",
            )
        )
    warnings = tuple(w for w in plan.warnings if not (w.split == "train" and w.code == "spillover"))
    return replace(plan, sources=tuple(rows), warnings=warnings)


def stages_json(run: StagedRun) -> dict[str, Any]:
    """Stable keys (docs/plan.md "Stages"): the stages, boundaries, per-source draws and cumulative passes."""
    sp = run.stages
    out_stages = []
    cumulative = dict.fromkeys(run.labels, 0)
    for k, st in enumerate(sp.stages):
        draws = {}
        for d in st.draws:
            cumulative[d.source] += d.draws
            draws[d.source] = {
                "draws": d.draws,
                "wanted": round(d.wanted, 6),
                "start": d.start,
                "start_pass": d.start_pass + 1,
                "start_offset": d.start_offset,
                "passes": round(d.draws / d.samples_per_epoch, 6),
            }
        out_stages.append(
            {
                "index": k + 1,
                "name": st.name,
                "first_iteration": st.first_iteration,
                "end_iteration": st.end_iteration,
                "iterations": st.iterations,
                "samples": st.samples,
                "draws": draws,
                "cumulative_passes": {s: round(cumulative[s] / sp.samples_per_epoch[s], 6) for s in run.labels},
                "notes": list(st.notes),
            }
        )
    return {
        "train_iters": sp.train_iters,
        "global_batch_size": sp.global_batch_size,
        "boundaries": list(sp.boundaries),
        "samples_per_pass": {s: sp.samples_per_epoch[s] for s in run.labels},
        "total_draws": dict(zip(run.labels, run.totals)),
        "cumulative_passes": {s: round(v, 6) for s, v in run.passes().items()},
        "passes_built": run.passes_built(),
        "max_passes": run.config.to_mapping()["max_passes"],
        "stages": out_stages,
    }


def render_stages(run: StagedRun) -> str:
    """One table per stage, then the cumulative passes per source."""
    data = stages_json(run)
    out = [
        f"stages: {len(data['stages'])}, train_iters {data['train_iters']:,d} (global batch "
        f"{data['global_batch_size']}); boundaries at iterations {data['boundaries'] or 'none'}"
    ]
    for st in data["stages"]:
        out += [
            "",
            f"stage {st['index']} {st['name']!r}: iterations {st['first_iteration']:,d}..{st['end_iteration']:,d} "
            f"({st['iterations']:,d} x {data['global_batch_size']} = {st['samples']:,d} samples)",
            f"  {'source':<20} {'draws':>8} {'wanted':>10} {'from pass':>9} {'offset':>8} {'passes':>9} "
            f"{'cumulative':>10}",
        ]
        for source, d in st["draws"].items():
            out.append(
                f"  {source:<20} {d['draws']:>8,d} {d['wanted']:>10g} {d['start_pass']:>9} {d['start_offset']:>8,d} "
                f"{d['passes']:>9.4f} {st['cumulative_passes'][source]:>10.4f}"
            )
        out += [f"  note: {n}" for n in st["notes"]]
    out += ["", "cumulative passes per source (each source continues where the earlier stages left it):"]
    for s in run.labels:
        out.append(
            f"  {s:<20} {data['total_draws'][s]:>8,d} samples of {data['samples_per_pass'][s]:,d} per pass = "
            f"{data['cumulative_passes'][s]:.4f} passes ({data['passes_built'][s]} built)"
        )
    return "\n".join(out)
