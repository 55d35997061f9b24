"""Writing the fixtures: the NeoX commit, library versions, the copied corpora and index files, the headline."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from typing import Any

import numpy as np

from golden.calls import CaseSpec
from golden.common import HEADLINE_CASE, MAX_CACHE_BYTES, MAX_COPY_BYTES, die
from golden.corpora import Corpus, file_sha1
from golden.neox_setup import Neox


def _git(*args: str) -> str:
    """Output of a git command, or "" when it fails."""
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def neox_commit(neox_dir: str, given: str | None) -> str:
    """The NeoX commit: as given, else from ``$NEOX_GIT_DIR`` or the checkout's own git, else "unknown"."""
    if given:
        return given
    if os.environ.get("NEOX_GIT_DIR"):
        out = _git(f"--git-dir={os.environ['NEOX_GIT_DIR']}", "rev-parse", "HEAD")
        if out:
            return out
    # Only trust the checkout's git if NEOX_DIR is the top of that work tree (not inside another repo).
    top = _git("-C", neox_dir, "rev-parse", "--show-toplevel")
    if top and os.path.realpath(top) == os.path.realpath(neox_dir):
        return _git("-C", neox_dir, "rev-parse", "HEAD") or "unknown"
    return "unknown"


def versions(neox: Neox) -> dict[str, str]:
    """Versions of the libraries the numbers came from."""
    import deepspeed

    return {
        "torch": neox.torch.__version__,
        "numpy": np.__version__,
        "deepspeed": deepspeed.__version__,
        "python": platform.python_version(),
    }


def copy_fixtures(out_dir: str, results: list[tuple[CaseSpec, dict[str, Corpus], str]]) -> dict[str, Any]:
    """Copy named corpora and the index files of the flagged cases into ``out_dir/neox_cache``."""
    cache = os.path.join(out_dir, "neox_cache")
    os.makedirs(cache)
    copied: list[str] = []
    skipped: list[str] = []

    def copy(src: str) -> None:
        dst = os.path.join(cache, os.path.basename(src))
        if os.path.getsize(src) > MAX_COPY_BYTES:
            skipped.append(os.path.basename(src))
            return
        if os.path.exists(dst):
            assert file_sha1(dst) == file_sha1(src), f"two different files named {os.path.basename(src)}"
            return
        shutil.copyfile(src, dst)
        copied.append(os.path.basename(src))

    for case, corpora, directory in results:
        if not case.copy_corpora:
            continue
        for corpus in corpora.values():
            copy(corpus.prefix + ".bin")
            copy(corpus.prefix + ".idx")
        if case.copy_index_files:
            for f in sorted(os.listdir(directory)):
                if "_indexmap_" in f and f.endswith(".npy"):
                    copy(os.path.join(directory, f))
    total = sum(os.path.getsize(os.path.join(cache, f)) for f in copied)
    if total > MAX_CACHE_BYTES:
        die(f"fixture cache would be {total} bytes, over {MAX_CACHE_BYTES}")
    return {"files": sorted(copied), "skipped_too_big": sorted(skipped), "bytes": total}


def headline(record: dict[str, Any]) -> dict[str, Any]:
    """Key numbers of the headline case."""
    (train,) = [d for d in record["datasets"] if d["name"] == "train_0"]
    (exp,) = record["exposure"]["sources"]
    p = record["params"]
    samples_one_epoch = (train["tokens_per_epoch"] - 1) // p["seq_length"]
    return {
        "case": HEADLINE_CASE,
        "tokens": train["tokens_per_epoch"],
        "seq_length": p["seq_length"],
        "train_batch_size": p["train_batch_size"],
        "samples_one_epoch": samples_one_epoch,
        "train_iters": p["train_iters"],
        "samples_consumed": record["num_samples"]["train"],
        "num_samples_requested": train["num_samples"],
        "epochs_built": train["epochs"],
        "len": train["len"],
        "fraction_unseen": exp["fraction_unseen"],
        "fraction_once": exp["fraction_once"],
        "fraction_twice": exp["fraction_twice"],
        "fraction_more": exp["fraction_more"],
        "histogram": exp["histogram"],
    }
