"""Fault suite, overwrite: no writer replaces an input of its command or a data/index file.

Each case runs the real CLI with OUT naming an input (as written, through ``./``, a symlink or a hard link) or
a file with a data suffix, and asserts exit 2, the one-line message naming the option, and that every file of
the work tree (inputs, data, caches, run logs) is unchanged: type, mode, inode and sha256.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from faults_util import (
    audit_json,
    batch_config,
    cli,
    corpus,
    neox_cache,
    plan_config,
    refused,
    run_log,
    tree,
)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Inputs of every writer in one directory: a corpus and a NeoX config over it, a check-batch config and its
    hostfile, a NeoX index cache, a run log and an audit JSON; symlinks and hard links to some of them."""
    d = str(tmp_path_factory.mktemp("overwrite"))
    prefix = corpus(os.path.join(d, "data"))
    w = {"dir": d, "prefix": prefix, "config": plan_config(d, prefix)}
    w["batch"], w["hostfile"] = batch_config(d)
    w["cache"] = neox_cache(d)
    w["log"] = run_log(d)
    w["audit"] = audit_json(d, w["cache"])
    w["doc_idx"] = next(
        os.path.join(w["cache"], n) for n in sorted(os.listdir(w["cache"])) if n.endswith("_doc_idx.npy")
    )
    os.symlink(w["audit"], os.path.join(d, "linked_audit.html"))
    os.link(os.path.join(w["log"], "neox_epoch.jsonl"), os.path.join(d, "hardlinked_log.html"))
    os.link(w["doc_idx"], os.path.join(d, "hardlinked_doc_idx.csv"))
    os.link(w["config"], os.path.join(d, "hardlinked_config.yml"))
    os.link(w["hostfile"], os.path.join(d, "hardlinked_hosts.yml"))
    return w


def unchanged(work: dict[str, str], args: list[str], command: str, *needles: str, cwd: str | None = None) -> str:
    """Run ``args``: refused in one line with ``needles``, and nothing under the work directory changed."""
    before = tree(work["dir"])
    line = refused(cli(args, cwd=cwd), command, *needles)
    assert tree(work["dir"]) == before
    return line


CASES = {
    # report --html: over its run log (suffix), its hard link (inode), its --audit input, a symlink to it
    "report-html-runlog": (
        ["report", "{log}", "--html", "{log}/neox_epoch.jsonl"],
        "report",
        ["--html", "a .jsonl file is a run log", "report.html"],
    ),
    "report-html-hardlinked-runlog": (
        ["report", "{log}", "--html", "{dir}/hardlinked_log.html"],
        "report",
        ["--html", "read from the run log", "writing it would overwrite"],
    ),
    "report-html-audit-input": (
        ["report", "{log}", "--audit", "{audit}", "--html", "{audit}"],
        "report",
        ["--html", "is the --audit input", "write to another file"],
    ),
    "report-html-symlink-to-audit": (
        ["report", "{log}", "--audit", "{audit}", "--html", "{dir}/linked_audit.html"],
        "report",
        ["--html", "is the --audit input"],
    ),
    # audit --manifest / --plot: over the tokenized data's index, a cache file, a hard link to the index
    "audit-manifest-idx": (
        ["audit", "{cache}", "--consumed", "40", "--manifest", "{prefix}.idx"],
        "audit",
        ["--manifest", "a .idx file is a tokenized dataset's index", "manifest.csv"],
    ),
    "audit-manifest-doc-idx": (
        ["audit", "{cache}", "--consumed", "40", "--manifest", "{doc_idx}"],
        "audit",
        ["--manifest", "a .npy file is an index cache"],
    ),
    "audit-manifest-cache-file-by-inode": (
        ["audit", "{cache}", "--consumed", "40", "--manifest", "{dir}/hardlinked_doc_idx.csv"],
        "audit",
        ["--manifest", "an audited", "writing it would overwrite"],
    ),
    "audit-plot-npy": (
        ["audit", "{cache}", "--consumed", "40", "--plot", "{doc_idx}"],
        "audit",
        ["--plot", "a .npy file is an index cache"],
    ),
    # plan --write-config: over an index, the input config (by ./ and by a hard link)
    "plan-write-config-idx": (
        ["plan", "{config}", "--write-config", "{prefix}.idx"],
        "plan",
        ["--write-config", "a .idx file"],
    ),
    "plan-write-config-input-dot": (
        ["plan", "run.yml", "--write-config", "./run.yml"],
        "plan",
        ["--write-config", "is the input config"],
    ),
    "plan-write-config-input-hardlink": (
        ["plan", "{config}", "--write-config", "{dir}/hardlinked_config.yml"],
        "plan",
        ["--write-config", "is the input config"],
    ),
    # check-batch --fix: over the hostfile (given and by a hard link), over the config
    "check-batch-fix-hostfile": (
        ["check-batch", "{batch}", "--hostfile", "{hostfile}", "--fix", "{hostfile}"],
        "check-batch",
        ["--fix", "is the hostfile"],
    ),
    "check-batch-fix-config-hostfile-by-inode": (
        ["check-batch", "{batch}", "--fix", "{dir}/hardlinked_hosts.yml"],
        "check-batch",
        ["--fix", "is the hostfile"],
    ),
    "check-batch-fix-config": (
        ["check-batch", "{batch}", "--fix", "{batch}"],
        "check-batch",
        ["--fix", "is the input config"],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_writer_refuses_its_input_or_data(work: dict[str, str], case: str) -> None:
    args, command, needles = CASES[case]
    unchanged(work, [a.format(**work) for a in args], command, *needles, cwd=work["dir"])


def test_a_written_output_is_not_refused(work: dict[str, Any], tmp_path: Any) -> None:
    """The policy refuses inputs, not outputs: writing the same OUT twice works (the second replaces the first)."""
    out = str(tmp_path / "report.html")
    for _ in range(2):
        code, _, err = cli(["report", work["log"], "--html", out])
        assert code == 0, err
    assert open(out, encoding="utf-8").read().startswith("<!DOCTYPE html>")
