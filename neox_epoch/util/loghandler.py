"""A stdout handler for neox-epoch's logger in framework workers that configure no logging."""

from __future__ import annotations

import logging
import sys


def ensure_log_handler() -> None:
    """Give the ``neox_epoch`` logger a stdout handler at INFO (the plan table) and a stderr handler for warnings
    (e.g. a run log that cannot be written: stderr is what schedulers keep apart), unless logging is configured."""
    logger = logging.getLogger("neox_epoch")
    if logger.handlers or logging.getLogger().handlers:
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.INFO)
        return
    handler = logging.StreamHandler(sys.stdout)
    handler.addFilter(lambda record: record.levelno < logging.WARNING)
    warnings = logging.StreamHandler(sys.stderr)
    warnings.setLevel(logging.WARNING)
    for h in (handler, warnings):
        h.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(h)
    logger.setLevel(logging.INFO)
    logger.propagate = False  # the framework may configure the root logger later: print once
