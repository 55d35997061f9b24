#!/usr/bin/env python
"""Scale benchmark: ``neox-epoch plan`` time against the number of sources (issue 33, "Scale").

Run by hand (this is not a test)::

    python bench/sources_bench.py                  # 10k distinct sources, one path listed 30k times, vs cab4e97
    python bench/sources_bench.py --sources 5000 --repeats 0 --old-commit ''   # this tree only

In one run it writes one small real corpus (``write_random_corpus``) and N hard links to it (``src{i}.bin/.idx``:
N distinct prefixes, little disk), a NeoX config blending them with equal weights, and a second config listing
one prefix ``--repeats`` times; then it times ``python -m neox_epoch.cli plan CFG --json`` in a fresh process with
this tree and with the tree of ``--old-commit`` (extracted with ``git archive``, the C extensions copied from this
tree when their sources are the same, else built in place), checks that both print the same per-source numbers
(documents, tokens, samples requested and drawn, epochs built), and prints the times and the ratio old/new.
Times are CPU seconds (user + system of the child): on a shared machine its wall time mostly measures the other
jobs (each run's wall time is printed too). An old run past ``--old-timeout`` wall seconds is stopped and reported
as "> TIMEOUT". Exit 1 when a new run takes more than ``--target`` seconds at 10k sources or disagrees with the old
one.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXTENSIONS = ("_greedy", "_exposure")


def write_inputs(work: str, sources: int, repeats: int) -> dict[str, str]:
    """The corpus, its hard links and the configs; returns {label: config path}."""
    import yaml

    sys.path.insert(0, HERE)
    from neox_epoch.formats.corpus import write_random_corpus

    data = os.path.join(work, "data")
    os.makedirs(data, exist_ok=True)
    first = os.path.join(data, "src0")
    if not os.path.exists(first + ".idx"):
        write_random_corpus(first, 7, 50, 20, 300)
    prefixes = [first]
    for i in range(1, sources):
        prefix = os.path.join(data, f"src{i}")
        for ext in (".bin", ".idx"):
            if not os.path.exists(prefix + ext):
                os.link(first + ext, prefix + ext)
        prefixes.append(prefix)
    configs = {}
    for label, paths in ((f"{sources} sources", prefixes), (f"one path x {repeats}", [first] * repeats)):
        if not paths or (label.startswith("one") and repeats == 0):
            continue
        values: dict[str, Any] = {
            "train_data_paths": paths,
            "train_data_weights": [1.0] * len(paths),
            "valid_data_paths": [first],
            "test_data_paths": [first],
            "seq_length": 64,
            "train_micro_batch_size_per_gpu": 8,
            "global_num_gpus": 1,
            "gradient_accumulation_steps": 1,
            "train_iters": 2000,
            "lr_decay_iters": 2000,
            "eval_interval": 1000,
            "eval_iters": 1,
            "seed": 1234,
        }
        path = os.path.join(work, label.replace(" ", "_") + ".yml")
        with open(path, "w", encoding="utf-8") as f:
            yaml.safe_dump(values, f, sort_keys=False)
        configs[label] = path
    return configs


def old_tree(work: str, commit: str) -> str:
    """``commit``'s tree under ``work``/old, its C extensions ready."""
    dest = os.path.join(work, "old-" + commit)
    if os.path.isdir(dest):
        return dest
    os.makedirs(dest)
    archive = subprocess.run(["git", "-C", HERE, "archive", commit], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", dest], input=archive, check=True)
    same = all(
        subprocess.run(["git", "-C", HERE, "diff", "--quiet", commit, "--", f"neox_epoch/{e}.c"]).returncode == 0
        for e in EXTENSIONS
    )
    if same:
        for name in os.listdir(os.path.join(HERE, "neox_epoch")):
            if name.startswith(EXTENSIONS) and name.endswith(".so"):
                shutil.copy2(os.path.join(HERE, "neox_epoch", name), os.path.join(dest, "neox_epoch", name))
    else:
        subprocess.run(
            [sys.executable, "setup.py", "build_ext", "--inplace"], cwd=dest, check=True, capture_output=True
        )
    return dest


def timed_plan(tree: str, config: str, timeout: float) -> tuple[float | None, dict[str, Any] | None, str]:
    """(CPU seconds, user + system, or None on timeout; the JSON plan; stderr's last line) of one plan in a fresh
    process. CPU time, not wall: on a shared machine the wall time mostly measures the other jobs."""
    env = {**os.environ, "PYTHONPATH": tree}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    try:
        p = subprocess.run(
            [sys.executable, "-m", "neox_epoch.cli", "plan", config, "--json"],
            env=env,
            cwd=tree,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return None, None, ""
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    print(
        f"    ({os.path.basename(config)}, {'old' if tree != HERE else 'new'}: wall {wall:.2f} s, CPU {cpu:.2f} s)",
        flush=True,
    )
    plan = json.loads(p.stdout) if p.returncode in (0, 1) and p.stdout.startswith("{") else None
    return cpu, plan, (p.stderr.strip().splitlines() or [""])[-1]


def numbers(plan: dict[str, Any] | None) -> list[tuple[Any, ...]] | None:
    if plan is None:
        return None
    keys = ("split", "name", "documents", "tokens", "samples_requested", "samples_drawn", "epochs_built")
    return [tuple(s.get(k) for k in keys) for s in plan.get("sources", [])]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sources", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=30_000, help="one path listed this many times (0: skip)")
    ap.add_argument("--old-commit", default="cab4e97", help="the code to compare with ('' : none)")
    ap.add_argument("--old-timeout", type=float, default=300.0)
    ap.add_argument("--target", type=float, default=2.0, help="seconds allowed for the new plan of 10k sources")
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    work = args.workdir or tempfile.mkdtemp(prefix="sources_bench_")
    ok = True
    try:
        configs = write_inputs(work, args.sources, args.repeats)
        old = old_tree(work, args.old_commit) if args.old_commit else None
        for label, config in configs.items():
            wall, plan, err = timed_plan(HERE, config, 3 * args.old_timeout)
            line = f"{label:>22}: new {wall:.2f} s CPU" if wall is not None else f"{label:>22}: new TIMEOUT"
            if plan is None:
                line += f" (no plan: {err})"
                ok = False
            if old is not None:
                owall, oplan, oerr = timed_plan(old, config, args.old_timeout)
                line += (
                    f", old {owall:.2f} s CPU, old/new {owall / max(wall or 1e-9, 1e-9):.1f}x"
                    if owall is not None
                    else f", old > {args.old_timeout:.0f} s (stopped), old/new > "
                    f"{args.old_timeout / max(wall or 1e-9, 1e-9):.0f}x"
                )
                if oplan is not None:
                    same = numbers(plan) == numbers(oplan)
                    line += f", same numbers: {same}"
                    ok &= same
            if label.endswith("sources") and args.sources >= 10_000 and (wall is None or wall > args.target):
                line += f" -- FAIL: over the {args.target} s target"
                ok = False
            print(line, flush=True)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
