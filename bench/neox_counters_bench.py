#!/usr/bin/env python3
"""Overhead of the live per-source pass counters (neox_epoch.neox.counters), run by hand.

    .venv/bin/python bench/neox_counters_bench.py [--iters 200000]

For several blend sizes and global batch sizes it measures (1) the one-time setup (exact greedy replay
of every train sample, in C), (2) the mean cost of ``PassCounters.step`` per training iteration,
including the log-interval records (JSONL to a temp dir), and (3) a tiny CPU training step (forward +
backward of a 2-layer MLP on 8x2048 tokens, torch) as a floor for what a real step costs. The per-step
cost must not grow with the batch size (O(1) per step) and must stay under 1% of the step.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from neox_epoch.neox.counters import JsonlSink, counters_for
from neox_epoch.semantics import blend


def toy_step_seconds(repeats: int = 20) -> float:
    try:
        import torch
    except ImportError:
        return float("nan")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8 * 2048 // 16, 256)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench(n_sources: int, tbs: int, iters: int, log_interval: int, workdir: str) -> dict[str, float]:
    weights = blend.normalize([float(i + 1) for i in range(n_sources)])
    spe = [max(1, int(iters * tbs * w / 2.5)) for w in weights]  # ~2.5 passes each
    bounds = [[k * s for k in (1, 2)] for s in spe]
    t0 = time.perf_counter()
    c = counters_for(
        [f"s{i}" for i in range(n_sources)],
        spe,
        bounds,
        [2.5] * n_sources,
        weights if n_sources > 1 else None,
        tbs,
        iters,
        log_interval,
        sink=JsonlSink(workdir),
    )
    setup = time.perf_counter() - t0
    c.start(0)
    t0 = time.perf_counter()
    for it in range(1, iters + 1):
        c.step(it)
    per_step = (time.perf_counter() - t0) / iters
    return {"setup_s": setup, "per_step_us": per_step * 1e6, "samples": iters * tbs, "markers": len(c.markers)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=200_000)
    p.add_argument("--log-interval", type=int, default=100)
    a = p.parse_args()
    step = toy_step_seconds()
    print(f"toy CPU training step (2-layer MLP, 8x2048 tokens): {step * 1e3:.2f} ms")
    print(f"{'sources':>7} {'batch':>6} {'samples':>12} {'setup s':>8} {'step us':>8} {'share of toy step':>18}")
    with tempfile.TemporaryDirectory() as d:
        for n in (1, 3, 16):
            for tbs in (8, 512, 4096):
                r = bench(n, tbs, a.iters, a.log_interval, d)
                print(
                    f"{n:>7} {tbs:>6} {r['samples']:>12,d} {r['setup_s']:>8.2f} {r['per_step_us']:>8.2f} "
                    f"{r['per_step_us'] * 1e-6 / step:>17.4%}"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
