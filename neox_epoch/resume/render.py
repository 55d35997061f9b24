"""A :class:`~neox_epoch.resume.model.ResumeCheck` for people (text) and machines (JSON; the keys are documented in
docs/resume-check.md)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from neox_epoch.resume.model import ResumeCheck, SourceExposure


def to_json(rc: ResumeCheck) -> dict[str, Any]:
    """The machine-readable report (keys documented in docs/resume-check.md)."""
    seq = rc.new.plan.seq_length
    return {
        "checkpoint": rc.old.checkpoint.directory,
        "iteration": rc.old.checkpoint.iteration,
        "consumed_samples": rc.old.consumed,
        "consumed_how": rc.old.consumed_how,
        "old_train_batch_size": rc.old.train_batch_size,
        "new_train_batch_size": rc.new.shape.train_batch_size,
        "resumed_by": rc.who,
        "start_sample": rc.start.start,
        "start_how": rc.start.how,
        "skipped": list(rc.start.skipped) if rc.start.skipped else None,
        "repeated": list(rc.start.repeated) if rc.start.repeated else None,
        "sources": [
            {
                "name": s.name,
                "skipped_samples": s.skipped,
                "repeated_samples": s.repeated,
                "skipped_tokens": None if s.skipped is None else s.skipped * seq,
                "repeated_tokens": None if s.repeated is None else s.repeated * seq,
                "order_changed": s.skipped is None,
                "drawn_after_resume": s.drawn,
                "drawn_before": s.drawn_before,
                "first_item": s.first,
            }
            for s in rc.sources
        ],
        "exposure": {e.name: e.to_json() for e in rc.exposures} if rc.exposures else None,
        "valid": None
        if rc.valid is None
        else {
            "drawn": rc.valid.drawn,
            "start_sample": rc.valid.start,
            "continued_sample": rc.valid.continued,
            "how": rc.valid.how,
            "sources": [asdict(v) for v in rc.valid.sources],
        },
        "test": None if rc.test is None else {"start_sample": 0, "samples": rc.test.samples, "how": rc.test.how},
        "counters_at_resume": rc.counters_at_resume,
        "findings": list(rc.findings),
        "notes": list(rc.notes),
        "clean": not rc.findings,
    }


def render(rc: ResumeCheck) -> str:
    j = to_json(rc)
    seq = rc.new.plan.seq_length
    lines = [
        f"resume-check: {j['checkpoint']} (iteration {j['iteration']}) resumed with train_batch_size "
        f"{j['old_train_batch_size']} -> {j['new_train_batch_size']} ({rc.semantics} semantics)",
        f"  {rc.old.consumed_how}",
        f"  resumed by {rc.who}: {rc.start.how}",
    ]
    if rc.valid is not None:
        lines.append(
            f"  validation loader: starts at sample {rc.valid.start} (the saved run's evaluations drew "
            f"{rc.valid.drawn}): {rc.valid.how}"
        )
        lines += [
            f"    {v.name:<22} drew {v.drawn_before}; the resumed evaluations draw {v.resumed} (continuing: "
            f"{v.continued})"
            for v in rc.valid.sources
        ]
    if rc.test is not None:
        lines.append(f"  test loader: {rc.test.how}")
    if rc.sources:
        lines.append(
            f"  {'source':<24} {'skipped':>10} {'repeated':>10} {'drawn after':>12}   (samples; input "
            f"tokens = samples * seq_length {seq})"
        )
    for s in rc.sources:
        if s.skipped is None or s.repeated is None:
            lines.append(f"  {s.name:<24} {'-':>10} {'-':>10} {s.drawn:>12}   (its index is rebuilt in another order)")
        else:
            lines.append(
                f"  {s.name:<24} {s.skipped:>10} {s.repeated:>10} {s.drawn:>12}   ({s.skipped * seq} / "
                f"{s.repeated * seq} tokens)"
            )
    lines += _exposure_lines(rc.exposures)
    lines += [f"  finding: {f}" for f in rc.findings] + [f"  note: {n}" for n in rc.notes]
    lines.append(
        "  clean: the resume continues exactly" if not rc.findings else f"  {len(rc.findings)} finding(s): exit 1"
    )
    return "\n".join(lines)


def _exposure_lines(exposures: tuple[SourceExposure, ...]) -> list[str]:
    """Per source: tokens by times seen over the whole run, resumed against continued unchanged."""
    if not exposures:
        return []
    lines = [
        "  input tokens by times seen over the whole run (the audit's exposure of each train index): "
        "resumed | continued unchanged"
    ]
    for e in exposures:
        if e.resumed is None or e.continued is None:
            lines.append(f"  {e.name:<24} not computed: {e.note}")
            continue
        top = max(max(e.resumed.tokens, default=0), max(e.continued.tokens, default=0))
        cells = ", ".join(f"{t}x {e.resumed.tokens.get(t, 0)} | {e.continued.tokens.get(t, 0)}" for t in range(top + 1))
        lines.append(f"  {e.name:<24} {cells}" + (f"  ({e.note})" if e.note else ""))
    return lines
