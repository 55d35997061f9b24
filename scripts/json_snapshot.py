"""Snapshot the JSON every neox-epoch command prints on deterministic corpora, and compare two snapshots.

Written to prove a restructure of the package changes no behaviour: run it on the code before, run it on the
code after, compare; every case must be identical.

    python scripts/json_snapshot.py OUT_DIR                 # write OUT_DIR/<case>.json and OUT_DIR/index.json
    python scripts/json_snapshot.py --compare A_DIR B_DIR   # identical/different per case; exit 1 if any differ

Only the command-line surface is exercised: each case runs ``python -m neox_epoch.cli ...`` in a subprocess
(the interpreter running this script, with this checkout's root first on PYTHONPATH) and records its exit code,
its stdout (exactly as printed), its stderr (kept apart from stdout: the one-line errors and the --fix notes)
and the contents of any file the command writes (``--write-config``, ``--fix``, ``--manifest``). All of it is
compared. The package itself is imported only in
:func:`corpus_writers` (the tokenized-corpus writers, looked up where they live before and after the
restructure). Inputs the package does not write are written here from plain data: NeoX configs (the shipped
``configs/*.yml`` and the configs of ``tests/fixtures/neox/neox_golden.json``'s cases), DeepSpeed/NeoX batch
configs and hostfiles, checkpoints in DeepSpeed's and Megatron-LM's layouts (zip-format pickles of plain
dicts, as ``tests/formats/test_checkpoint.py`` writes them), run logs (``neox_epoch.jsonl``) and a megatron-core
index cache built by the installed megatron-core's own BlendedMegatronDatasetBuilder (skipped, and said so in
the index, when megatron-core or torch is not importable).

Paths: the corpora, configs and caches are built in a fresh temporary directory; every command runs with that
directory as its working directory and names its inputs by relative paths wherever the command allows it
(megatron-core's cache file names hash the dataset paths they were built with, so these are relative too).
Where an absolute path still shows in the captured text (stdout, stderr, written files), the temporary
directory is replaced by ``<TMP>`` and this checkout's root by ``<REPO>``; nothing else is rewritten.

Nondeterminism: two runs on the same code (two temporary directories, cases run concurrently) gave
byte-identical files for every case: no timings or timestamps reach the JSON of these cases (the run logs given
to ``report`` carry fixed "time" values), so no field is normalised by name. ``NORMALISED_FIELDS`` below lists
any that ever must be, and the index records it. Not random but machine-dependent, so compare snapshots taken
on the same machine and environment: check-batch's ``deepspeed_version`` (the installed DeepSpeed), the
megatron-core version the plan defaults to, and the GPU count NeoX and the launcher see where a case gives no
hostfile or world size.

Commands covered: plan, audit, resume-check, check-batch and report, each with ``--json``. Not covered:
``demo`` (prints tables, no --json; its corpus writer is used here) and ``launch`` (runs GPT-NeoX).

The environment of each command is this one's minus the variables DeepSpeed's launcher reads for the world
(DLTS_HOSTFILE, LOCAL_SIZE, CUDA_VISIBLE_DEVICES, MASTER_ADDR), so check-batch and plan count the same world on
every machine; a /job/hostfile on the machine would still be read by cases without a hostfile (reported in the
index as ``job_hostfile_exists``).
"""

from __future__ import annotations

import argparse
import os
import sys

from snapshot.runner import compare, snapshot


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir", nargs="?", help="write the snapshot here")
    p.add_argument("--compare", nargs=2, metavar=("A_DIR", "B_DIR"), help="compare two snapshots")
    p.add_argument("--jobs", type=int, default=max(1, min(4, os.cpu_count() or 1)), help="cases run at once")
    args = p.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if not args.out_dir:
        p.error("give OUT_DIR or --compare A_DIR B_DIR")
    return snapshot(args.out_dir, args.jobs)


if __name__ == "__main__":
    sys.exit(main())
