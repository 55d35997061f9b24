"""Shared fixtures: tiny real .bin/.idx corpora written with the same layout the frameworks read.

Also the framework markers (``neox``, ``megatron_lm``: the test runs a real framework found through
tests/helpers/frameworks.py): under ``CI=true`` such a test that skips is reported as a failure, and the terminal
summary ends with one line per framework saying how many of its tests ran, passed and skipped.

And the stacks (scripts/test.sh runs the suite on each): ``neox`` (Python 3.11, numpy<2, megatron-core 0.16.1,
as GPT-NeoX pins) and ``today`` (Python 3.12, numpy 2, megatron-core 0.19.2). A test that belongs to one stack
carries ``@pytest.mark.stack("neox", reason=...)``; GPT-NeoX's own tests (marker ``neox``) belong to the neox
stack. On the other stack such a test is deselected, not skipped, and the summary says how many and why.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Generator

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: one OpenMP thread per process, inherited by every launch the tests start (NeoX's and Megatron-LM's ranks, the
#: DeepSpeed example): two gloo ranks with torch's default of one thread per core oversubscribe a 2-core machine, and
#: beside another busy process NeoX's 3-source blend launch took 361 s instead of 45 s (1300 ms a step against 35)
os.environ.setdefault("OMP_NUM_THREADS", "1")
#: the checkout (the package) and the helpers (tests/helpers: shared test code, probes, the CPU test doubles)
for _path in (ROOT, os.path.join(ROOT, "tests", "helpers")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from optional import in_ci  # noqa: E402

from neox_epoch.formats.corpus import write_corpus, write_random_corpus  # noqa: E402

#: the framework marker family: marker name -> what the tests run
FRAMEWORKS = {"neox": "GPT-NeoX", "megatron_lm": "Megatron-LM"}
#: per framework marker, the outcome of each of its tests (nodeid -> "passed" | "failed" | "skipped")
_OUTCOMES: dict[str, dict[str, str]] = {name: {} for name in FRAMEWORKS}
#: per framework marker, the tests whose body ran to its end or failed (not skipped)
_RAN: dict[str, set[str]] = {name: set() for name in FRAMEWORKS}
_WORST = {"passed": 0, "skipped": 1, "failed": 2}


#: why GPT-NeoX's tests run on the neox stack only
NEOX_STACK_REASON = "GPT-NeoX ea7aefd8 pins numpy<2 (its venv is Python 3.11): its tests run on the neox stack"
_DESELECTED: dict[str, int] = {}


def current_stack() -> str:
    """The stack this run is: NEOX_EPOCH_STACK (scripts/test.sh sets it), else "today" from Python 3.12 on."""
    return os.environ.get("NEOX_EPOCH_STACK") or ("today" if sys.version_info >= (3, 12) else "neox")


def _stack_of(item: pytest.Item) -> tuple[str, str] | None:
    """(stack, reason) for a test that runs on one stack only, else None."""
    mark = item.get_closest_marker("stack")
    if mark is not None:
        return str(mark.args[0]), str(mark.kwargs.get("reason", ""))
    if item.get_closest_marker("neox") is not None:
        return "neox", NEOX_STACK_REASON
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the tests that belong to the other stack (counted per reason for the summary)."""
    here = current_stack()
    keep, drop = [], []
    for item in items:
        own = _stack_of(item)
        if own is None or own[0] == here:
            keep.append(item)
        else:
            drop.append(item)
            key = f"{own[0]} stack only: {own[1]}"
            _DESELECTED[key] = _DESELECTED.get(key, 0) + 1
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _frameworks_of(item: pytest.Item) -> list[str]:
    """The framework markers on ``item``."""
    return [name for name in FRAMEWORKS if item.get_closest_marker(name) is not None]


def _skip_reason(report: pytest.TestReport) -> str:
    """The message of a skipped report."""
    if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    return str(report.longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, None, None]:
    """Under CI=true a framework test that skips fails instead; record each framework test's outcome."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    names = _frameworks_of(item)
    if not names:
        return
    skipped = report.skipped
    if skipped and not hasattr(report, "wasxfail") and in_ci():
        reason = _skip_reason(report)
        report.outcome = "failed"
        report.longrepr = (
            f"CI=true: this {' / '.join(FRAMEWORKS[n] for n in names)} test skipped ({reason}); "
            "under CI every framework test must run: make the framework available "
            "(see tests/helpers/frameworks.py)"
        )
    state = "failed" if report.failed else "skipped" if report.skipped else "passed"
    ran = report.when == "call" and not skipped
    for name in names:
        seen = _OUTCOMES[name].get(item.nodeid, "passed")
        _OUTCOMES[name][item.nodeid] = max(seen, state, key=_WORST.__getitem__)  # setup, call, teardown: the worst
        if ran:
            _RAN[name].add(item.nodeid)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line per framework: how many of its tests there were, ran (not skipped), passed, failed and skipped;
    then the stack and what it deselected."""
    for name, label in FRAMEWORKS.items():
        states = list(_OUTCOMES[name].values())
        passed, failed, skipped = (states.count(s) for s in ("passed", "failed", "skipped"))
        terminalreporter.write_line(
            f"framework {name} ({label}): {len(states)} tests, {len(_RAN[name])} ran, {passed} passed, "
            f"{failed} failed, {skipped} skipped" + (" (CI=true: skips fail)" if in_ci() else "")
        )
    import numpy

    terminalreporter.write_line(f"stack {current_stack()}: Python {sys.version.split()[0]}, numpy {numpy.__version__}")
    for why, n in sorted(_DESELECTED.items()):
        terminalreporter.write_line(f"  deselected {n} test{'s' if n != 1 else ''} ({why})")


@pytest.fixture
def corpus(tmp_path):
    """Factory: corpus(name, seed, docs, min_len, max_len) -> prefix of a fresh random corpus."""

    def make(name: str, seed: int = 0, docs: int = 50, min_len: int = 1, max_len: int = 200) -> str:
        prefix = str(tmp_path / name)
        write_random_corpus(prefix, seed, docs, min_len, max_len)
        return prefix

    return make


@pytest.fixture
def fixed_corpus(tmp_path):
    """Factory: fixed_corpus(name, lengths) -> prefix of a corpus with the given document lengths."""
    import numpy as np

    def make(name: str, lengths: list[int]) -> str:
        prefix = str(tmp_path / name)
        write_corpus(prefix, [np.arange(n, dtype=np.int64) % 50000 for n in lengths])
        return prefix

    return make
