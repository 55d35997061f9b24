"""Findings: a damaged, stale or inconsistent cache file becomes one of these, never a traceback."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

from neox_epoch.errors import FileProblem


class JsonFields:
    """A report dataclass whose JSON is its fields in order but those with ``repr=False`` (nested: their to_json)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]  # every subclass is a dataclass

    def to_json(self) -> dict[str, Any]:
        def plain(value: Any) -> Any:
            if isinstance(value, list):
                return [plain(item) for item in value]
            if isinstance(value, dict):
                return dict(value)
            return value.to_json() if hasattr(value, "to_json") else value

        return {item.name: plain(getattr(self, item.name)) for item in fields(self) if item.repr}


@dataclass(frozen=True)
class Finding(JsonFields):
    """One problem found in a cache file: where, what was checked, what was expected and what was found."""

    path: str  # The file (or cache group) the finding is about.
    what: str  # The check that failed, e.g. `"sample boundary"` or `"dtype"`.
    expected: str  # What a consistent cache would have.
    found: str  # What the file has.
    hint: str = ""  # What it probably means and what to do about it.

    @staticmethod
    def of(problem: FileProblem) -> Finding:
        return Finding(problem.path, problem.what, problem.expected, problem.found, problem.hint)

    def __str__(self) -> str:
        tail = f" ({self.hint})" if self.hint else ""
        return f"{self.path}: {self.what}: expected {self.expected}, found {self.found}{tail}"


def finding(path: str, what: str, expected: Any, found: Any, hint: str = "") -> Finding:
    return Finding(path=path, what=what, expected=str(expected), found=str(found), hint=hint)
