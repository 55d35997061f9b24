"""Blends: megatron-core BlendedDataset caches (dataset_index, dataset_sample_index) and NeoX blends.

A megatron-core blend maps its sample ``k`` to ``(dataset_index[k], dataset_sample_index[k])``; the
greedy draws each source's indices in order ``0, 1, 2, ...``, so the first ``N`` blend samples draw a
*prefix* of every source (``draws_i`` = occurrences of ``i`` in ``dataset_index[:N]``). Its description
embeds each source's GPTDataset description, whose md5 names that source's cache files.

GPT-NeoX keeps its blend (BlendableDataset) in memory only; with the train weights (``--config``) the
draws are replayed with the same greedy (:mod:`neox_epoch.semantics.blend`), wrapping like NeoX (index % len).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from neox_epoch.audit.exposure import ExposureReport
from neox_epoch.audit.findings import Finding, JsonFields, finding
from neox_epoch.audit.index_report import STALE_HINT
from neox_epoch.errors import FileProblem
from neox_epoch.formats import cache_names as names
from neox_epoch.formats.cache_descriptions import child_digest, read_mcore_description
from neox_epoch.formats.npy import NpyInfo, NpyReader, Progress, read_header
from neox_epoch.semantics import blend as greedy
from neox_epoch.semantics import neox as neox_sem

#: replay the greedy in Python (no C extension) only up to this many steps
_PY_GREEDY_LIMIT = 20_000_000


@dataclass
class SourceReport(JsonFields):
    """One source of a blend."""

    index: str | None  # Path (stem) of the source's index cache, None if not found.
    dataset_path: str | None  # The source's data prefix.
    weight: float | None  # Its blend weight (normalized as the greedy uses it).
    draws: int | None = None  # Samples the whole blend draws from it.
    draws_consumed: int | None = None  # Samples the consumed part of the blend draws from it.
    length: int | None = None  # `len` of the source dataset.
    samples_per_epoch: int | None = None  # Samples one pass over the source's split gives.
    epochs: int | None = None  # Epochs built for the source.
    passes: float | None = None  # `draws_consumed / samples_per_epoch`.
    second_pass_sample: int | None = None
    """0-based blend sample at which the source's draws exceed one epoch's samples (None: never)."""
    second_pass_iteration: int | None = None  # 1-based iteration containing it (needs the global batch size).
    exposure: ExposureReport | None = field(default=None, repr=False)  # The source's exposure (JSON: under its index).


@dataclass
class BlendReport(JsonFields):
    """One blend (megatron-core BlendedDataset cache, or a NeoX blend replayed from its weights)."""

    kind: str  # `megatron-core` or `neox`.
    path: str  # The blend's files without their role suffix (NeoX: the first source's index).
    split: str  # The split.
    size: int | None = None  # Samples of the blend (`len`).
    weights: list[float] | None = None  # Weights as the greedy uses them (None: exhaustive blending).
    consumed_samples: int | None = None  # Blend samples consumed by training.
    files: dict[str, str] = field(default_factory=dict)  # role -> file.
    sources: list[SourceReport] = field(default_factory=list)  # Per source.
    findings: list[Finding] = field(default_factory=list)  # Problems found.
    notes: list[str] = field(default_factory=list)  # Remarks.
    exposure: ExposureReport | None = None  # Sum of the sources' exposures.
    children: list[str | None] = field(default_factory=list, repr=False)
    """Stems of the sources' index caches (None: not found)."""
    dataset_index_ok: bool = field(default=True, repr=False)


def read_mcore_blend(group: names.CacheGroup) -> BlendReport:
    """The blend's description (checked) and its sources' cache stems; arrays are read by :func:`scan_blend`."""
    rep = BlendReport(kind=names.MCORE, path=group.stem, split=group.split, files=dict(group.files))
    for role in group.missing_roles():
        rep.findings.append(finding(group.stem, "missing file", f"the {role} file of this blend", "no such file"))
    rep.dataset_index_ok = _read_sources(rep, group) and not group.missing_roles()
    return rep


def _read_sources(rep: BlendReport, group: names.CacheGroup) -> bool:
    """The size, weights and sources from the description; False when it cannot be read as a blend's."""
    path = group.files.get(names.DESCRIPTION)
    if path is None:
        return False
    try:
        description = read_mcore_description(path)
    except FileProblem as problem:
        rep.findings.append(Finding.of(problem))
        return False
    if description.digest != group.digest:
        rep.findings.append(
            finding(
                path,
                "description md5",
                f"{group.digest} (the hash in the file names)",
                description.digest,
                "the description was edited or belongs to other files",
            )
        )
    fields = description.fields
    datasets, size, weights = fields.get("datasets"), fields.get("size"), fields.get("weights")
    if fields.get("class") != "BlendedDataset" or not isinstance(datasets, list) or not datasets:
        rep.findings.append(
            finding(
                path,
                "description",
                "a BlendedDataset description with a list of datasets",
                f"class {fields.get('class')!r}, datasets {type(datasets).__name__}",
            )
        )
        return False
    rep.size = size if isinstance(size, int) else None
    weights = list(weights) if isinstance(weights, list) else [None] * len(datasets)
    for number, child in enumerate(datasets):
        if not isinstance(child, dict):
            rep.findings.append(finding(path, f"datasets[{number}]", "a GPTDataset description", type(child).__name__))
            rep.children.append(None)
            continue
        name = f"{child_digest(child)}-{child.get('class', 'GPTDataset')}-{child.get('index_split', group.split)}"
        rep.children.append(os.path.join(os.path.dirname(group.stem), name))
        weight = weights[number] if number < len(weights) else None
        rep.sources.append(
            SourceReport(
                index=rep.children[-1],
                dataset_path=child.get("dataset_path"),
                weight=float(weight) if isinstance(weight, (int, float)) else None,
            )
        )
    numeric = all(isinstance(weight, (int, float)) for weight in weights)
    rep.weights = [float(weight) for weight in weights] if rep.size is not None and numeric else None
    return True


def scan_blend(
    rep: BlendReport, group: names.CacheGroup, consumed: int | None, progress: Progress, want_positions: bool
) -> tuple[list[int], list[int], list[np.ndarray] | None]:
    """Validate the blend arrays in one pass; return (draws, draws among the first ``consumed``,
    per-source blend positions of those draws (``want_positions``))."""
    sources = len(rep.sources)
    draws, draws_consumed = [0] * sources, [0] * sources
    positions: list[list[np.ndarray]] | None = [[] for _ in range(sources)] if want_positions else None
    headers = _blend_headers(rep, group) if rep.dataset_index_ok else None
    if headers is None:
        return draws, draws_consumed, None
    index_info, sample_info = headers
    size, expected_size = index_info.rows, rep.size
    if expected_size is None and all(source.weight is not None for source in rep.sources):
        expected_size = sum(int(source.weight or 0) for source in rep.sources)  # exhaustive: weights are counts
    if expected_size is not None and size != expected_size:
        rep.findings.append(finding(index_info.path, "blend size", f"{expected_size} (description)", size, STALE_HINT))
    if sample_info.rows != size:
        rep.findings.append(
            finding(
                sample_info.path,
                "length",
                f"{size} (entries of dataset_index)",
                sample_info.rows,
                "the two blend files come from different builds",
            )
        )
        rep.dataset_index_ok = False
        return draws, draws_consumed, None
    rep.size = size
    stop = min(consumed, size) if consumed is not None else 0
    with NpyReader(index_info) as index_reader, NpyReader(sample_info) as sample_reader:
        for start, chosen in index_reader.chunks(progress=progress, label="blend"):
            samples = sample_reader.read(start, start + chosen.shape[0])
            chosen = chosen.astype(np.int64)
            if int(chosen.min()) < 0 or int(chosen.max()) >= sources:
                bad = int(np.argmax((chosen < 0) | (chosen >= sources)))
                rep.findings.append(
                    finding(
                        index_info.path,
                        "dataset index",
                        f"source ids in [0, {sources})",
                        f"{int(chosen[bad])} at {start + bad}",
                    )
                )
                rep.dataset_index_ok = False
                break
            if not _draws_in_order(
                rep, sample_info.path, start, chosen, samples, draws, draws_consumed, positions, stop
            ):
                break
    progress.done()  # (again, when a damaged chunk ended the pass early)
    if rep.dataset_index_ok:
        _check_greedy(rep, index_info.path, draws)
    return (
        draws,
        draws_consumed,
        (
            None
            if positions is None
            else [np.concatenate(part) if part else np.zeros(0, np.int64) for part in positions]
        ),
    )


def _draws_in_order(
    rep: BlendReport,
    path: str,
    start: int,
    sources: np.ndarray,
    samples: np.ndarray,
    draws: list[int],
    draws_consumed: list[int],
    positions: list[list[np.ndarray]] | None,
    stop: int,
) -> bool:
    """Each source's samples of this chunk drawn in order; counts them (and, below ``stop``, the consumed)."""
    for source in np.unique(sources).tolist():
        at = np.flatnonzero(sources == source)
        want = np.arange(draws[source], draws[source] + at.shape[0], dtype=np.int64)
        if not np.array_equal(samples[at], want):
            bad = int(np.argmax(samples[at] != want))
            rep.findings.append(
                finding(
                    path,
                    "dataset sample index",
                    f"source {source}'s samples drawn in order "
                    f"({int(want[bad])} at blend sample {start + int(at[bad])})",
                    int(samples[at][bad]),
                    "the blend files are damaged or from different builds",
                )
            )
            rep.dataset_index_ok = False
            return False
        if start < stop:
            consumed = int(np.count_nonzero(at < stop - start))
            draws_consumed[source] += consumed
            if positions is not None:
                positions[source].append(at[:consumed] + start)
        draws[source] += at.shape[0]
    return True


def _blend_headers(rep: BlendReport, group: names.CacheGroup) -> tuple[NpyInfo, NpyInfo] | None:
    """The two arrays' headers: 1-D, dataset index int16, dataset sample index int64."""
    try:
        infos = (read_header(group.files[names.DATASET]), read_header(group.files[names.DATASET_SAMPLE]))
    except FileProblem as problem:
        rep.findings.append(Finding.of(problem))
        rep.dataset_index_ok = False
        return None
    for info, allowed in zip(infos, ("int16", "int64")):
        if info.dtype.kind not in "iu" or len(info.shape) != 1:
            rep.findings.append(
                finding(
                    info.path, "dtype/shape", f"a 1-D integer array ({allowed})", f"{info.dtype} {list(info.shape)}"
                )
            )
            rep.dataset_index_ok = False
        elif info.dtype.name != allowed:
            rep.findings.append(finding(info.path, "dtype", allowed, info.dtype.name))
    return infos if rep.dataset_index_ok else None


def _check_greedy(rep: BlendReport, path: str, draws: list[int]) -> None:
    """The per-source totals must be what the greedy draws with the description's weights (or, without
    weights, exhaustive blending: the sources' weights are their counts)."""
    if not rep.size:
        return
    if rep.weights is None:
        want = [int(source.weight or 0) for source in rep.sources]
        if all(source.weight is not None for source in rep.sources) and want != draws:
            rep.findings.append(
                finding(path, "blend draws", f"{want} (exhaustive blending: the weights are the counts)", draws)
            )
        return
    if greedy._greedy is None and rep.size > _PY_GREEDY_LIMIT:
        rep.notes.append("greedy replay skipped (the C extension is not built and the blend is large)")
        return
    want = greedy.greedy_counts(rep.weights, rep.size)
    if want != draws:
        rep.findings.append(
            finding(
                path,
                "blend draws",
                f"{want} (the greedy with the description's weights)",
                draws,
                "dataset_index was not built from these weights: the blend files are damaged or mixed",
            )
        )


def second_pass_positions(path: str, marks: dict[int, int], stop: int) -> dict[int, int]:
    """Blend position of source ``i``'s draw ``marks[i]`` (0-based), in the first ``stop`` of dataset_index ``path``."""
    found: dict[int, int] = {}
    counts = dict.fromkeys(marks, 0)
    with NpyReader(read_header(path)) as reader:
        for start, chosen in reader.chunks(stop=stop):
            for source, target in marks.items():
                if source in found:
                    continue
                at = np.flatnonzero(chosen == source)
                if counts[source] + at.shape[0] > target:
                    found[source] = start + int(at[target - counts[source]])
                counts[source] += at.shape[0]
            if len(found) == len(marks):
                break
    return found


def neox_draws(
    weights: list[float], lengths: list[int], consumed: int
) -> tuple[list[int], list[list[tuple[int, int]]]]:
    """NeoX's blend read for ``consumed`` samples (:func:`neox_epoch.semantics.neox.blend_passes`); a source index
    past its length wraps modulo that length. Returns (draws, per source the ``(prefix, passes)`` it draws, as
    :meth:`~neox_epoch.semantics.consumption.Consumption.from_prefixes` takes them)."""
    if sum(lengths) <= 0:
        return [0] * len(lengths), [[] for _ in lengths]
    passes, full, rest = neox_sem.blend_passes(weights, lengths, consumed)
    return [passes * f + x for f, x in zip(full, rest)], [[(f, passes), (x, 1)] for f, x in zip(full, rest)]
