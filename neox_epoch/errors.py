"""The project's one error hierarchy.

Every error a user can cause derives from :class:`NeoxEpochError`. Messages name the file or config
key, the value found, what was expected and the fix, so the CLI can print them as one line and exit 2.
"""

from __future__ import annotations


class NeoxEpochError(Exception):
    """Base class of every error neox-epoch raises on bad input. The CLI maps it to exit code 2."""

    exit_code: int = 2


class ConfigError(NeoxEpochError):
    """A config file, config key or command-line value is missing, unknown or of the wrong type."""


class IndexFileError(NeoxEpochError):
    """A .bin/.idx pair (MMIDIDX) is missing, truncated or inconsistent."""


class AuditError(NeoxEpochError):
    """A usage error of ``neox-epoch audit`` (bad path, bad option, missing optional dependency)."""


class FileProblem(NeoxEpochError):
    """A cache file that cannot be read as expected (the audit of one index turns it into a finding and goes on to
    the others): the file, the check, what was expected and found, and what it probably means."""

    def __init__(self, path: str, what: str, expected: str, found: str, hint: str = "") -> None:
        super().__init__(f"{path}: {what}: expected {expected}, found {found}")
        self.path, self.what, self.expected, self.found, self.hint = path, what, expected, found, hint


class OutputError(NeoxEpochError):
    """A file a command was asked to write cannot or may not be written (an input, data, a special file, a
    full or read-only disk): neox_epoch.util.output."""


class PlanError(NeoxEpochError):
    """The requested plan cannot be computed (empty split, impossible exact target, ...)."""


class BatchError(NeoxEpochError):
    """Batch sizes disagree with the world the launcher will start."""


class MissingPackageError(NeoxEpochError):
    """A command needs an optional package (deepspeed, torch, megatron-core) that is not installed."""


def did_you_mean(word: str, choices: list[str] | tuple[str, ...] | set[str]) -> str:
    """Return ' (did you mean "x"?)' for the closest choice, or '' when none is close."""
    import difflib

    close = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.6)
    return f' (did you mean "{close[0]}"?)' if close else ""


class DataChangedError(PlanError):
    """A resume finds other data than the checkpoint was trained on (its data fingerprint differs)."""
