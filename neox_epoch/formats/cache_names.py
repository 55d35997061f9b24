"""Recognize index cache file names and group them into indexes (doc/sample/shuffle triples) and blends.

Three naming schemes:

- GPT-NeoX, next to the data:
  ``{prefix}_{name}_indexmap_{ns}ns_{sl}sl_{seed}s[_{pack_impl}pi[_ac]]_{doc,sample,shuffle}_idx.npy``
  where ``name`` is ``train``, ``valid``, ``test`` or ``train_0``, ``valid_1``, ... (so it may contain
  ``_``), and ``ns`` is ``None`` when NeoX builds by epochs (``train_epochs``).
- megatron-core, in ``path_to_cache`` or ``{prefix}/cache/GPTDataset_indices``:
  ``{md5}-GPTDataset-{split}-{description.txt,document_index.npy,sample_index.npy,shuffle_index.npy}``
  and ``{md5}-BlendedDataset-{split}-{description.txt,dataset_index.npy,dataset_sample_index.npy}``.
- legacy Megatron-LM, in ``index-cache`` or ``--data-cache-path``:
  ``{md5}.dsc``, ``{md5}_doc_idx.npy``, ``{md5}_sample_idx.npy``, ``{md5}_shuffle_idx.npy``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace

from neox_epoch.errors import AuditError
from neox_epoch.semantics.built import LEGACY, MCORE, NEOX  # noqa: F401 - the kinds of index, by framework

#: roles of the files of one GPT index (all schemes) and of one megatron-core blend
DOC, SAMPLE, SHUFFLE, DESCRIPTION = "doc", "sample", "shuffle", "description"
DATASET, DATASET_SAMPLE = "dataset", "dataset_sample"
GPT_ROLES = (DOC, SAMPLE, SHUFFLE)
BLEND_ROLES = (DATASET, DATASET_SAMPLE)

_NEOX_FILE = re.compile(r"^(?P<stem>.+)_(?P<role>doc|sample|shuffle)_idx\.npy$")
_NEOX_STEM = re.compile(
    r"^(?P<head>.+)_indexmap_(?P<ns>\d+|None)ns_(?P<sl>\d+)sl_(?P<seed>-?\d+)s"
    r"(?:_(?P<pi>[A-Za-z_]+?)pi(?P<ac>_ac)?)?$"
)
_NEOX_SPLIT_NAME = re.compile(r"^(?:train|valid|test)(?:_\d+)?$")
_MCORE_ROLES = {
    "description.txt": DESCRIPTION,
    "document_index.npy": DOC,
    "sample_index.npy": SAMPLE,
    "shuffle_index.npy": SHUFFLE,
    "dataset_index.npy": DATASET,
    "dataset_sample_index.npy": DATASET_SAMPLE,
}
_MCORE_FILE = re.compile(
    r"^(?P<md5>[0-9a-f]{32})-(?P<cls>[A-Za-z0-9_]+)-(?P<split>train|valid|test)-"
    f"(?P<role>{'|'.join(map(re.escape, _MCORE_ROLES))})$"
)
_LEGACY_FILE = re.compile(r"^(?P<md5>[0-9a-f]{32})(?:(?P<dsc>\.dsc)|_(?P<role>doc|sample|shuffle)_idx\.npy)$")


@dataclass(frozen=True)
class NeoxName:
    """The fields of a GPT-NeoX cache file name."""

    prefix: str  # The data prefix (path without .bin/.idx) the index was built from: the cache sits beside it.
    name: str  # NeoX's dataset name: `train`, `valid`, `test` or `train_0`, `valid_1`, ...
    num_samples: int | None  # `{ns}ns`: the samples NeoX asked the dataset for (None when it built by epochs).
    seq_length: int  # `{sl}sl`: the sequence length.
    seed: int  # `{seed}s`: the seed of the shuffles.
    pack_impl: str | None  # `{pack_impl}pi`: packed, pack_until_overflow or unpacked (None: older NeoX, always packed).
    allow_chopped: bool  # `_ac`: NeoX's allow_chopped flag.


@dataclass
class CacheGroup:
    """The files of one index (doc/sample/shuffle triple) or megatron-core blend pair (:func:`parse_name`: one file)."""

    kind: str  # `neox`, `megatron-core` or `megatron-legacy`.
    stem: str  # Common path of the files without the role suffix: files with the same stem belong together.
    files: dict[str, str]  # role (`doc`, `sample`, `shuffle`, `description`, `dataset`, `dataset_sample`) -> path.
    dataset_class: str = "GPTDataset"  # GPTDataset or BlendedDataset (megatron-core); GPTDataset for NeoX and legacy.
    split: str = ""  # Split or NeoX dataset name ('' for legacy until the .dsc is read).
    digest: str = ""  # The md5 of megatron-core and legacy names.
    neox: NeoxName | None = None  # NeoX name fields.

    @property
    def is_blend(self) -> bool:
        return self.dataset_class == "BlendedDataset"

    def missing_roles(self) -> list[str]:
        expected = (
            (DESCRIPTION, *BLEND_ROLES)
            if self.is_blend
            else GPT_ROLES
            if self.kind == NEOX
            else (DESCRIPTION, *GPT_ROLES)
        )
        return [role for role in expected if role not in self.files]


def _split_neox_head(directory: str, head: str) -> tuple[str, str]:
    """Split ``{prefix}_{name}`` into (prefix path, name); the name may contain ``_`` (train_0).

    Preference: a split where ``prefix.idx`` exists beside the cache, then a standard NeoX name
    (train/valid/test with an optional _N), then the longest prefix.
    """
    cuts = [at for at in range(1, len(head) - 1) if head[at] == "_"]
    if not cuts:
        return os.path.join(directory, head), ""
    cut = max(
        cuts,
        key=lambda at: (
            os.path.isfile(os.path.join(directory, head[:at] + ".idx")),
            bool(_NEOX_SPLIT_NAME.match(head[at + 1 :])),
            at,
        ),
    )
    return os.path.join(directory, head[:cut]), head[cut + 1 :]


def parse_name(path: str) -> CacheGroup | None:
    """Recognize one file name (a group of this one file); None if it is no index cache file."""
    directory, base = os.path.split(path)
    match = _MCORE_FILE.match(base)
    if match:
        stem = os.path.join(directory, f"{match['md5']}-{match['cls']}-{match['split']}")
        return CacheGroup(MCORE, stem, {_MCORE_ROLES[match["role"]]: path}, match["cls"], match["split"], match["md5"])
    match = _LEGACY_FILE.match(base)
    if match:
        return CacheGroup(
            LEGACY,
            os.path.join(directory, match["md5"]),
            {DESCRIPTION if match["dsc"] else match["role"]: path},
            digest=match["md5"],
        )
    match = _NEOX_FILE.match(base)
    fields = _NEOX_STEM.match(match["stem"]) if match else None
    if not match or not fields:
        return None
    prefix, name = _split_neox_head(directory, fields["head"])
    neox = NeoxName(
        prefix,
        name,
        None if fields["ns"] == "None" else int(fields["ns"]),
        int(fields["sl"]),
        int(fields["seed"]),
        fields["pi"],
        bool(fields["ac"]),
    )
    return CacheGroup(NEOX, os.path.join(directory, match["stem"]), {match["role"]: path}, split=name, neox=neox)


def group_files(files: list[CacheGroup]) -> list[CacheGroup]:
    """Merge the files of :func:`parse_name` by stem, in a stable order (by stem)."""
    groups: dict[str, CacheGroup] = {}
    for file in files:
        groups.setdefault(file.stem, replace(file, files={})).files.update(file.files)
    return [groups[stem] for stem in sorted(groups)]


def _walk(directory: str) -> list[str]:
    found: list[str] = []
    for root, directories, files in os.walk(directory):
        directories.sort()
        found.extend(os.path.join(root, name) for name in sorted(files))
    return found


def _beside(prefix: str) -> list[str]:
    """The files of a data prefix: NeoX's beside it, megatron-core's ``prefix/cache``, legacy ``index-cache``."""
    directory, base = os.path.dirname(prefix) or ".", os.path.basename(prefix.rstrip("/"))
    if not os.path.isdir(directory):
        raise AuditError(f"{prefix}: no such file, directory or data prefix")
    found = [os.path.join(directory, name) for name in sorted(os.listdir(directory)) if name.startswith(base + "_")]
    found += _walk(os.path.join(prefix, "cache")) + _walk(os.path.join(directory, "index-cache"))  # (none: [])
    if not found:
        raise AuditError(
            f"{prefix}: no such file or directory, and no index cache files start with this prefix; "
            "give a cache file, a directory to search, or a data prefix"
        )
    return found


def discover(paths: list[str]) -> list[CacheGroup]:
    """Find the cache files under ``paths``: files, directories (searched recursively) or data prefixes.

    A data prefix ``P`` finds NeoX files ``P_*_indexmap_*`` beside it, megatron-core's default cache
    directory ``P/cache`` and a legacy ``index-cache`` directory beside it. Raises :class:`AuditError`
    for a path that is none of these or when nothing is found at all.
    """
    found: dict[str, CacheGroup] = {}
    for path in paths:
        candidates = _walk(path) if os.path.isdir(path) else [path] if os.path.isfile(path) else _beside(path)
        for candidate in candidates:
            parsed = parse_name(candidate)
            if parsed is not None:
                found[os.path.realpath(candidate)] = parsed
    if not found:
        raise AuditError(
            f"no index cache files found under {', '.join(paths)}; expected NeoX *_indexmap_*_idx.npy, "
            "megatron-core {md5}-GPTDataset-* / {md5}-BlendedDataset-* or legacy {md5}_doc_idx.npy files"
        )
    return group_files(list(found.values()))
