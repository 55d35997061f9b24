"""A fingerprint of the training data, saved with a checkpoint and compared on resume.

Per source: the prefix's name (its last path component, so a moved corpus keeps its identity), the
.idx size in bytes, the document and token counts and the token dtype, read by
:mod:`neox_epoch.idx`; plus seq_length, seed and the stage plan (a plain mapping, e.g.
``StagesConfig.to_mapping()``). :func:`compare` lists what differs and :func:`message` says it in one
line. Pure and torch-free.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from neox_epoch.errors import ConfigError
from neox_epoch.formats.idx import range_token_sums, read_header

#: stored with every fingerprint; bump when a field's meaning changes
FORMAT = "neox_epoch.formats.fingerprint/1"
_SOURCE_FIELDS = ("idx_bytes", "documents", "tokens", "dtype")


@dataclass(frozen=True, kw_only=True, slots=True)
class SourceFingerprint:
    """What identifies one .bin/.idx source."""

    name: str
    """The prefix's last path component (``data/pile_text_document`` -> ``pile_text_document``)."""
    idx_bytes: int
    documents: int
    """Documents (``document_indices`` entries - 1), as GPT-NeoX and megatron-core count them."""
    tokens: int
    """Sum of the sequence sizes."""
    dtype: str

    @classmethod
    def of(cls, prefix: str) -> SourceFingerprint:
        """Read ``prefix.idx`` (and check ``prefix.bin``'s size) through :mod:`neox_epoch.idx`."""
        header = read_header(prefix)
        return cls(
            name=os.path.basename(header.prefix),
            idx_bytes=header.idx_bytes,
            documents=header.document_count - 1,
            tokens=range_token_sums(header, [(0, header.sequence_count)])[0],
            dtype=header.dtype,
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class DataFingerprint:
    """Sources in blend order, seq_length, seed and the stage plan."""

    sources: tuple[SourceFingerprint, ...]
    seq_length: int
    seed: int
    stages: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        names = [s.name for s in self.sources]
        for name in names:
            if names.count(name) > 1:
                raise ConfigError(
                    f"data fingerprint: two sources are named {name!r}; sources are told apart by the prefix's "
                    "last path component, rename one of the files"
                )
        object.__setattr__(self, "sources", tuple(self.sources))

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "sources": [{"name": s.name, **{f: getattr(s, f) for f in _SOURCE_FIELDS}} for s in self.sources],
            "seq_length": self.seq_length,
            "seed": self.seed,
            "stages": self.stages,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DataFingerprint:
        if data.get("format") != FORMAT:
            raise ConfigError(f"data fingerprint: format {data.get('format')!r}, expected {FORMAT!r}")
        return cls(
            sources=tuple(SourceFingerprint(**s) for s in data["sources"]),
            seq_length=int(data["seq_length"]),
            seed=int(data["seed"]),
            stages=data.get("stages"),
        )


def fingerprint(
    prefixes: Sequence[str], seq_length: int, seed: int, stages: Mapping[str, Any] | None = None
) -> DataFingerprint:
    """The fingerprint of a run's data: every prefix read from disk, plus the run's settings."""
    return DataFingerprint(
        sources=tuple(SourceFingerprint.of(p) for p in prefixes), seq_length=seq_length, seed=seed, stages=stages
    )


@dataclass(frozen=True, slots=True)
class Difference:
    """One thing that changed: ``what`` (e.g. ``source 'a' tokens``), the old and the new value."""

    what: str
    old: Any
    new: Any

    def __str__(self) -> str:
        def show(v: Any) -> str:
            return f"{v:,d}" if isinstance(v, int) and not isinstance(v, bool) else str(v)

        return f"{self.what} {show(self.old)} -> {show(self.new)}"


def compare(old: DataFingerprint, new: DataFingerprint) -> list[Difference]:
    """Everything that differs, sources first (in the old order, then added ones), then the settings."""
    diffs: list[Difference] = []
    new_by_name = {s.name: s for s in new.sources}
    old_names = [s.name for s in old.sources]
    for before in old.sources:
        after = new_by_name.get(before.name)
        if after is None:
            diffs.append(Difference(f"source {before.name!r}", "present", "removed"))
            continue
        for f in _SOURCE_FIELDS:
            if getattr(before, f) != getattr(after, f):
                diffs.append(Difference(f"source {before.name!r} {f}", getattr(before, f), getattr(after, f)))
    for after in new.sources:
        if after.name not in old_names:
            diffs.append(Difference(f"source {after.name!r}", "absent", "added"))
    if [n for n in old_names if n in new_by_name] != [s.name for s in new.sources if s.name in old_names]:
        diffs.append(Difference("source order", ",".join(old_names), ",".join(s.name for s in new.sources)))
    for f in ("seq_length", "seed"):
        if getattr(old, f) != getattr(new, f):
            diffs.append(Difference(f, getattr(old, f), getattr(new, f)))
    if old.stages != new.stages:
        diffs.append(_stage_difference(old.stages, new.stages))
    return diffs


def _stage_difference(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> Difference:
    """The first stage that differs (by position), or the cap, or the plan as a whole."""
    if old is None or new is None:
        return Difference("stage plan", "none" if old is None else "set", "none" if new is None else "set")
    old_stages, new_stages = list(old.get("stages") or []), list(new.get("stages") or [])
    for i in range(max(len(old_stages), len(new_stages))):
        before = old_stages[i] if i < len(old_stages) else None
        after = new_stages[i] if i < len(new_stages) else None
        if before != after:
            return Difference(f"stage {i + 1}", before, after)
    return Difference("max_passes", old.get("max_passes"), new.get("max_passes"))


def message(differences: Sequence[Difference]) -> str:
    """One line naming what changed since the checkpoint ("" when nothing did)."""
    if not differences:
        return ""
    return "the data changed since the checkpoint: " + "; ".join(str(d) for d in differences)
