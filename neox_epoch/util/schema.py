"""The version stamp of every JSON neox-epoch writes: its command outputs (``--json``, ``launch --dry-run``) and
the header records of its run logs (``plan``, ``resume``), which outlive the tool that wrote them.

``version`` is the neox-epoch that wrote it; ``schema`` numbers the meaning of the keys, for all outputs at once:
it is raised when a key is removed, renamed or changes meaning, never for an added key. A record without
``schema`` was written before the stamp existed: :data:`UNSTAMPED` (read as schema 1 reads, nothing removed).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from neox_epoch import __version__
from neox_epoch.errors import NeoxEpochError

#: the schema of the JSON this version writes
SCHEMA = 1
#: the schema of a record written before neox-epoch stamped its JSON (no ``schema`` key)
UNSTAMPED = 0


def stamp() -> dict[str, Any]:
    """``{"version": ..., "schema": ...}``: the keys every JSON output starts with."""
    return {"version": __version__, "schema": SCHEMA}


def stamped(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` with the stamp first (its own keys after, unchanged)."""
    return {**stamp(), **obj}


def read_stamp(
    record: Mapping[str, Any], where: str, error: type[NeoxEpochError] = NeoxEpochError
) -> tuple[int, str | None]:
    """``(schema, version)`` of a record read back (``(UNSTAMPED, None)`` without a stamp); a stamp of another type
    raises ``error`` naming ``where`` (the file and line)."""
    schema, version = record.get("schema", UNSTAMPED), record.get("version")
    if isinstance(schema, bool) or not isinstance(schema, int) or (schema < 1 and "schema" in record):
        raise error(f'{where}: "schema": expected an integer >= 1 (the JSON format version), found {schema!r}')
    if version is not None and not isinstance(version, str):
        raise error(f'{where}: "version": expected the neox-epoch version that wrote it (a string), found {version!r}')
    return schema, version


def describe(schema: int, version: str | None) -> str:
    """How the report names what it read: ``schema 1 (neox-epoch 0.1.0)``, and the two special cases."""
    if schema == UNSTAMPED:
        return f"schema {UNSTAMPED} (no version field: written before neox-epoch stamped its JSON)"
    writer = f"neox-epoch {version}" if version else "an unnamed version"
    if schema > SCHEMA:
        return (
            f"schema {schema} ({writer}, newer than this neox-epoch {__version__}, which reads schema <= {SCHEMA}: "
            "keys may have changed meaning; upgrade neox-epoch to read it)"
        )
    return f"schema {schema} ({writer})"
