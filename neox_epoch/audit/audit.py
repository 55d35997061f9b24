"""Run an audit: discovered cache groups -> per-index and per-blend reports, with consumption routed.

Consumption applies to the *train* split: a standalone train index draws the prefix ``0 .. N-1`` of its
indices (wrapping modulo ``len`` like NeoX when ``N`` is larger); a source of a megatron-core blend
draws what the blend's ``dataset_index[:N]`` says; a source of a NeoX blend (``train_0``, ``train_1``,
...) draws what the greedy replayed with the config's ``train_data_weights`` says.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from neox_epoch.audit.exposure import ExposureReport
from neox_epoch.audit.findings import Finding, finding
from neox_epoch.audit.index_report import IndexReport
from neox_epoch.audit.validate import ConsumptionFor, IterationOf, ManifestSink, audit_index
from neox_epoch.errors import FileProblem, IndexFileError
from neox_epoch.formats import cache_names as names
from neox_epoch.formats import idx as idxmod
from neox_epoch.formats.npy import Progress, read_header
from neox_epoch.semantics import neox as neox_sem
from neox_epoch.semantics.consumption import Consumption

if TYPE_CHECKING:  # (blends imported where there is one: a NeoX index's audit starts 2 ms sooner)
    from neox_epoch.audit.blends import BlendReport


@dataclass(frozen=True)
class AuditOptions:
    """What the user told the audit besides the paths."""

    consumed: int | None = None
    """Samples of the train split consumed (``train_iters * global_batch_size``); None: no exposure."""
    global_batch_size: int | None = None  # Samples per iteration, to turn sample positions into iterations.
    data_prefixes: tuple[str, ...] = ()  # `--data-prefix`: one prefix for every index, or several matched by base name.
    add_extra_token: int | None = None  # megatron-core add_extra_token_to_sequence when the cache does not tell.
    neox_train_paths: tuple[str, ...] = ()
    """NeoX ``train_data_paths`` (from ``--config``): source ``i`` is the index named ``train_i``."""
    neox_train_weights: tuple[float, ...] | None = None  # NeoX `train_data_weights` (from `--config`).
    neox_weight_by_num_documents: bool = False
    """NeoX ``weight_by_num_documents``: weights from the sources' document counts instead."""
    neox_weighted_sampler_alpha: float = 1.0  # NeoX `weighted_sampler_alpha` for `weight_by_num_documents`.


@dataclass
class AuditResult:
    """Everything one audit found."""

    indexes: list[IndexReport] = field(default_factory=list)  # One per GPT index (doc/sample/shuffle triple).
    blends: list[BlendReport] = field(default_factory=list)  # One per blend.
    consumed_samples: int | None = None  # The train consumption the exposure is for.
    global_batch_size: int | None = None  # Samples per iteration.
    notes: list[str] = field(default_factory=list)  # Remarks about the whole audit.

    @property
    def findings(self) -> list[Finding]:
        reports: list[IndexReport | BlendReport] = [*self.indexes, *self.blends]
        return [f for report in reports for f in report.findings]

    def to_json(self) -> dict[str, Any]:
        return {
            "consumed_samples": self.consumed_samples,
            "global_batch_size": self.global_batch_size,
            "indexes": [r.to_json() for r in self.indexes],
            "blends": [b.to_json() for b in self.blends],
            "findings": [f.to_json() for f in self.findings],
            "notes": list(self.notes),
        }


def _is_train(split: str) -> bool:
    return split == "train" or split.startswith("train_")


def _neox_source_number(name: str) -> int | None:
    head, _, tail = name.partition("_")
    return int(tail) if head == "train" and tail.isdigit() else None


def make_prefix_resolver(prefixes: tuple[str, ...]) -> Callable[[str | None], str | None]:
    """One --data-prefix replaces every index's prefix; several are matched to it by base name."""

    def resolve(default: str | None) -> str | None:
        if len(prefixes) == 1:
            return prefixes[0]
        base = os.path.basename((default or "").rstrip("/"))
        return next((p for p in prefixes if default and os.path.basename(p.rstrip("/")) == base), default)

    return resolve


def _group_for_stem(stem: str) -> names.CacheGroup | None:
    """The cache files on disk with this stem (a blend's source that was not among the paths given)."""
    directory, base = os.path.split(stem)
    try:
        entries = sorted(os.listdir(directory or "."))
    except OSError:
        return None
    files = [
        f
        for f in (names.parse_name(os.path.join(directory, n)) for n in entries if n.startswith(base + "-"))
        if f is not None and f.stem == stem
    ]
    return next(iter(names.group_files(files)), None)  # (one stem: at most one group)


Routes = dict[str, ConsumptionFor]


def run_audit(
    groups: list[names.CacheGroup],
    options: AuditOptions,
    progress: Progress | None = None,
    manifest: ManifestSink | None = None,
) -> AuditResult:
    """Audit every group; never raises for damaged files (they become findings)."""
    progress = progress or Progress()
    result = AuditResult(consumed_samples=options.consumed, global_batch_size=options.global_batch_size)
    batch = options.global_batch_size

    def iteration_of(position: int) -> int | None:
        return position // batch + 1 if batch else None

    other = [g for g in groups if not g.is_blend and g.kind == names.MCORE and g.dataset_class != "GPTDataset"]
    result.notes += [
        f"{group.stem}: {group.dataset_class} caches are not audited (GPTDataset and BlendedDataset only)"
        for group in other
    ]
    gpt = [g for g in groups if not g.is_blend and g not in other]
    routes: Routes = {}
    no_exposure: dict[str, str] = {}
    mcore_blends = _route_mcore_blends(groups, gpt, options, routes, no_exposure, progress, manifest is not None)
    neox_blend = _route_neox_blend(gpt, options, result, routes, no_exposure)
    resolve, consumed = make_prefix_resolver(options.data_prefixes), options.consumed

    def standalone(split: str, length: int) -> Consumption | None:
        return Consumption.prefix(length, consumed) if consumed is not None and _is_train(split) else None

    reports: dict[str, IndexReport] = {}
    for group in gpt:
        progress.describe(os.path.basename(group.stem))
        reports[group.stem] = report = audit_index(
            group,
            resolve_prefix=resolve,
            add_extra_token=options.add_extra_token,
            consumption_for=None if group.stem in no_exposure else routes.get(group.stem, standalone),
            manifest=manifest,
            progress=progress,
            iteration_of=iteration_of,
        )
        if group.stem in no_exposure:
            report.notes.append("exposure not computed: " + no_exposure[group.stem])
    result.indexes.extend(reports.values())
    result.blends.extend(mcore_blends + ([neox_blend] if neox_blend is not None else []))
    for blend in result.blends:
        _finish_blend(blend, reports, iteration_of)
    return result


def _drawn(prefixes: list[tuple[int, int]], positions: np.ndarray | None = None) -> Callable[[str, int], Consumption]:
    """A blend's source: the ``(prefix, passes)`` of its indices drawn, at ``positions`` of the blend when known."""
    return lambda split, length: Consumption.from_prefixes(length, prefixes, positions=positions, period=0)


def _route_mcore_blends(
    groups: list[names.CacheGroup],
    gpt: list[names.CacheGroup],
    options: AuditOptions,
    routes: Routes,
    no_exposure: dict[str, str],
    progress: Progress,
    positions: bool,
) -> list[BlendReport]:
    """megatron-core blends: check the pair, route the consumed draws to the sources (found beside the blend)."""
    found: list[BlendReport] = []
    stems = {g.stem for g in gpt}
    pairs = [g for g in groups if g.kind == names.MCORE and g.is_blend]
    if not pairs:
        return found
    from neox_epoch.audit import blends

    for group in pairs:
        progress.describe(os.path.basename(group.stem))
        blend = blends.read_mcore_blend(group)
        consumed = options.consumed if options.consumed is not None and _is_train(group.split) else None
        draws, draws_consumed, where = blends.scan_blend(blend, group, consumed, progress, want_positions=positions)
        if consumed is not None and blend.size is not None:
            blend.consumed_samples = min(consumed, blend.size)
            if consumed > blend.size:
                blend.notes.append(
                    f"{consumed} samples consumed from a blend of {blend.size}: megatron's sampler stops at len"
                )
        for number, (source, stem) in enumerate(zip(blend.sources, blend.children)):
            source.draws = draws[number] if blend.dataset_index_ok else None
            if stem is None or consumed is None:
                continue
            if not blend.dataset_index_ok:
                no_exposure[stem] = "its blend's files are inconsistent"
                continue
            source.draws_consumed = draws_consumed[number]
            routes[stem] = _drawn([(draws_consumed[number], 1)], where[number] if where is not None else None)
        found.append(blend)
        for stem in blend.children:
            extra = _group_for_stem(stem) if stem is not None and stem not in stems else None
            if extra is not None:
                gpt.append(extra)
                stems.add(extra.stem)
    return found


def _route_neox_blend(
    gpt: list[names.CacheGroup], options: AuditOptions, result: AuditResult, routes: Routes, no_exposure: dict[str, str]
) -> BlendReport | None:
    """NeoX blends (train_0, train_1, ...): the greedy replayed from the config's weights routes the draws."""
    train = [g for g in gpt if g.kind == names.NEOX and g.neox and _neox_source_number(g.split) is not None]
    blend = _neox_blend(train, options, result, routes)
    members = blend.children if blend is not None else []
    used = {_neox_key(group) for group in train if group.stem in members}
    # a train_k index is a blend source unless it is train_0 with no train_k (k >= 1) of the same
    # seq_length and seed beside it (NeoX wraps even one train_data_paths entry in a blend of one)
    multi = {_neox_key(group) for group in train if (_neox_source_number(group.split) or 0) > 0}
    for group in train if options.consumed is not None else []:
        if group.stem in members:
            continue
        if _neox_key(group) in used:
            no_exposure[group.stem] = "another build of a source of the replayed NeoX blend (not the one it uses)"
        elif _neox_key(group) in multi:
            no_exposure[group.stem] = (
                "a source of a NeoX blend: its draws depend on the blend weights; "
                "pass --config with train_data_paths and train_data_weights"
            )
    return blend


def _neox_key(group: names.CacheGroup) -> tuple[int, int] | None:
    """The seq_length and seed of a NeoX index: the builds of one blend share them."""
    return (group.neox.seq_length, group.neox.seed) if group.neox else None


def _finish_blend(blend: BlendReport, reports: dict[str, IndexReport], iteration_of: IterationOf) -> None:
    """The sources' numbers, checks and exposures from their indexes' reports (the blend's exposure their sum),
    and where each source's draws exceed one epoch."""
    parts: list[ExposureReport] = []
    for number, (source, stem) in enumerate(zip(blend.sources, blend.children)):
        child = reports.get(stem) if stem else None
        if child is None:
            blend.findings.append(
                finding(
                    stem or blend.path,
                    f"source {number}",
                    "its GPTDataset cache beside the blend",
                    "no such files",
                    "per-source numbers need the source's cache",
                )
            )
            continue
        source.length, source.samples_per_epoch, source.epochs = child.length, child.samples_per_epoch, child.epochs
        if source.draws_consumed is not None and child.samples_per_epoch:
            source.passes = round(source.draws_consumed / child.samples_per_epoch, 6)
        if source.draws is not None and child.length is not None and source.draws > child.length:
            blend.findings.append(
                finding(
                    blend.files.get(names.DATASET, blend.path),
                    f"source {number} draws",
                    f"<= {child.length} (len of its GPTDataset)",
                    source.draws,
                    "megatron-core raises on such a blend: the files do not belong together",
                )
            )
        if child.exposure is not None:
            source.exposure = child.exposure
            parts.append(child.exposure)
    if parts and len(parts) == len(blend.sources):
        blend.exposure = ExposureReport.combine(parts)
        blend.exposure.consumed_samples = blend.consumed_samples or blend.exposure.consumed_samples
    for number, position in _second_passes(blend).items():
        source = blend.sources[number]
        source.second_pass_sample = position
        source.second_pass_iteration = iteration_of(position) if position is not None else None
        if source.exposure is not None:
            source.exposure.second_pass_sample = position
            source.exposure.second_pass_iteration = source.second_pass_iteration


def _second_passes(blend: BlendReport) -> Mapping[int, int | None]:
    """Blend position of each source's first draw past one epoch: replayed (NeoX) or read from dataset_index."""
    from neox_epoch.audit import blends

    per_epoch = [source.samples_per_epoch for source in blend.sources]
    if blend.consumed_samples is None or not blend.dataset_index_ok:
        return {}
    if blend.kind == names.NEOX:
        lengths = [source.length or 0 for source in blend.sources]
        if blend.weights is None or not all(lengths):
            return {}
        return dict(enumerate(neox_sem.blend_positions(blend.weights, lengths, per_epoch, blend.consumed_samples)))
    marks = {
        number: epoch
        for number, (source, epoch) in enumerate(zip(blend.sources, per_epoch))
        if epoch is not None and (source.draws_consumed or 0) > epoch
    }
    try:
        return blends.second_pass_positions(blend.files[names.DATASET], marks, blend.consumed_samples) if marks else {}
    except FileProblem:
        return {}


def _neox_candidates(
    train: list[names.CacheGroup], options: AuditOptions, result: AuditResult
) -> tuple[list[list[names.CacheGroup]], list[float]] | None:
    """Per entry of the config's train_data_paths, its train_i indexes, and the blend weights."""
    paths = options.neox_train_paths
    weights = list(options.neox_train_weights) if options.neox_train_weights else [1.0] * len(paths)
    if len(weights) != len(paths):
        result.notes.append(
            f"--config: {len(weights)} train_data_weights for {len(paths)} train_data_paths; blend not replayed"
        )
        return None
    candidates: list[list[names.CacheGroup]] = []
    for number, path in enumerate(paths):
        base = os.path.basename(path.rstrip("/"))
        candidates.append(
            [
                group
                for group in train
                if group.neox
                and _neox_source_number(group.split) == number
                and os.path.basename(group.neox.prefix) == base
            ]
        )
        if not candidates[-1]:
            result.notes.append(
                f"NeoX blend source {number} ({path}): no train_{number} index found for it; blend not replayed"
            )
            return None
    if not options.neox_weight_by_num_documents:
        return candidates, weights
    try:
        documents = [
            idxmod.read_header(group[0].neox.prefix if group[0].neox else "", check_bin=False).sequence_count
            for group in candidates
        ]
    except IndexFileError as err:
        result.notes.append(f"weight_by_num_documents: {err}; NeoX blend not replayed")
        return None
    return candidates, neox_sem.weights_by_num_docs(documents, options.neox_weighted_sampler_alpha)


def _neox_blend(
    train: list[names.CacheGroup], options: AuditOptions, result: AuditResult, routes: Routes
) -> BlendReport | None:
    """Match NeoX train_i indexes to the config's train_data_paths and replay the blend's draws (routed)."""
    consumed = options.consumed
    matched = _neox_candidates(train, options, result) if options.neox_train_paths and consumed is not None else None
    if matched is None or consumed is None:
        return None
    from neox_epoch.audit import blends

    candidates, weights = matched
    norm, requests = neox_sem.normalized_weights_and_num_samples(weights, consumed)
    chosen: list[names.CacheGroup] = []
    for number, groups in enumerate(candidates):
        chosen.append(
            next((group for group in groups if group.neox and group.neox.num_samples == requests[number]), groups[0])
        )
        if chosen[-1].neox and chosen[-1].neox.num_samples != requests[number]:
            result.notes.append(
                f"NeoX blend source {number}: no index built for {requests[number]} samples (ceil("
                f"{consumed} x {norm[number]:.6g} x 1.005)); using {os.path.basename(groups[0].stem)}"
            )
    lengths: list[int] = []
    for group in chosen:
        try:
            lengths.append(max(0, read_header(group.files[names.SAMPLE]).rows - 2))
        except (FileProblem, KeyError):
            result.notes.append(f"{group.stem}: sample index unreadable; NeoX blend not replayed")
            return None
    draws, prefixes = blends.neox_draws(weights, lengths, consumed)
    result.notes.append(
        f"NeoX blend replayed with weights {[round(weight, 6) for weight in norm]} over {len(chosen)} sources"
    )
    blend = blends.BlendReport(
        kind=names.NEOX,
        path=chosen[0].stem,
        split="train",
        size=int(sum(lengths)),
        weights=[float(weight) for weight in np.asarray(norm) / np.sum(norm)],
        consumed_samples=consumed,
        children=[group.stem for group in chosen],
    )
    for group, drawn, length, weight in zip(chosen, draws, lengths, blend.weights or []):
        blend.sources.append(
            blends.SourceReport(
                index=group.stem,
                weight=weight,
                draws=None,
                draws_consumed=drawn,
                dataset_path=group.neox.prefix if group.neox else None,
                length=length,
            )
        )
        if drawn > length:
            blend.notes.append(
                f"{os.path.basename(group.stem)}: {drawn} draws from a dataset of len {length}: NeoX wraps it silently"
            )
    if consumed > int(sum(lengths)):
        blend.notes.append(f"{consumed} samples from a blend of {blend.size}: NeoX wraps the blend silently")
    if math.isnan(sum(blend.weights or [0.0])):
        return None
    routes.update({group.stem: _drawn(drawn) for group, drawn in zip(chosen, prefixes)})
    return blend
