"""A stdout handler for neox-epoch's logger in framework workers that configure no logging."""

from __future__ import annotations

import logging
import sys


def ensure_log_handler() -> None:
    """Give the ``neox_epoch`` logger a stdout handler at INFO unless logging is configured already."""
    logger = logging.getLogger("neox_epoch")
    if logger.handlers or logging.getLogger().handlers:
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.INFO)
        return
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False  # the framework may configure the root logger later: print once
