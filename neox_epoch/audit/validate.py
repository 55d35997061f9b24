"""Audit one GPT index (a doc/sample/shuffle triple) against the .bin/.idx it was built from.

One way through (:func:`audit_index`): :func:`~neox_epoch.audit.describe.describe` (the name or the
description, into the report), :func:`~neox_epoch.audit.describe.check_headers` (complete .npy files of the dtypes
and shapes the frameworks write), the passes of :mod:`neox_epoch.audit.passes` (document ids inside the .idx; the
shuffle index a permutation and, with a consumption, each sample's draw count; every sample boundary at
``i * seq_length`` of the stream the document index and the *current* .idx sizes give, copies per document, the
exposure), then :mod:`neox_epoch.audit.build_checks` compares what the framework would build
(:mod:`neox_epoch.semantics.built`) with what the files say. A damaged file is a finding, never a traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from neox_epoch.audit.build_checks import Built, Copies, SeedOrder, count_copies, number_findings, seed_findings
from neox_epoch.audit.describe import Bookends, check_headers, describe
from neox_epoch.audit.exposure import (
    ManifestChunk,
    StreamPass,
    kernel,
    read_sizes,
)
from neox_epoch.audit.findings import Finding, finding
from neox_epoch.audit.index_report import DIVERGENCE, STALE_HINT, IndexReport
from neox_epoch.audit.passes import Draws, SampleGrid, Stream, StreamFiles, count_draws, scan_documents, walk_stream
from neox_epoch.errors import AuditError, FileProblem, IndexFileError
from neox_epoch.formats import cache_names as names
from neox_epoch.formats import idx as idxmod
from neox_epoch.formats.npy import NpyInfo, NpyReader, Progress
from neox_epoch.semantics import mcore as mcore_sem
from neox_epoch.semantics.built import IndexNumbers, extra_token_from_files, index_numbers
from neox_epoch.semantics.consumption import FOLD_FROM, Consumption
from neox_epoch.util.inputs import changed_files, file_states
from neox_epoch.util.mapguard import guarded

#: regenerate doc_idx/shuffle_idx from the seed when they hold at most this many entries together
REGEN_LIMIT = 1 << 23


# ---- the whole audit of one index ------------------------------------------------------------------------

ConsumptionFor = Callable[[str, int], "Consumption | None"]
ManifestSink = Callable[[IndexReport, ManifestChunk], None]
IterationOf = Callable[[int], "int | None"]


@dataclass(frozen=True)
class Setting:
    """What the passes of one index need: its files, parameters and data."""

    group: names.CacheGroup
    bookends: Bookends | None  # The split's in the .idx (megatron-core).
    infos: list[NpyInfo]  # The doc, sample and shuffle headers.
    header: idxmod.IdxHeader
    samples: int
    seq_length: int


@dataclass(frozen=True)
class PassOptions:
    """What the audit's caller asks of the passes over every index: the draws, the manifest, the progress shown."""

    consumption_for: ConsumptionFor | None
    manifest: ManifestSink | None
    progress: Progress
    iteration_of: IterationOf | None


class Separation(NamedTuple):
    """:func:`_separation`'s answer."""

    separate: bool  # The last epoch shuffled on its own.
    findings: list[Finding]


class SplitDocuments(NamedTuple):
    """The split's documents in the .idx: their sizes, the sum of them and the first document's id."""

    sizes: np.ndarray
    tokens: int
    first_id: int


class Conclusion(NamedTuple):
    """:func:`_conclude`'s answer."""

    copies: Copies
    final_ok: bool  # The final boundary (row S) where the framework puts it.


def audit_index(
    group: names.CacheGroup,
    resolve_prefix: Callable[[str | None], str | None] | None = None,
    add_extra_token: int | None = None,
    consumption_for: ConsumptionFor | None = None,
    manifest: ManifestSink | None = None,
    progress: Progress | None = None,
    iteration_of: IterationOf | None = None,
) -> IndexReport:
    """Audit one GPT index; never raises for a damaged file (findings instead)."""
    report = IndexReport(
        kind=group.kind, path=group.stem, split=group.split, files=dict(group.files), digest=group.digest
    )
    watched = file_states(list(group.files.values()))
    with guarded() as faults:  # (a page of a file that shrank reads zeros instead of ending the process)
        try:
            setting = _setting(report, group, resolve_prefix, add_extra_token)
            if setting is not None:
                options = PassOptions(consumption_for, manifest, progress or Progress(), iteration_of)
                _run_passes(report, setting, options)
        except FileProblem as problem:
            report.findings.append(Finding.of(problem))
            report.exposure = None
        shrank = faults()
    changed = changed_files(watched)
    if changed or shrank:
        report.findings.append(
            finding(
                ", ".join(changed) or group.stem,
                "changed while being read",
                "files that stay as they are during the audit",
                f"{len(changed)} file(s) replaced, resized or written" + (f", {shrank} page(s) gone" if shrank else ""),
                "a process (a rank 0 rebuilding the index?) rewrote the cache: audit it again once it is complete",
            )
        )
        report.exposure = None
    return report


def _setting(
    report: IndexReport,
    group: names.CacheGroup,
    resolve_prefix: Callable[[str | None], str | None] | None,
    add_extra_token: int | None,
) -> Setting | None:
    """Stages 1 and 2 into the report; None when the passes cannot run."""
    missing = group.missing_roles()
    report.findings.extend(
        finding(
            group.stem,
            "missing file",
            f"the {role} file of this index",
            "no such file",
            "an incomplete cache: the framework would rebuild it (or fail)",
        )
        for role in missing
    )
    if missing:
        return None
    prefix, bookends = describe(group, report, add_extra_token)
    packed = report.pack_impl in (None, "packed")
    if not packed:
        report.notes.append(f"pack_impl {report.pack_impl}: only headers and document ids are audited (no exposure)")
    headers = check_headers(group, packed)
    report.findings.extend(headers.findings)
    infos = [info for info in headers.infos if info is not None]
    if len(infos) < len(headers.infos):
        return None
    samples = max(0, infos[1].rows - 1)
    report.samples, report.length = samples, samples - 1 if group.kind == names.NEOX else samples
    where = group.files.get(names.DESCRIPTION, group.stem)
    if report.seq_length is None or report.seq_length <= 0:
        report.findings.append(finding(where, "sequence length", "a positive integer", report.seq_length))
        return None
    prefix = resolve_prefix(prefix) if resolve_prefix is not None else prefix
    if not prefix:
        report.findings.append(finding(where, "data prefix", "the path of the .bin/.idx", "none", "pass --data-prefix"))
        return None
    report.data_prefix = prefix
    try:
        header = idxmod.read_header(prefix, check_bin=True)
    except IndexFileError as err:
        report.findings.append(
            finding(
                idxmod.normalize_prefix(prefix) + ".idx",
                "data",
                "the .bin/.idx the index was built from",
                str(err),
                "point --data-prefix at the data (the cache files are checked against its sizes)",
            )
        )
        return None
    return Setting(group, bookends, infos, header, samples, report.seq_length)


def _sizes(header: idxmod.IdxHeader, first_id: int, stop_id: int) -> np.ndarray:
    """The split's .idx sizes, read like an .npy array's rows: a read-only view of the file (a copy if not mappable)."""
    info = NpyInfo(header.prefix + ".idx", (header.sequence_count,), np.dtype(np.int32), False, header.sizes_offset)
    with NpyReader(info) as reader:
        return reader.read(first_id, stop_id)


def _separation(path: str, numbers: IndexNumbers, draws: Draws, block_max: int, samples: int) -> Separation:
    """Whether the last epoch is shuffled on its own: the 80% rule against the shuffle index's blocks (``block_max``:
    the largest id among the first block's entries)."""
    in_files = block_max < numbers.first_block if not draws.findings and 0 < numbers.first_block < samples else None
    if numbers.separate is None or in_files is None or in_files == numbers.separate:
        return Separation(bool(numbers.separate if numbers.separate is not None else in_files), [])
    return Separation(
        numbers.separate,
        [
            finding(
                path,
                "final-epoch separation",
                f"{'a separately' if numbers.separate else 'a jointly'} shuffled final epoch (80% rule)",
                f"{'separate' if in_files else 'joint'} shuffle blocks",
                "the index was built with other parameters than its description says: " + STALE_HINT,
            )
        ],
    )


def _run_passes(report: IndexReport, setting: Setting, options: PassOptions) -> None:
    doc_info, sample_info, shuffle_info = setting.infos
    packed = report.pack_impl in (None, "packed")
    consumption_for = options.consumption_for
    consumption = consumption_for(report.split, report.length or 0) if consumption_for and packed else None
    # (the pool's exit, first, waits for its thread before the readers close)
    with (
        NpyReader(doc_info) as doc_r,
        NpyReader(sample_info) as sample_r,
        NpyReader(shuffle_info) as shuffle_r,
        ThreadPoolExecutor(1) as side,
    ):
        # the shuffle pass on a second thread (its progress not shown) beside the documents' scan and the records'
        # fresh pages, whose first touch costs 0.02-0.25 s at 30M samples as the machine gives them
        def shuffle_pass(drawn: Consumption | None) -> Future[Draws]:
            return side.submit(count_draws, shuffle_r, setting.samples, drawn, options.manifest is not None, Progress())

        # (a consumption folded for many draws waits for the copies' count: Consumption.fold)
        folds = consumption is not None and consumption.max_count >= FOLD_FROM
        readers = (doc_r, sample_r, shuffle_r)
        _stream_passes(
            report, setting, options, consumption, readers, shuffle_pass if folds else shuffle_pass(consumption)
        )


def _stream_passes(
    report: IndexReport,
    setting: Setting,
    options: PassOptions,
    consumption: Consumption | None,
    readers: tuple[NpyReader, NpyReader, NpyReader],
    shuffle_pass: Future[Draws] | Callable[[Consumption | None], Future[Draws]],
) -> None:
    """The passes of :func:`_run_passes` with its readers, the shuffle pass running on another thread."""
    kind, samples, sequences = setting.group.kind, setting.samples, setting.header.sequence_count
    manifest, progress = options.manifest, options.progress
    doc_info, _, shuffle_info = setting.infos
    doc_r, sample_r, shuffle_r = readers
    packed = report.pack_impl in (None, "packed")
    first_id, stop_id, problem, ids_mix = scan_documents(doc_r, sequences, setting.header.prefix + ".idx", progress)
    if problem is not None:
        report.findings.append(problem)
        return
    report.document_range = [first_id, stop_id]
    report.findings.extend(_range_findings(setting, first_id, stop_id))
    range_mix = kernel.mixed(first_id, stop_id)
    sizes = _sizes(setting.header, first_id, stop_id)
    documents = stop_id - first_id
    epochs = doc_r.info.rows // documents if doc_r.info.rows % documents == 0 else 0
    exposing = consumption is not None and epochs > 0 and packed
    records, stats = read_sizes(sizes, epochs if exposing else 0)
    tokens = stats[2]
    if not isinstance(shuffle_pass, Future):
        consumption = _folded(consumption, epochs, manifest is not None, doc_info.path)
        shuffle_pass = shuffle_pass(consumption)
    numbers = index_numbers(
        kind, tokens, setting.seq_length, epochs, report.num_samples_requested, report.add_extra_token or 1
    )
    draws = shuffle_pass.result()
    block_max = draws.first_block_max(shuffle_r, numbers.first_block if epochs > 1 else 0)
    separate, found = _separation(shuffle_info.path, numbers, draws, block_max, samples)
    report.findings.extend(draws.findings + tuple(found))
    if not packed:
        return
    window = (consumption.tokens_out, consumption.tokens_window) if consumption else (None, None)
    walked = (sizes, first_id, epochs, draws.counts, setting.seq_length, draws.sample_draws, *window)
    walker = StreamPass(*walked, stats=stats, records=records)
    tail_from = (epochs - 1) * documents if separate and epochs > 1 else None
    files = StreamFiles(doc_r, sample_r, SampleGrid(samples, setting.seq_length), tail_from, ids_mix, range_mix)
    stream = walk_stream(files, walker, progress)
    report.findings.extend(stream.findings)
    copies, final_ok = _conclude(report, setting, stream, SplitDocuments(sizes, tokens, first_id), separate)
    trusted = not draws.findings and not stream.findings and final_ok
    small = doc_r.info.rows + samples <= REGEN_LIMIT
    if small and trusted and not copies.findings and copies.epochs > 0 and (report.seed or -1) >= 0:
        first_block = numbers.first_block if separate else None
        order = SeedOrder(int(report.seed or 0), first_id, stop_id, copies.epochs, first_block)
        report.findings.extend(seed_findings(doc_r, shuffle_r, order))
    if consumption is not None:
        _expose(report, walker, consumption, trusted and not copies.findings, options)


def _range_findings(setting: Setting, first_id: int, stop_id: int) -> list[Finding]:
    """The document ids' range against the one megatron-core's split_matrix gives (none: not recorded)."""
    sequences = setting.header.sequence_count
    expected = mcore_sem.split_range(setting.bookends, sequences) if setting.bookends is not None else None
    if expected is None or expected[1] <= expected[0] or (first_id, stop_id) == expected:
        return []
    return [
        finding(
            setting.infos[0].path,
            "document range",
            f"[{expected[0]}, {expected[1]}) from split_matrix and {sequences} sequences",
            f"[{first_id}, {stop_id})",
            "the corpus or split changed since the build: " + STALE_HINT,
        )
    ]


def _folded(consumption: Consumption | None, epochs: int, manifest: bool, path: str) -> Consumption | None:
    """A consumption folded for many draws once the copies' count is known (:meth:`Consumption.fold`)."""
    try:
        return consumption.fold(epochs, manifest) if consumption is not None else None
    except ValueError as err:
        raise AuditError(f"{path}: {err}: audit without --manifest, or a smaller --consumed") from None


def _conclude(
    report: IndexReport, setting: Setting, stream: Stream, split: SplitDocuments, separate: bool
) -> Conclusion:
    """The copies, the final boundary and the framework's numbers into the report; the copies, and whether the final
    boundary is where the framework puts it."""
    sizes, tokens, first_id = split
    kind, samples, seq_length = setting.group.kind, setting.samples, setting.seq_length
    doc_path, sample_path = setting.group.files[names.DOC], setting.group.files[names.SAMPLE]
    copies = count_copies(doc_path, stream.copies, tokens, sizes, first_id, stream.epochs)
    report.findings.extend(copies.findings)
    report.documents, report.tokens, report.epochs = copies.documents, copies.tokens, copies.epochs
    if stream.tail_missing:
        report.findings.append(
            finding(
                doc_path,
                "final-epoch separation",
                "each document once in the last epoch block",
                f"{stream.tail_missing} documents missing from it",
                STALE_HINT,
            )
        )
    # row S at S*L (the last partial sample dropped) or at E*T - a (kept)
    end, last = stream.total_tokens, stream.last_position
    ends = [samples * seq_length] + [end - a for a in (1, 0) if samples * seq_length > end - a]
    final_ok = bool(stream.findings) or last is None or last in ends
    if not final_ok:
        report.findings.append(
            finding(
                sample_path,
                "sample boundary",
                f"stream token {ends[0]} for the last row {samples}",
                f"token {last}",
                DIVERGENCE,
            )
        )
    extra = report.add_extra_token
    if kind == names.MCORE and extra is None:
        extra = extra_token_from_files(end, last, samples, seq_length) if final_ok else None
        if extra is None and copies.tokens % seq_length == 0:
            report.notes.append(
                "add_extra_token_to_sequence is not recorded in the cache and not inferable from it; "
                "samples_per_epoch assumes 1 (the default): pass --add-extra-token 0 if the run used 0"
            )
        extra = 1 if extra is None else extra
    report.add_extra_token = extra
    numbers = index_numbers(kind, copies.tokens, seq_length, copies.epochs, report.num_samples_requested, extra or 1)
    report.samples_per_epoch = numbers.samples_per_epoch
    report.separated_final_epoch = bool(separate) and copies.epochs > 1 and kind != names.NEOX
    trusted = not stream.findings and not copies.findings
    built = Built(doc_path, sample_path, kind, samples, report.num_samples_requested, seq_length)
    report.findings.extend(number_findings(built, numbers, copies, trusted))
    return Conclusion(copies, final_ok)


def _expose(
    report: IndexReport,
    walker: StreamPass,
    consumption: Consumption,
    trusted: bool,
    options: PassOptions,
) -> None:
    """The exposure into the report (withheld when the files cannot be trusted: the findings say why)."""
    manifest, iteration_of = options.manifest, options.iteration_of
    if not walker.exposing or not trusted:
        return
    exposure = walker.report(consumption.consumed, consumption.folded)
    per_epoch, positions = report.samples_per_epoch, consumption.positions
    if per_epoch and consumption.consumed > per_epoch:  # the global position of draw number per_epoch (0-based)
        if positions is not None:
            exposure.second_pass_sample = int(positions[per_epoch]) if per_epoch < positions.shape[0] else None
        elif consumption.period > 0:  # (a blend's source, 0: the blend knows the position)
            exposure.second_pass_sample = per_epoch
        if iteration_of is not None and exposure.second_pass_sample is not None:
            exposure.second_pass_iteration = iteration_of(exposure.second_pass_sample)
    if consumption.consumed > (report.length or 0):
        exposure.notes.append(
            f"{consumption.consumed} samples drawn from a dataset of len {report.length}: "
            + (
                "NeoX wraps the index silently (index % len)"
                if report.kind == names.NEOX
                else "megatron would run out of samples (or a blend raises)"
            )
        )
    report.exposure = exposure
    if manifest is not None:
        for chunk in walker.manifest():
            manifest(report, chunk)
