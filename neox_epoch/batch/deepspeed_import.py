"""Importing DeepSpeed's modules (and with them torch) quietly, only when a function needs them."""

from __future__ import annotations

import contextlib
import importlib
import logging
import sys
from collections.abc import Iterator
from types import ModuleType

from neox_epoch.errors import MissingPackageError


def import_deepspeed(name: str = "deepspeed") -> ModuleType:
    """Import a DeepSpeed module without its import-time chatter.

    DeepSpeed's logger binds ``sys.stdout`` when it is created (``--json`` prints there), so the first
    import runs with stdout sent to stderr, and records below ERROR (the accelerator detection
    warning) are dropped while importing.
    """
    ds_logger = logging.getLogger("DeepSpeed")

    def errors_only(record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR

    ds_logger.addFilter(errors_only)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name not in ("deepspeed", "torch"):
            raise
        raise MissingPackageError(
            f"{err.name} is not installed for {sys.executable}: this asks DeepSpeed's own launcher and config code "
            "(which imports torch); install them (pip install torch==2.13.0 deepspeed, or neox-epoch's [deepspeed] "
            "extra) or run it where your training runs"
        ) from None
    finally:
        ds_logger.removeFilter(errors_only)


@contextlib.contextmanager
def quiet_deepspeed() -> Iterator[None]:
    """Keep DeepSpeed's logger below CRITICAL while we call its functions (we report in our words)."""
    logger = import_deepspeed("deepspeed.utils").logger
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def deepspeed_runner() -> ModuleType:
    """``deepspeed.launcher.runner`` (imports torch)."""
    return import_deepspeed("deepspeed.launcher.runner")


def deepspeed_version() -> str:
    """The installed DeepSpeed's version string."""
    return str(import_deepspeed("deepspeed").__version__)
