"""``resume-check --exposure``: how often each token of each source is an input token in the run as resumed,
against the same draws continuing where the saved run stopped, from the audit's own exposure computation.

A source of a GPT-NeoX run draws the items of its train index in order: the saved run items
``0 .. drawn_before - 1``, the resumed run items ``first .. first + drawn - 1`` (a skip when ``first`` is past
``drawn_before``, a repeat when before it). The audit counts the input tokens of those items in the index
files the run builds (:func:`neox_epoch.audit.validate.audit_index`); continuing unchanged would draw items
``0 .. drawn_before + drawn - 1``. Sources whose index is rebuilt in another order get no exposure: positions
there name other samples.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from neox_epoch.audit import names
from neox_epoch.audit.consumption import Consumption
from neox_epoch.audit.exposure import ExposureReport
from neox_epoch.audit.findings import AuditError
from neox_epoch.audit.validate import audit_index

if TYPE_CHECKING:
    from neox_epoch.resume_check import NewRun, SourceDelta


@dataclass(frozen=True)
class SourceExposure:
    """One source's token exposure over the whole run, as resumed and as continued unchanged."""

    name: str
    index: str | None
    """The train index (NeoX's file stem) the counts come from; None when not computed."""
    resumed: ExposureReport | None
    """The saved run's draws plus the resumed run's (the skip or repeat included)."""
    continued: ExposureReport | None
    """The saved run's draws plus as many more continuing exactly where it stopped."""
    note: str = ""
    """Why there are no counts, or what the audit said about the index."""

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "resumed": self.resumed.to_json() if self.resumed else None,
                "continued": self.continued.to_json() if self.continued else None, "note": self.note}


def _index(new: NewRun, key: str, prefix: str) -> names.CacheGroup | None:
    """The NeoX train index the run builds for this source (its name carries the samples asked, seq_length and
    seed), when it is on disk."""
    build = new.builds[key]
    try:
        groups = names.discover([prefix])
    except AuditError:
        return None
    return next((g for g in groups if g.kind == names.NEOX and g.neox is not None and g.split == key
                 and g.neox.num_samples == build.num_samples and g.neox.seq_length == new.plan.seq_length
                 and g.neox.seed == new.seed), None)


def _exposure(group: names.CacheGroup, prefixes: list[tuple[int, int]]) -> tuple[ExposureReport | None, str]:
    def consumption(split: str, length: int) -> Consumption:
        return Consumption.from_prefixes(length, prefixes)

    report = audit_index(group, consumption_for=consumption)
    said = "; ".join([str(f) for f in report.findings] + report.notes)
    return report.exposure, said


def source_exposures(new: NewRun, sources: tuple[SourceDelta, ...]) -> tuple[SourceExposure, ...]:
    """Per source, the audit's exposure of its train index for the resumed and the continued draws."""
    train = [s for s in new.plan.sources if s.split == "train"]
    out = []
    for key, plan, delta in zip(new.builds, train, sources):
        if delta.skipped is None:
            out.append(SourceExposure(delta.name, None, None, None, "its index is rebuilt in another order"))
            continue
        group = _index(new, key, plan.prefix)
        if group is None:
            out.append(SourceExposure(delta.name, None, None, None, f"no {key} index for {new.builds[key].num_samples}"
                                      f" samples beside {plan.prefix} (the run builds it at its data build)"))
            continue
        resumed, said = _exposure(group, [(delta.drawn_before, 1), (delta.first + delta.drawn, 1), (delta.first, -1)])
        continued, _ = _exposure(group, [(delta.drawn_before + delta.drawn, 1)])
        out.append(SourceExposure(delta.name, os.path.basename(group.stem), resumed, continued, said))
    return tuple(out)
