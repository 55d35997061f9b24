"""Log on rank 0 only, in one place: the process's global rank, and a :class:`logging.Filter` that drops the records
of every other rank.

The rank is torch.distributed's when it is initialized (looked up in ``sys.modules``: this module never imports
torch), else ``$RANK``, else ``$LOCAL_RANK``, else 0. A record that every rank must log (what one rank did on its own,
e.g. an index file it built) passes with ``extra=EVERY_RANK``.
"""

from __future__ import annotations

import logging
import os
import sys

#: ``log.info(..., extra=EVERY_RANK)``: the record passes :class:`RankZeroFilter` on every rank
EVERY_RANK = {"every_rank": True}


def global_rank() -> int:
    """torch.distributed's rank when it is initialized, else ``$RANK``, else ``$LOCAL_RANK``, else 0."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():  # type: ignore[attr-defined]
        return int(dist.get_rank())  # type: ignore[attr-defined]
    for name in ("RANK", "LOCAL_RANK"):
        value = os.environ.get(name, "").strip()
        if value.lstrip("-").isdigit():
            return int(value)
    return 0


def is_rank_zero() -> bool:
    """Whether this process is the one that logs and writes (global rank 0)."""
    return global_rank() == 0


class RankZeroFilter(logging.Filter):
    """Passes a record on rank 0, and on any rank when it was logged with ``extra=EVERY_RANK``."""

    def filter(self, record: logging.LogRecord) -> bool:
        return bool(getattr(record, "every_rank", False)) or is_rank_zero()


def rank_zero_logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)`` with a :class:`RankZeroFilter` (added once). A logger's filters see only the
    records logged on it, so each logger that logs on rank 0 only is set up through this function."""
    logger = logging.getLogger(name)
    if not any(isinstance(f, RankZeroFilter) for f in logger.filters):
        logger.addFilter(RankZeroFilter())
    return logger
