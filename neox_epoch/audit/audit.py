"""Run an audit: discovered cache groups -> per-index and per-blend reports, with consumption routed.

Consumption applies to the *train* split: a standalone train index draws the prefix ``0 .. N-1`` of its
indices (wrapping modulo ``len`` like NeoX when ``N`` is larger); a source of a megatron-core blend
draws what the blend's ``dataset_index[:N]`` says; a source of a NeoX blend (``train_0``, ``train_1``,
...) draws what the greedy replayed with the config's ``train_data_weights`` says.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from neox_epoch import idx as idxmod
from neox_epoch.audit import names
from neox_epoch.audit.blends import (
    BlendReport,
    SourceReport,
    neox_draws,
    neox_second_pass,
    read_mcore_blend,
    scan_blend,
    second_pass_positions,
)
from neox_epoch.audit.consumption import Consumption
from neox_epoch.audit.exposure import ExposureReport, ManifestChunk
from neox_epoch.audit.findings import FileProblem, Finding
from neox_epoch.audit.npy import read_header
from neox_epoch.audit.validate import IndexReport, Progress, audit_index
from neox_epoch.errors import IndexFileError
from neox_epoch.semantics import neox as neox_sem


@dataclass(frozen=True)
class AuditOptions:
    """What the user told the audit besides the paths."""

    consumed: int | None = None
    """Samples of the train split consumed (``train_iters * global_batch_size``); None: no exposure."""
    global_batch_size: int | None = None
    """Samples per iteration, to turn sample positions into iterations."""
    data_prefixes: tuple[str, ...] = ()
    """``--data-prefix``: one prefix for every index, or several matched by base name."""
    add_extra_token: int | None = None
    """megatron-core add_extra_token_to_sequence when the cache does not tell."""
    neox_train_paths: tuple[str, ...] = ()
    """NeoX ``train_data_paths`` (from ``--config``): source ``i`` is the index named ``train_i``."""
    neox_train_weights: tuple[float, ...] | None = None
    """NeoX ``train_data_weights`` (from ``--config``)."""
    neox_weight_by_num_documents: bool = False
    """NeoX ``weight_by_num_documents``: weights from the sources' document counts instead."""
    neox_weighted_sampler_alpha: float = 1.0
    """NeoX ``weighted_sampler_alpha`` for ``weight_by_num_documents``."""


@dataclass
class AuditResult:
    """Everything one audit found."""

    indexes: list[IndexReport] = field(default_factory=list)
    """One per GPT index (doc/sample/shuffle triple)."""
    blends: list[BlendReport] = field(default_factory=list)
    """One per blend."""
    consumed_samples: int | None = None
    """The train consumption the exposure is for."""
    global_batch_size: int | None = None
    """Samples per iteration."""
    notes: list[str] = field(default_factory=list)
    """Remarks about the whole audit."""

    @property
    def findings(self) -> list[Finding]:
        out: list[Finding] = []
        for r in self.indexes:
            out.extend(r.findings)
        for b in self.blends:
            out.extend(b.findings)
        return out

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
        if not prefixes:
            return default
        if len(prefixes) == 1:
            return prefixes[0]
        if default:
            base = os.path.basename(default.rstrip("/"))
            for p in prefixes:
                if os.path.basename(p.rstrip("/")) == base:
                    return p
        return default

    return resolve


def _group_for_stem(stem: str) -> names.CacheGroup | None:
    """The cache files on disk with this stem (a blend's source that was not among the paths given)."""
    directory, base = os.path.split(stem)
    try:
        entries = sorted(os.listdir(directory or "."))
    except OSError:
        return None
    files = [f for f in (names.parse_name(os.path.join(directory, n)) for n in entries if n.startswith(base + "-"))
             if f is not None and f.stem == stem]
    groups = names.group_files(files)
    return groups[0] if groups else None


def run_audit(
    groups: list[names.CacheGroup],
    options: AuditOptions,
    progress: Progress | None = None,
    manifest: Callable[[IndexReport, ManifestChunk], None] | None = None,
) -> AuditResult:
    """Audit every group; never raises for damaged files (they become findings)."""
    progress = progress or Progress()
    res = AuditResult(consumed_samples=options.consumed, global_batch_size=options.global_batch_size)
    gbs = options.global_batch_size

    def iteration_of(pos: int) -> int | None:
        return pos // gbs + 1 if gbs else None

    resolve = make_prefix_resolver(options.data_prefixes)
    gpt = [g for g in groups if not g.is_blend]
    if any(g.kind == names.MCORE and g.dataset_class != "GPTDataset" for g in gpt):
        for g in gpt:
            if g.kind == names.MCORE and g.dataset_class != "GPTDataset":
                res.notes.append(f"{g.stem}: {g.dataset_class} caches are not audited (GPTDataset and BlendedDataset only)")
        gpt = [g for g in gpt if not (g.kind == names.MCORE and g.dataset_class != "GPTDataset")]
    stems = {g.stem for g in gpt}
    consumption_of: dict[str, Callable[[IndexReport], Consumption | None]] = {}
    no_exposure: dict[str, str] = {}

    # megatron-core blends: validate the pair, route the consumed draws to the sources
    mblends: list[tuple[names.CacheGroup, BlendReport, list[int], list[int]]] = []
    for g in groups:
        if not (g.kind == names.MCORE and g.is_blend):
            continue
        progress.describe(os.path.basename(g.stem))
        rep, _ = read_mcore_blend(g)
        consumed = options.consumed if (options.consumed is not None and _is_train(g.split)) else None
        draws, draws_n, pos = scan_blend(rep, g, consumed, progress, want_positions=manifest is not None)
        if consumed is not None and rep.size is not None:
            rep.consumed_samples = min(consumed, rep.size)
            if consumed > rep.size:
                rep.notes.append(f"{consumed} samples consumed from a blend of {rep.size}: megatron's sampler stops at len")
        for i, (src, stem) in enumerate(zip(rep.sources, rep.children)):
            src.draws = draws[i] if rep.dataset_index_ok else None
            if stem is None:
                continue
            if consumed is None or not rep.dataset_index_ok:
                if consumed is not None:
                    no_exposure[stem] = "its blend's files are inconsistent"
                continue
            d_n = draws_n[i]
            src.draws_consumed = d_n
            p_i = pos[i] if pos is not None else None

            def cons(r: IndexReport, d_n: int = d_n, p_i: np.ndarray | None = p_i) -> Consumption | None:
                return Consumption.from_prefixes(r.length or 0, [(d_n, 1)], positions=p_i, period=0)

            consumption_of[stem] = cons
        mblends.append((g, rep, draws, draws_n))
        for stem in rep.children:
            if stem is not None and stem not in stems:
                extra = _group_for_stem(stem)
                if extra is not None:
                    gpt.append(extra)
                    stems.add(stem)

    # NeoX blends (train_0, train_1, ...): replay the greedy from the config's weights
    neox_train = [g for g in gpt if g.kind == names.NEOX and g.neox and _neox_source_number(g.split) is not None]
    nblend = _neox_blend(neox_train, options, res)
    members: list[str] = []
    used: set[tuple[int, int]] = set()
    if nblend is not None:
        nrep, members, ncons = nblend
        for stem, cons_i in zip(members, ncons):
            consumption_of[stem] = _fixed(cons_i)
        used = {(g.neox.seq_length, g.neox.seed) for g in neox_train if g.stem in members and g.neox}
    # a train_k index is a blend source unless it is train_0 with no train_k (k >= 1) of the same
    # seq_length and seed beside it (NeoX wraps even one train_data_paths entry in a blend of one)
    multi = {(g.neox.seq_length, g.neox.seed) for g in neox_train if g.neox and (_neox_source_number(g.split) or 0) > 0}
    if options.consumed is not None:
        for g in neox_train:
            if g.stem in members or g.neox is None:
                continue
            key = (g.neox.seq_length, g.neox.seed)
            if key in used:
                no_exposure[g.stem] = "another build of a source of the replayed NeoX blend (not the one it uses)"
            elif key in multi:
                no_exposure[g.stem] = ("a source of a NeoX blend: its draws depend on the blend weights; "
                                       "pass --config with train_data_paths and train_data_weights")

    reports: dict[str, IndexReport] = {}
    for g in gpt:
        def standalone(r: IndexReport) -> Consumption | None:
            if options.consumed is None or not _is_train(r.split) or r.length is None:
                return None
            return Consumption.prefix(r.length, options.consumed)

        cf: Callable[[IndexReport], Consumption | None] | None = consumption_of.get(g.stem, standalone)
        if g.stem in no_exposure:
            cf = None
        progress.describe(os.path.basename(g.stem))
        r = audit_index(g, resolve_prefix=resolve, add_extra_token=options.add_extra_token, consumption_for=cf,
                        manifest=manifest, progress=progress, iteration_of=iteration_of)
        if g.stem in no_exposure:
            r.notes.append("exposure not computed: " + no_exposure[g.stem])
        reports[g.stem] = r
        res.indexes.append(r)

    for g, rep, _draws, _draws_n in mblends:
        _finish_blend(rep, reports, iteration_of)
        if rep.consumed_samples is not None and rep.dataset_index_ok:
            marks = {i: s.samples_per_epoch for i, s in enumerate(rep.sources)
                     if s.samples_per_epoch is not None and (s.draws_consumed or 0) > s.samples_per_epoch}
            try:
                found = second_pass_positions(g, marks, rep.consumed_samples) if marks else {}
            except FileProblem:
                found = {}
            for i, p in found.items():
                rep.sources[i].second_pass_sample = p
                rep.sources[i].second_pass_iteration = iteration_of(p)
                e = rep.sources[i].exposure
                if e is not None:
                    e.second_pass_sample, e.second_pass_iteration = p, iteration_of(p)
        for i, (src, stem) in enumerate(zip(rep.sources, rep.children)):
            child = reports.get(stem) if stem else None
            if child is None:
                rep.findings.append(Finding(path=stem or rep.path, what=f"source {i}",
                                            expected="its GPTDataset cache beside the blend",
                                            found="no such files", hint="per-source numbers need the source's cache"))
                continue
            if src.draws is not None and child.length is not None and src.draws > child.length:
                rep.findings.append(Finding(path=rep.files.get(names.DATASET, rep.path), what=f"source {i} draws",
                                            expected=f"<= {child.length} (len of its GPTDataset)", found=str(src.draws),
                                            hint="megatron-core raises on such a blend: the files do not belong together"))
        res.blends.append(rep)
    if nblend is not None:
        nrep = nblend[0]
        _finish_blend(nrep, reports, iteration_of)
        lengths = [s.length or 0 for s in nrep.sources]
        per_epoch = [s.samples_per_epoch for s in nrep.sources]
        if options.consumed is not None and nrep.weights is not None and all(lengths):
            sp = neox_second_pass(list(nrep.weights), lengths, per_epoch, options.consumed)
            for s, p in zip(nrep.sources, sp):
                s.second_pass_sample = p
                s.second_pass_iteration = iteration_of(p) if p is not None else None
                if s.exposure is not None:
                    s.exposure.second_pass_sample, s.exposure.second_pass_iteration = p, s.second_pass_iteration
        res.blends.append(nrep)
    return res


def _fixed(c: Consumption) -> Callable[[IndexReport], Consumption | None]:
    def get(_: IndexReport) -> Consumption | None:
        return c

    return get


def _finish_blend(rep: BlendReport, reports: dict[str, IndexReport], iteration_of: Callable[[int], int | None]) -> None:
    parts: list[ExposureReport] = []
    for src, stem in zip(rep.sources, rep.children):
        child = reports.get(stem) if stem else None
        if child is None:
            continue
        src.length, src.samples_per_epoch, src.epochs = child.length, child.samples_per_epoch, child.epochs
        if src.draws_consumed is not None and child.samples_per_epoch:
            src.passes = round(src.draws_consumed / child.samples_per_epoch, 6)
        if child.exposure is not None:
            src.exposure = child.exposure
            parts.append(child.exposure)
    if parts and len(parts) == len(rep.sources):
        rep.exposure = ExposureReport.combine(parts)
        rep.exposure.consumed_samples = rep.consumed_samples or rep.exposure.consumed_samples


def _neox_blend(
    train: list[names.CacheGroup], options: AuditOptions, res: AuditResult
) -> tuple[BlendReport, list[str], list[Consumption]] | None:
    """Match NeoX train_i indexes to the config's train_data_paths and replay the blend's draws."""
    paths = options.neox_train_paths
    if not paths or options.consumed is None:
        return None
    weights = list(options.neox_train_weights) if options.neox_train_weights else [1.0] * len(paths)
    if len(weights) != len(paths):
        res.notes.append(f"--config: {len(weights)} train_data_weights for {len(paths)} train_data_paths; blend not replayed")
        return None
    candidates: list[list[names.CacheGroup]] = []
    for i, p in enumerate(paths):
        base = os.path.basename(p.rstrip("/"))
        cands = [g for g in train if g.neox and _neox_source_number(g.split) == i
                 and os.path.basename(g.neox.prefix) == base]
        if not cands:
            res.notes.append(f"NeoX blend source {i} ({p}): no train_{i} index found for it; blend not replayed")
            return None
        candidates.append(cands)
    if options.neox_weight_by_num_documents:
        try:
            docs = [idxmod.read_header(c[0].neox.prefix if c[0].neox else "", check_bin=False).sequence_count
                    for c in candidates]
        except IndexFileError as err:
            res.notes.append(f"weight_by_num_documents: {err}; NeoX blend not replayed")
            return None
        weights = neox_sem.weights_by_num_docs(docs, options.neox_weighted_sampler_alpha)
    norm, requests = neox_sem.normalized_weights_and_num_samples(weights, options.consumed)
    chosen: list[names.CacheGroup] = []
    for i, cands in enumerate(candidates):
        exact = [g for g in cands if g.neox and g.neox.num_samples == requests[i]]
        if len(exact) >= 1:
            chosen.append(exact[0])
        else:
            chosen.append(cands[0])
            res.notes.append(f"NeoX blend source {i}: no index built for {requests[i]} samples "
                             f"(ceil({options.consumed} x {norm[i]:.6g} x 1.005)); using {os.path.basename(cands[0].stem)}")
    lengths: list[int] = []
    for g in chosen:
        try:
            lengths.append(max(0, read_header(g.files[names.SAMPLE]).rows - 2))
        except (FileProblem, KeyError):
            res.notes.append(f"{g.stem}: sample index unreadable; NeoX blend not replayed")
            return None
    draws, cons = neox_draws(weights, lengths, options.consumed)
    res.notes.append(f"NeoX blend replayed with weights {[round(w, 6) for w in norm]} over {len(chosen)} sources")
    rep = BlendReport(kind=names.NEOX, path=chosen[0].stem, split="train", size=int(sum(lengths)),
                      weights=[float(x) for x in np.asarray(norm) / np.sum(norm)], consumed_samples=options.consumed)
    for g, d, n in zip(chosen, draws, lengths):
        rep.sources.append(SourceReport(index=g.stem, dataset_path=g.neox.prefix if g.neox else None,
                                        weight=None, draws=None, draws_consumed=d, length=n))
        rep.children.append(g.stem)
        if d > n:
            rep.notes.append(f"{os.path.basename(g.stem)}: {d} draws from a dataset of len {n}: NeoX wraps it silently")
    for s, w in zip(rep.sources, rep.weights or []):
        s.weight = w
    if options.consumed > rep.size:
        rep.notes.append(f"{options.consumed} samples from a blend of {rep.size}: NeoX wraps the blend silently")
    if math.isnan(sum(rep.weights or [0.0])):
        return None
    return rep, [g.stem for g in chosen], cons
