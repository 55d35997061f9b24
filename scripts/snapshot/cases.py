"""The cases: every input written into the work directory and the command lines run on them."""

from __future__ import annotations

from typing import Any

from snapshot.command_cases import (
    audit_cases,
    check_batch_cases,
    report_cases,
    resume_mcore,
    resume_state,
    resume_stock,
)
from snapshot.common import corpus_writers
from snapshot.plan_cases import plan_golden, plan_megatron, plan_pasted, plan_shipped, plan_sized_and_bad


def build_inputs(work: str, env: dict[str, str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Write every input into ``work`` and return (cases, notes). A case: name, argv (after ``neox_epoch.cli``),
    files (paths relative to ``work`` the command writes, recorded after it ran), after (cases it reads)."""
    write_random_corpus, write_sized_corpus, write_demo_corpus = corpus_writers()
    notes: dict[str, Any] = {}
    cases: list[dict[str, Any]] = []

    def case(name: str, argv: list[str], files: tuple[str, ...] = ()) -> None:
        cases.append({"name": name, "argv": argv, "files": list(files)})

    plan_shipped(work, case, write_demo_corpus)
    plan_golden(work, case, write_random_corpus)
    plan_megatron(work, case)
    plan_pasted(work, case)
    plan_sized_and_bad(work, case, write_sized_corpus)
    notes["megatron_core_cache"] = audit_cases(work, case, write_random_corpus, env)
    resume_stock(work, case, write_random_corpus)
    resume_state(work, case, write_random_corpus)
    resume_mcore(work, case)
    check_batch_cases(work, case)
    report_cases(work, case)
    return cases, notes
