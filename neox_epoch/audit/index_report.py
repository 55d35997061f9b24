"""What the audit of one index reports (:class:`IndexReport`), and the hints its findings share."""

from __future__ import annotations

from dataclasses import dataclass, field

from neox_epoch.audit.exposure import ExposureReport
from neox_epoch.audit.findings import Finding, JsonFields

STALE_HINT = (
    "the cache was built from another version of the corpus or with another seq_length/split: "
    "delete these index files so the framework rebuilds them (NeoX reuses files by name alone)"
)
DIVERGENCE = "first divergence: " + STALE_HINT
MIXED = "doc/sample/shuffle files come from different builds: " + STALE_HINT


@dataclass
class IndexReport(JsonFields):
    """What one index is, as audited. JSON keys are the field names but digest (see docs/audit.md)."""

    kind: str
    path: str
    split: str
    files: dict[str, str] = field(default_factory=dict)
    data_prefix: str | None = None
    seq_length: int | None = None
    seed: int | None = None
    num_samples_requested: int | None = None
    epochs: int | None = None
    samples: int | None = None
    samples_per_epoch: int | None = None
    length: int | None = None
    separated_final_epoch: bool | None = None
    documents: int | None = None
    document_range: list[int] | None = None
    tokens: int | None = None
    add_extra_token: int | None = None
    pack_impl: str | None = None
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    exposure: ExposureReport | None = None
    digest: str = field(default="", repr=False)
