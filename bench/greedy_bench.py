"""Exact greedy blend counts: the jump-ahead (``blend.greedy_counts``) against the plain replay, same run.

    python bench/greedy_bench.py                    # 2, 8 and 64 sources, 50M draws; plan time 1e6..1e9
    python bench/greedy_bench.py --draws 10000000 --repeat 5 --no-plan

Part 1, ns per draw at 2, 8 and 64 sources (random weights log-uniform in 1e-6..1, and equal weights):
``new`` is ``blend.greedy_counts`` (the jump where its proof applies, else the replay), ``plain`` is the
scalar C replay ``_greedy.advance_plain`` (the loop every earlier version ran, threaded as before: up to 16
sources; ``new`` uses the AVX2 loop at 11 sources and more where the jump does not apply, and past 16 sources
the hot/cold loop where a trial finds it faster, split over the cores like the small blends). The CPU ratio
(process time, all threads) is printed beside the wall-time ratio. The two alternate
``--repeat`` times, the order flipping each time; each line gives the fastest of each, the ratio
plain/new of the fastest, and whether the counts are equal (they must be).

Part 2, plan time: ``neox-epoch plan`` on the demo's 3-source config (``configs/blend_per_source_epochs.yml``,
a demo corpus written to a temporary directory) with ``--epochs`` set for about 1e6 .. 1e9 train
samples, in-process, with the jump against the jump switched off (the plain replay), alternated. The
plain replay is skipped past ``--plain-max`` samples (it takes minutes there); those lines show the new
time only.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from neox_epoch.semantics import blend  # noqa: E402

_greedy = blend._greedy


def fastest(fn: Callable[[], object], out: list[float], cpu: list[float] | None = None) -> object:
    t, c = time.perf_counter(), time.process_time()
    r = fn()
    out.append(time.perf_counter() - t)
    if cpu is not None:
        cpu.append(time.process_time() - c)
    return r


def _plain_counts(weights: list[float], draws: int) -> list[int]:
    """The counts after ``draws`` steps of the scalar C replay (the baseline)."""
    return list(_greedy.advance_plain(weights, 0, [0] * len(weights), draws, [])[0])


def draws_part(draws: int, repeat: int) -> None:
    print(f"ns per draw, {draws:,d} draws, fastest of {repeat} alternated runs (ratio = plain / new)")
    rng = random.Random(2026)
    for n in (2, 8, 64):
        for kind in ("random", "equal"):
            raw = [10 ** rng.uniform(-6, 0) for _ in range(n)] if kind == "random" else [1.0] * n
            w = blend.normalize(raw)
            t_new: list[float] = []
            t_plain: list[float] = []
            c_new: list[float] = []
            c_plain: list[float] = []
            same = True
            for r in range(repeat):  # the order flips every run: the first of a pair tends to run slower
                runs = [functools.partial(blend.greedy_counts, w, draws), functools.partial(_plain_counts, w, draws)]
                outs = [(t_new, c_new), (t_plain, c_plain)]
                order = (0, 1) if r % 2 == 0 else (1, 0)
                got = {k: fastest(runs[k], *outs[k]) for k in order}
                same = same and got[0] == got[1]
            new, plain = min(t_new), min(t_plain)
            print(
                f"  {n:2d} sources {kind:6s}: new {new / draws * 1e9:8.3f} ns  plain {plain / draws * 1e9:7.3f} ns"
                f"  ratio {plain / new:10.1f}x  (CPU {min(c_plain) / min(c_new):7.1f}x)  equal={same}"
            )


def plan_once(config: str, epochs: str) -> float:
    from neox_epoch.cli import main

    t = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = main(["plan", config, "--epochs", epochs])
    if code not in (0, 1):
        raise SystemExit(f"plan --epochs {epochs} exited {code}")
    return time.perf_counter() - t


def plan_part(repeat: int, plain_max: int) -> None:
    from neox_epoch.demo import write_demo_corpus

    d = tempfile.mkdtemp(prefix="greedy-bench-")
    old = os.getcwd()
    try:
        write_demo_corpus(os.path.join(d, "demo", "data"))
        shutil.copytree(os.path.join(os.path.dirname(HERE), "configs"), os.path.join(d, "configs"))
        os.chdir(d)
        config = "configs/blend_per_source_epochs.yml"
        per_epoch = 2528  # train samples per joint epoch of the demo blend (1234 + 748 + 544, x 1.0)
        print("plan time, demo 3-source config (ratio = plain / new)")
        for samples in (10**6, 10**7, 10**8, 10**9):
            epochs = f"{samples / per_epoch:.6g}"
            t_new: list[float] = []
            t_plain: list[float] = []
            for _ in range(repeat):
                t_new.append(plan_once(config, epochs))
                if samples <= plain_max:
                    saved = blend._JUMP_MIN_STEPS
                    blend._JUMP_MIN_STEPS = 1 << 62
                    try:
                        t_plain.append(plan_once(config, epochs))
                    finally:
                        blend._JUMP_MIN_STEPS = saved
            line = f"  ~{samples:.0e} samples (--epochs {epochs}): new {min(t_new):7.3f} s"
            if t_plain:
                line += f"  plain {min(t_plain):7.3f} s  ratio {min(t_plain) / min(t_new):6.1f}x"
            print(line, flush=True)
    finally:
        os.chdir(old)
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--draws", type=int, default=50_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-plan", action="store_true")
    ap.add_argument("--plain-max", type=int, default=10**8)
    args = ap.parse_args()
    if _greedy is None:
        raise SystemExit("neox_epoch._greedy is not built: python setup.py build_ext --inplace")
    draws_part(args.draws, args.repeat)
    if not args.no_plan:
        plan_part(args.repeat, args.plain_max)


if __name__ == "__main__":
    main()
