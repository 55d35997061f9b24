"""The first stages of an index's audit: what its name (NeoX) or description (megatron) says, into the report, and
its .npy headers (complete files of the dtypes and shapes the frameworks write)."""

from __future__ import annotations

from typing import Any, NamedTuple

from neox_epoch.audit.findings import Finding, finding
from neox_epoch.audit.index_report import IndexReport
from neox_epoch.formats import cache_names as names
from neox_epoch.formats.cache_descriptions import read_legacy_description, read_mcore_description, tokenizer_form_note
from neox_epoch.formats.npy import NpyInfo, read_header
from neox_epoch.semantics import mcore as mcore_sem

# ---- stage 1: what the name or the description says ----------------------------------------------------

Bookends = tuple[float, float]


class Described(NamedTuple):
    """:func:`describe`'s answer."""

    prefix: str | None  # The data prefix the index was built from.
    bookends: Bookends | None  # The split's bookends in the .idx (None: not recorded).


class Headers(NamedTuple):
    """:func:`check_headers`' answer."""

    infos: list[NpyInfo | None]  # The doc, sample and shuffle headers (None: not an index at all).
    findings: list[Finding]


class CheckedHeader(NamedTuple):
    """:func:`check_dtype`'s answer."""

    info: NpyInfo | None  # The header (None: the file cannot be read as an index at all).
    findings: list[Finding]


def describe(group: names.CacheGroup, report: IndexReport, add_extra_token: int | None) -> Described:
    """The index's parameters, as its name (NeoX) or description (megatron) gives them, into the report;
    returns (the data prefix, the split's bookends in the .idx: None when not recorded)."""
    neox = group.neox
    if neox is not None:
        report.seq_length, report.seed, report.num_samples_requested = neox.seq_length, neox.seed, neox.num_samples
        report.pack_impl, report.add_extra_token = neox.pack_impl, 1
        return Described(neox.prefix, None)
    path, mcore = group.files[names.DESCRIPTION], group.kind == names.MCORE
    description = (read_mcore_description if mcore else read_legacy_description)(path)
    if description.digest != group.digest:
        report.findings.append(
            finding(
                path,
                "description md5",
                f"{group.digest} (the hash in the file names)",
                description.digest,
                "the description was edited or belongs to other files: the cache cannot be trusted",
            )
        )
    if mcore:
        return _describe_mcore(group, report, path, description.fields, add_extra_token)
    fields, name = description.fields, description.fields.get("name")
    report.seq_length, report.seed, report.num_samples_requested = (
        fields.get("seq_length"),
        fields.get("seed"),
        fields.get("num_samples"),
    )
    report.split, report.add_extra_token = name if isinstance(name, str) else group.split, 1
    return Described(fields.get("data_prefix"), None)


def _describe_mcore(
    group: names.CacheGroup, report: IndexReport, path: str, fields: dict[str, Any], add_extra_token: int | None
) -> Described:
    """megatron-core's description (``add_extra_token`` None: not recorded, inferred from the files later); a
    null split_matrix (blend_per_split) makes the split the whole .idx."""
    found = report.findings
    if fields.get("class") != "GPTDataset":
        found.append(finding(path, "description class", "GPTDataset", fields.get("class")))
    if fields.get("index_split") != group.split:
        found.append(
            finding(path, "description index_split", f"{group.split} (from the file names)", fields.get("index_split"))
        )
    numbers = {}
    for key, (low, high) in (("sequence_length", (1, 1 << 31)), ("random_seed", (0, 1 << 32))):  # (numpy's seeds)
        value = fields.get(key)
        numbers[key] = value if isinstance(value, int) and not isinstance(value, bool) and low <= value < high else None
        if numbers[key] is None:
            found.append(finding(path, f"description {key}", f"an integer in [{low}, {high})", repr(value)))
    matrix = fields.get("split_matrix")
    position = mcore_sem.SPLITS.index(group.split) if group.split in mcore_sem.SPLITS else -1
    bookends = (0.0, 1.0) if matrix is None else None
    if isinstance(matrix, list) and 0 <= position < len(matrix):
        pair = matrix[position]
        if not (
            isinstance(pair, list)
            and len(pair) == 2
            and all(type(v) in (int, float) and 0 <= v <= 1 for v in pair)
            and pair[0] <= pair[1]
        ):  # (NaN fails 0 <= v)
            found.append(
                finding(
                    path,
                    "description split_matrix",
                    f"bookends 0 <= start <= end <= 1 for the {group.split} split",
                    repr(pair),
                )
            )
        else:
            bookends = (float(pair[0]), float(pair[1]))
        found.extend(_split_findings(path, fields.get("split"), matrix))
    requested, prefix = fields.get("num_samples"), fields.get("dataset_path")
    report.seq_length, report.seed = numbers["sequence_length"], numbers["random_seed"]
    report.num_samples_requested = requested if isinstance(requested, int) else None
    report.add_extra_token = add_extra_token
    report.notes.extend(filter(None, [tokenizer_form_note(fields)]))
    return Described(prefix if isinstance(prefix, str) else None, bookends)


def _split_findings(path: str, split: Any, matrix: list[Any]) -> list[Finding]:
    """The description's split_matrix must be what megatron-core derives from its split string."""
    if not isinstance(split, str):
        return []
    try:
        mine: list[Any] | None = mcore_sem.split_matrix(split)
    except Exception:  # noqa: BLE001 - a damaged field is a finding
        mine = None

    def same(ours: Any, theirs: Any) -> bool:
        if ours is None or theirs is None:
            return ours is None and theirs is None
        return (
            isinstance(theirs, list)
            and len(theirs) == 2
            and all(type(t) in (int, float) and abs(o - t) <= 1e-9 for o, t in zip(ours, theirs))
        )

    if mine is not None and all(same(a, b) for a, b in zip(mine, matrix)):
        return []
    return [finding(path, "description split/split_matrix", f"split_matrix {mine} from split {split!r}", matrix)]


# ---- stage 2: the .npy headers ---------------------------------------------------------------------------


def check_dtype(info: NpyInfo, allowed: tuple[str, ...], ndim: int, role: str) -> CheckedHeader:
    """The header (None when the file cannot be read as an index at all) and the findings."""
    if info.dtype.kind not in "iu" or len(info.shape) != ndim:
        shape = "[N+1, 2]" if ndim == 2 else "[N]"
        problem = finding(
            info.path,
            f"{role} dtype/shape",
            f"an integer array of shape {shape} ({' or '.join(allowed)})",
            f"{info.dtype} of shape {list(info.shape)}",
            "not an index the frameworks write: delete it to rebuild",
        )
        return CheckedHeader(None, [problem])
    if ndim == 2 and info.shape[1] != 2:
        return CheckedHeader(None, [finding(info.path, "sample index shape", "[N+1, 2]", list(info.shape))])
    if info.dtype.name not in allowed:
        problem = finding(
            info.path,
            f"{role} dtype",
            " or ".join(allowed),
            info.dtype.name,
            "the frameworks write these dtypes; this file was written by something else or converted",
        )
        return CheckedHeader(info, [problem])
    return CheckedHeader(info, [])


def check_headers(group: names.CacheGroup, packed: bool) -> Headers:
    """The doc/sample/shuffle headers (None: not an index at all) and their findings: complete .npy files of
    the dtypes the frameworks write (NeoX's unpacked index: int64 document ids)."""
    doc, sample, shuffle = (read_header(group.files[role]) for role in names.GPT_ROLES)
    checked = [
        check_dtype(doc, ("int32",) if packed else ("int32", "int64"), 1, "document index"),
        check_dtype(sample, ("int32", "int64"), 2, "sample index"),
        check_dtype(shuffle, ("uint32", "int64"), 1, "shuffle index"),
    ]
    return Headers([c.info for c in checked], [problem for c in checked for problem in c.findings])
