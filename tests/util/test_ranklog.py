"""The one rank-zero logging filter (neox_epoch.util.ranklog): records logged on a nonzero rank are dropped, unless
logged with ``extra=EVERY_RANK``; the rank comes from $RANK, else $LOCAL_RANK (torch.distributed is not initialized
in this process)."""

from __future__ import annotations

import logging
import sys

import pytest

from neox_epoch.util.ranklog import EVERY_RANK, RankZeroFilter, global_rank, is_rank_zero, rank_zero_logger


def _passed(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], name: str) -> list[str]:
    """The messages a rank-zero logger hands its handler under ``env`` (RANK / LOCAL_RANK)."""
    for key in ("RANK", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)
    # the rank from the environment: an earlier test of this session may have left torch.distributed initialized
    # in this process (rank 0 of one), which global_rank would read first
    monkeypatch.delitem(sys.modules, "torch.distributed", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    logger = rank_zero_logger(name)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    logger.addHandler(handler)
    try:
        logger.info("plan table")
        logger.warning("resume: %s", "batch changed")
        logger.info("built an index", extra=EVERY_RANK)
    finally:
        logger.removeHandler(handler)
    return seen


def test_rank_zero_passes_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _passed(monkeypatch, {"RANK": "0", "LOCAL_RANK": "0"}, "neox_epoch.test_ranklog.zero")
    assert seen == ["plan table", "resume: batch changed", "built an index"]


def test_nonzero_rank_keeps_only_every_rank_records(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _passed(monkeypatch, {"RANK": "1", "LOCAL_RANK": "1"}, "neox_epoch.test_ranklog.one")
    assert seen == ["built an index"]


def test_rank_from_local_rank_when_rank_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _passed(monkeypatch, {"LOCAL_RANK": "3"}, "neox_epoch.test_ranklog.local") == ["built an index"]
    assert global_rank() == 3 and not is_rank_zero()
    monkeypatch.setenv("RANK", "0")  # RANK wins over LOCAL_RANK
    assert global_rank() == 0 and is_rank_zero()


def test_unset_or_unreadable_rank_is_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    """No rank in the environment: a single process, rank 0; a value that is not a number never stops training."""
    seen = _passed(monkeypatch, {}, "neox_epoch.test_ranklog.none")
    assert seen == ["plan table", "resume: batch changed", "built an index"]
    monkeypatch.setenv("RANK", "abc")
    assert global_rank() == 0


def test_filter_added_once() -> None:
    name = "neox_epoch.test_ranklog.once"
    rank_zero_logger(name)
    rank_zero_logger(name)
    assert sum(isinstance(f, RankZeroFilter) for f in logging.getLogger(name).filters) == 1
