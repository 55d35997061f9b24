"""Blends: megatron-core BlendedDataset caches (dataset_index, dataset_sample_index) and NeoX blends.

A megatron-core blend maps its sample ``k`` to ``(dataset_index[k], dataset_sample_index[k])``; the
greedy draws each source's indices in order ``0, 1, 2, ...``, so the first ``N`` blend samples draw a
*prefix* of every source (``draws_i`` = occurrences of ``i`` in ``dataset_index[:N]``). Its description
embeds each source's GPTDataset description, whose md5 names that source's cache files.

GPT-NeoX keeps its blend (BlendableDataset) in memory only; with the train weights (``--config``) the
draws are replayed with the same greedy (:mod:`neox_epoch.blend`), wrapping like NeoX (index % len).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from neox_epoch import blend as greedy
from neox_epoch.audit import names
from neox_epoch.audit.consumption import Consumption
from neox_epoch.audit.descriptions import child_digest, read_mcore_description
from neox_epoch.audit.exposure import ExposureReport
from neox_epoch.audit.findings import FileProblem, Finding
from neox_epoch.audit.npy import CHUNK_ROWS, NpyInfo, NpyReader, read_header
from neox_epoch.audit.validate import STALE_HINT, Progress
from neox_epoch.semantics import neox as neox_sem

#: replay the greedy in Python (no C extension) only up to this many steps
_PY_GREEDY_LIMIT = 20_000_000


@dataclass
class SourceReport:
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
    exposure: ExposureReport | None = None  # The source's exposure (also under its index).

    def to_json(self) -> dict[str, Any]:
        keys = ("index", "dataset_path", "weight", "draws", "draws_consumed", "length", "samples_per_epoch", "epochs",
                "passes", "second_pass_sample", "second_pass_iteration")
        return {key: getattr(self, key) for key in keys}


@dataclass
class BlendReport:
    """One blend (megatron-core BlendedDataset cache, or a NeoX blend replayed from its weights)."""

    kind: str  # `megatron-core` or `neox`.
    path: str  # The blend's files without their role suffix (NeoX: the first source's index).
    split: str  # The split.
    size: int | None = None  # Samples of the blend (`len`).
    weights: list[float] | None = None  # Weights as the greedy uses them (None: exhaustive blending).
    files: dict[str, str] = field(default_factory=dict)  # role -> file.
    sources: list[SourceReport] = field(default_factory=list)  # Per source.
    consumed_samples: int | None = None  # Blend samples consumed by training.
    findings: list[Finding] = field(default_factory=list)  # Problems found.
    notes: list[str] = field(default_factory=list)  # Remarks.
    exposure: ExposureReport | None = None  # Sum of the sources' exposures.
    children: list[str | None] = field(default_factory=list, repr=False)
    """Stems of the sources' index caches (None: not found)."""
    dataset_index_ok: bool = field(default=True, repr=False)

    def to_json(self) -> dict[str, Any]:
        out = {key: getattr(self, key) for key in ("kind", "path", "split", "size", "weights", "consumed_samples")}
        return {**out, "files": dict(self.files), "sources": [s.to_json() for s in self.sources],
                "findings": [f.to_json() for f in self.findings], "notes": list(self.notes),
                "exposure": self.exposure.to_json() if self.exposure is not None else None}


def _finding(rep: BlendReport, path: str, what: str, expected: Any, found: Any, hint: str = "") -> None:
    rep.findings.append(Finding(path=path, what=what, expected=str(expected), found=str(found), hint=hint))


def read_mcore_blend(group: names.CacheGroup) -> tuple[BlendReport, dict[str, Any] | None]:
    """The blend's description (checked) and its sources' cache stems; arrays are read by :func:`scan_blend`."""
    rep = BlendReport(kind=names.MCORE, path=group.stem, split=group.split, files=dict(group.files))
    for role in group.missing_roles():
        _finding(rep, group.stem, "missing file", f"the {role} file of this blend", "no such file")
    dpath = group.files.get(names.DESCRIPTION)
    if dpath is None:
        rep.dataset_index_ok = False
        return rep, None
    try:
        desc = read_mcore_description(dpath)
    except FileProblem as p:
        rep.findings.append(p.finding)
        rep.dataset_index_ok = False
        return rep, None
    if desc.digest != group.digest:
        _finding(rep, dpath, "description md5", f"{group.digest} (the hash in the file names)", desc.digest,
                 "the description was edited or belongs to other files")
    f = desc.fields
    datasets = f.get("datasets")
    if f.get("class") != "BlendedDataset" or not isinstance(datasets, list) or not datasets:
        _finding(rep, dpath, "description", "a BlendedDataset description with a list of datasets",
                 f"class {f.get('class')!r}, datasets {type(datasets).__name__}")
        rep.dataset_index_ok = False
        return rep, None
    size = f.get("size")
    weights = f.get("weights")
    rep.size = size if isinstance(size, int) else None
    directory = os.path.dirname(group.stem)
    wl = list(weights) if isinstance(weights, list) else [None] * len(datasets)
    for i, child in enumerate(datasets):
        if not isinstance(child, dict):
            _finding(rep, dpath, f"datasets[{i}]", "a GPTDataset description", type(child).__name__)
            rep.children.append(None)
            continue
        digest = child_digest(child)
        stem = os.path.join(directory, f"{digest}-{child.get('class', 'GPTDataset')}-{child.get('index_split', group.split)}")
        rep.children.append(stem)
        w = wl[i] if i < len(wl) else None
        rep.sources.append(SourceReport(index=stem, dataset_path=child.get("dataset_path"),
                                        weight=float(w) if isinstance(w, (int, float)) else None))
    rep.weights = [float(w) for w in wl] if rep.size is not None and all(isinstance(w, (int, float)) for w in wl) else None
    return rep, f


def scan_blend(rep: BlendReport, group: names.CacheGroup, consumed: int | None, progress: Progress,
               want_positions: bool) -> tuple[list[int], list[int], list[np.ndarray] | None]:
    """Validate the blend arrays in one pass; return (draws, draws among the first ``consumed``,
    per-source blend positions of those draws (``want_positions``))."""
    n = len(rep.sources)
    draws = [0] * n
    draws_n = [0] * n
    positions: list[list[np.ndarray]] | None = [[] for _ in range(n)] if want_positions else None
    if not rep.dataset_index_ok or group.missing_roles():
        rep.dataset_index_ok = False
        return draws, draws_n, None
    headers = _blend_headers(rep, group)
    if headers is None:
        return draws, draws_n, None
    di_info, ds_info = headers
    size = di_info.rows
    expected_size = rep.size
    if expected_size is None and all(s.weight is not None for s in rep.sources):
        expected_size = int(sum(int(s.weight or 0) for s in rep.sources))  # exhaustive: weights are counts
    if expected_size is not None and size != expected_size:
        _finding(rep, di_info.path, "blend size", f"{expected_size} (description)", size, STALE_HINT)
    if ds_info.rows != size:
        _finding(rep, ds_info.path, "length", f"{size} (entries of dataset_index)", ds_info.rows,
                 "the two blend files come from different builds")
        rep.dataset_index_ok = False
        return draws, draws_n, None
    rep.size = size
    stop_n = min(consumed, size) if consumed is not None else 0
    progress.start("blend", size)
    with NpyReader(di_info) as di_r, NpyReader(ds_info) as ds_r:
        for k0, di in di_r.chunks(rows=CHUNK_ROWS):
            k1 = k0 + di.shape[0]
            ds = ds_r.read(k0, k1)
            di = di.astype(np.int64)
            if int(di.min()) < 0 or int(di.max()) >= n:
                bad = int(np.argmax((di < 0) | (di >= n)))
                _finding(rep, di_info.path, "dataset index", f"source ids in [0, {n})", f"{int(di[bad])} at {k0 + bad}")
                rep.dataset_index_ok = False
                break
            if not _draws_in_order(rep, ds_info.path, k0, di, ds, draws, draws_n, positions, stop_n):
                break
            progress.advance(k1 - k0)
    progress.done()
    if rep.dataset_index_ok:
        _check_greedy(rep, di_info.path, draws)
    pos = [np.concatenate(p) if p else np.zeros(0, dtype=np.int64) for p in positions] if positions is not None else None
    return draws, draws_n, pos


def _draws_in_order(rep: BlendReport, path: str, start: int, sources: np.ndarray, samples: np.ndarray,
                    draws: list[int], draws_consumed: list[int], positions: list[list[np.ndarray]] | None,
                    stop: int) -> bool:
    """Each source's samples of this chunk drawn in order; counts them (and, below ``stop``, the consumed)."""
    for i in np.unique(sources).tolist():
        at = np.flatnonzero(sources == i)
        want = np.arange(draws[i], draws[i] + at.shape[0], dtype=np.int64)
        if not np.array_equal(samples[at], want):
            b = int(np.argmax(samples[at] != want))
            _finding(rep, path, "dataset sample index",
                     f"source {i}'s samples drawn in order ({int(want[b])} at blend sample {start + int(at[b])})",
                     int(samples[at][b]), "the blend files are damaged or from different builds")
            rep.dataset_index_ok = False
            return False
        if start < stop:
            consumed = int(np.count_nonzero(at < stop - start))
            draws_consumed[i] += consumed
            if positions is not None:
                positions[i].append(at[:consumed] + start)
        draws[i] += at.shape[0]
    return True


def _blend_headers(rep: BlendReport, group: names.CacheGroup) -> tuple[NpyInfo, NpyInfo] | None:
    """The two arrays' headers: 1-D, dataset index int16, dataset sample index int64."""
    try:
        infos = (read_header(group.files[names.DATASET]), read_header(group.files[names.DATASET_SAMPLE]))
    except FileProblem as p:
        rep.findings.append(p.finding)
        rep.dataset_index_ok = False
        return None
    for info, allowed in zip(infos, ("int16", "int64")):
        if info.dtype.kind not in "iu" or len(info.shape) != 1:
            _finding(rep, info.path, "dtype/shape", f"a 1-D integer array ({allowed})", f"{info.dtype} {list(info.shape)}")
            rep.dataset_index_ok = False
        elif info.dtype.name != allowed:
            _finding(rep, info.path, "dtype", allowed, info.dtype.name)
    return infos if rep.dataset_index_ok else None


def _check_greedy(rep: BlendReport, path: str, draws: list[int]) -> None:
    """The per-source totals must be what the greedy draws with the description's weights."""
    if rep.size is None or rep.size == 0:
        return
    if rep.weights is None:
        if all(s.weight is not None for s in rep.sources):
            want = [int(s.weight or 0) for s in rep.sources]
            if want != draws:
                _finding(rep, path, "blend draws", f"{want} (exhaustive blending: the weights are the counts)", draws)
        return
    if greedy._greedy is None and rep.size > _PY_GREEDY_LIMIT:
        rep.notes.append("greedy replay skipped (the C extension is not built and the blend is large)")
        return
    want = greedy.greedy_counts(rep.weights, rep.size)
    if want != draws:
        _finding(rep, path, "blend draws", f"{want} (the greedy with the description's weights)", draws,
                 "dataset_index was not built from these weights: the blend files are damaged or mixed")


def second_pass_positions(group: names.CacheGroup, marks: dict[int, int], stop: int) -> dict[int, int]:
    """Blend position of draw number ``marks[i]`` (0-based) of each source ``i``, among the first ``stop``."""
    out: dict[int, int] = {}
    if not marks:
        return out
    counts = dict.fromkeys(marks, 0)
    with NpyReader(read_header(group.files[names.DATASET])) as r:
        for k0, di in r.chunks(stop=stop, rows=CHUNK_ROWS):
            for i, target in marks.items():
                if i in out:
                    continue
                at = np.flatnonzero(di == i)
                if counts[i] + at.shape[0] > target:
                    out[i] = k0 + int(at[target - counts[i]])
                counts[i] += at.shape[0]
            if len(out) == len(marks):
                break
    return out


def neox_draws(weights: list[float], lengths: list[int], consumed: int) -> tuple[list[int], list[Consumption]]:
    """NeoX's blend read for ``consumed`` samples (:func:`neox_epoch.semantics.neox.blend_passes`); a source index
    past its length wraps modulo that length. Returns (draws, per-source consumption)."""
    if sum(lengths) <= 0:
        return [0] * len(lengths), [Consumption.prefix(n, 0) for n in lengths]
    passes, full, rest = neox_sem.blend_passes(weights, lengths, consumed)
    return ([passes * f + x for f, x in zip(full, rest)],
            [Consumption.from_prefixes(n, [(f, passes), (x, 1)], period=0) for n, f, x in zip(lengths, full, rest)])
