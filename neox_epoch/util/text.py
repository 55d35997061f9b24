"""Plain-text tables for people, shared by the plan and audit reports (no dependency, log-file friendly)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def fmt(value: Any, float_digits: int | None = None) -> str:
    """One cell: None -> '-', bools yes/no, integers with thousands separators, floats to ``float_digits``."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,d}"
    if isinstance(value, float) and float_digits is not None:
        return f"{value:.{float_digits}f}"
    return str(value)


def table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], left: int = 0, indent: str = "", rule: bool = False
) -> list[str]:
    """Aligned lines of already formatted cells: the first ``left`` columns left-aligned, the rest right-aligned,
    with a dashed rule under the header when ``rule``."""
    widths = [max([len(h)] + [len(r[k]) for r in rows]) for k, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return indent + "  ".join(c.ljust(w) if k < left else c.rjust(w) for k, (c, w) in enumerate(zip(cells, widths)))

    out = [line(headers)]
    if rule:
        out.append(indent + "  ".join("-" * w for w in widths))
    out.extend(line(r) for r in rows)
    return out
