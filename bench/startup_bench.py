"""End-to-end time of ``neox-epoch plan`` (process start to exit: start-up, imports, the plan, the report)
for the demo configs and the real Pythia/StableLM configs, against a baseline checkout in the same run.

    python bench/startup_bench.py --baseline DIR [--runs 5] [--world 256] [--real N]

DIR is another checkout of this repository (e.g. ``git worktree add DIR main``, its C extensions built):
each command runs as ``python -m neox_epoch.cli plan ...`` with DIR, then this checkout, first on
PYTHONPATH, in turn (A B A B ...), so a drift of the machine's speed hits both alike. Each line prints the
median wall and CPU seconds (user + system, the child's own ``os.wait4`` accounting) of both and their
ratio, then the geometric mean of the ratios. Bytecode is compiled once into a private cache before
timing (``PYTHONPYCACHEPREFIX``), as an installed package has it. Floors printed beside: ``python -c
pass`` and ``python -c "import numpy, yaml"`` (the two libraries every plan needs).
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "helpers"))


def timed(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, float, int]:
    """(wall s, cpu s, exit code) of one child."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, proc.returncode


def env_for(root: str, cache: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = root
    env["PYTHONPYCACHEPREFIX"] = cache
    return env


def median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", required=True, help="checkout of the code to compare against")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--world", type=int, default=256)
    ap.add_argument("--real", type=int, default=None, help="only the first N real configs")
    args = ap.parse_args()
    import real_config_bench

    from neox_epoch.demo import write_demo_corpus

    work = tempfile.mkdtemp(prefix="startup-bench-")
    os.chdir(work)
    write_demo_corpus("demo/data")
    cases = [
        (f"demo {name}", ["plan", os.path.join(REPO, "configs", name)])
        for name in sorted(os.listdir(os.path.join(REPO, "configs")))
        if name.endswith(".yml")
    ]
    real = real_config_bench.prepare(work, args.world)[: args.real]
    for rel, files in real:
        cases.append((f"real {os.path.basename(rel)}", ["plan", *files]))
        cases.append((f"real {os.path.basename(rel)} --epochs 1", ["plan", *files, "--epochs", "1"]))
    envs = {
        "base": env_for(os.path.abspath(args.baseline), os.path.join(work, "pyc-base")),
        "new": env_for(REPO, os.path.join(work, "pyc-new")),
    }
    py = sys.executable
    floors = [("python -c pass", [py, "-c", "pass"]), ("import numpy, yaml", [py, "-c", "import numpy, yaml"])]
    for label, argv in floors:
        walls, cpus = zip(*(timed(argv, envs["new"], work)[:2] for _ in range(args.runs)))
        print(f"floor {label:<58} wall {median(list(walls)):.3f} s  cpu {median(list(cpus)):.3f} s")
    print(
        f"{'command (plan ... --json)':<64} {'base wall':>9} {'new wall':>9} {'ratio':>6} {'base cpu':>9} "
        f"{'new cpu':>8} {'ratio':>6}  exit"
    )
    logs: dict[str, list[float]] = {"wall": [], "cpu": []}
    for label, cmd in cases:
        argv = [py, "-m", "neox_epoch.cli", *cmd, "--json"]
        for env in envs.values():  # warm-up: compiles the bytecode, fills the page cache
            timed(argv, env, work)
        got: dict[str, list[tuple[float, float, int]]] = {"base": [], "new": []}
        for _ in range(args.runs):
            for name, env in envs.items():
                got[name].append(timed(argv, env, work))
        bw, bc = median([g[0] for g in got["base"]]), median([g[1] for g in got["base"]])
        nw, nc = median([g[0] for g in got["new"]]), median([g[1] for g in got["new"]])
        codes = sorted({g[2] for g in got["base"]} | {g[2] for g in got["new"]})
        logs["wall"].append(math.log(nw / bw))
        logs["cpu"].append(math.log(nc / bc))
        print(
            f"{label[:64]:<64} {bw:9.3f} {nw:9.3f} {nw / bw:6.2f} {bc:9.3f} {nc:8.3f} {nc / bc:6.2f}  {codes}",
            flush=True,
        )
    gw, gc = (math.exp(sum(v) / len(v)) for v in (logs["wall"], logs["cpu"]))
    print(
        f"geometric mean new/base over {len(cases)} commands: wall {gw:.2f}, cpu {gc:.2f} "
        f"(median of {args.runs} paired runs each; load average {os.getloadavg()[0]:.1f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
