"""Running the cases, writing a snapshot, comparing two."""

from __future__ import annotations

import concurrent.futures
import difflib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from snapshot.cases import build_inputs
from snapshot.common import INDEX, LAUNCH_ENV, NORMALISED_FIELDS, REPO, write_text


def _normalise(text: str, work: str) -> str:
    for path, mark in (
        (os.path.realpath(work), "<TMP>"),
        (work, "<TMP>"),
        (os.path.realpath(REPO), "<REPO>"),
        (REPO, "<REPO>"),
    ):
        text = text.replace(path, mark)
    return text


def _run(case: dict[str, Any], work: str, env: dict[str, str]) -> dict[str, Any]:
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "neox_epoch.cli", *case["argv"]],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    files = {}
    for rel in case["files"]:
        path = os.path.join(work, rel)
        files[rel] = _normalise(open(path, encoding="utf-8").read(), work) if os.path.isfile(path) else None
    record = {
        "case": case["name"],
        "argv": [_normalise(a, work) for a in case["argv"]],
        "exit_code": r.returncode,
        "stdout": _normalise(r.stdout, work),
        "stderr": _normalise(r.stderr, work),
        "files": files,
    }
    return {"record": record, "seconds": round(time.monotonic() - t0, 2)}


def snapshot(out_dir: str, jobs: int) -> int:
    os.makedirs(out_dir, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_ENV}
    env["PYTHONPATH"] = os.pathsep.join([REPO, *filter(None, [os.environ.get("PYTHONPATH")])])
    env.setdefault("DS_ACCELERATOR", "cpu")
    started = time.monotonic()
    work = tempfile.mkdtemp(prefix="neox-epoch-snapshot-")
    try:
        cases, notes = build_inputs(work, env)
        names = [c["name"] for c in cases]
        assert len(set(names)) == len(names), "duplicate case names"
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(lambda c: _run(c, work, env), cases))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for res in results:
        rec = res["record"]
        write_text(os.path.join(out_dir, rec["case"] + ".json"), json.dumps(rec, indent=1, sort_keys=True) + "\n")
    index = {
        "cases": {r["record"]["case"]: r["record"]["exit_code"] for r in results},
        "notes": {
            **notes,
            "normalised_fields": list(NORMALISED_FIELDS),
            "paths": "temporary directory -> <TMP>, checkout root -> <REPO>",
            "job_hostfile_exists": os.path.exists("/job/hostfile"),
        },
    }
    write_text(os.path.join(out_dir, INDEX), json.dumps(index, indent=1, sort_keys=True) + "\n")
    slowest = sorted(results, key=lambda r: -r["seconds"])[:3]
    print(
        f"{len(results)} cases in {time.monotonic() - started:.1f}s -> {out_dir} (slowest: "
        + ", ".join(f"{r['record']['case']} {r['seconds']}s" for r in slowest)
        + ")"
    )
    for k, v in notes.items():
        print(f"  {k}: {v}")
    return 0


def _lines(rec: dict[str, Any]) -> list[str]:
    """A case record as lines to diff: exit code, stdout, each written file, stderr."""
    out = [f"exit_code: {rec.get('exit_code')}", "--- stdout"]
    out += rec.get("stdout", "").splitlines()
    for name, text in sorted((rec.get("files") or {}).items()):
        out.append(f"--- file {name}")
        out += (text or "(not written)").splitlines()
    out.append("--- stderr")
    out += rec.get("stderr", "").splitlines()
    return out


def compare(a_dir: str, b_dir: str, context: int = 3, max_lines: int = 40) -> int:
    def cases(d: str) -> set[str]:
        return {f[:-5] for f in os.listdir(d) if f.endswith(".json") and f != INDEX}

    a, b = cases(a_dir), cases(b_dir)
    differ = 0
    for name in sorted(a | b):
        if name not in a or name not in b:
            print(f"{name}: only in {a_dir if name in a else b_dir}")
            differ += 1
            continue
        ra = open(os.path.join(a_dir, name + ".json"), encoding="utf-8").read()
        rb = open(os.path.join(b_dir, name + ".json"), encoding="utf-8").read()
        if ra == rb:
            print(f"{name}: identical")
            continue
        differ += 1
        print(f"{name}: different")
        diff = list(
            difflib.unified_diff(_lines(json.loads(ra)), _lines(json.loads(rb)), a_dir, b_dir, n=context, lineterm="")
        )
        for line in diff[:max_lines]:
            print("    " + line)
        if len(diff) > max_lines:
            print(f"    ... {len(diff) - max_lines} more diff lines")
    print(f"{len(a | b) - differ} identical, {differ} different")
    return 1 if differ else 0
