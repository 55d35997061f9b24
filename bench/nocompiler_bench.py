"""Without a C compiler: the compiled kernels against their numpy fallbacks, same run, same answers (issue 36).

    python bench/nocompiler_bench.py                 # 22 sources (the Pile's weights), 50M draws; audit exposure
    python bench/nocompiler_bench.py --draws 5000000

Part 1: ``neox-epoch plan --json`` of a 22-source NeoX config (the Pile's weights) of about ``--draws`` train samples,
in fresh processes with the extensions and with ``NEOX_EPOCH_NO_EXTENSIONS=1``. Then the greedy blend counts of that
blend at ``--draws`` draws, with an epoch mark per source as the plan asks (``blend.greedy_draws``), with
``neox_epoch._greedy`` and with the numpy fallback (``blend._greedy`` set to None, what an install without a compiler
runs), and the counts alone; then 22 log-uniform weights, where the jump's proof does not apply and numpy's lanes
replay every draw (``--lane-draws``). Part 2: ``neox-epoch audit --json`` on a written NeoX-like packed index of two
epochs, with the kernel and with ``NEOX_EPOCH_NO_EXTENSIONS=1``, in fresh processes (wall time of each). Prints the
times, the ratio fallback/kernel and whether the outputs are equal.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "helpers"))

from neox_epoch.semantics import blend  # noqa: E402

PILE: tuple[float, ...] = (18.11, 14.40, 12.07, 10.01, 8.96, 7.59, 6.12, 4.27, 3.16, 3.08, 2.42, 2.16, 1.47, 1.38)
PILE += (1.12, 1.04, 0.90, 0.75, 0.43, 0.41, 0.24, 0.19)


def greedy_part(draws: int) -> float:
    weights = [float(w) for w in blend.normalize([float(w) for w in PILE])]
    marks = [(i, max(1, int(w * draws * 0.6))) for i, w in enumerate(weights)]  # about 0.6 epochs in: one mark each
    kernel = blend._greedy
    times, results = [], []
    for label, module in (("kernel", kernel), ("numpy", None)):
        blend._greedy = module
        start = time.perf_counter()
        got = blend.greedy_draws(weights, [draws // 2, draws], marks)
        times.append(time.perf_counter() - start)
        results.append(got)
        print(f"greedy {len(weights)} sources, {draws:,d} draws, {label:6s}: {times[-1]:7.2f} s")
    ratio = times[1] / times[0]
    print(f"greedy: numpy / kernel = {ratio:.1f}x; same counts and marks: {results[0] == results[1]}")
    plain = []
    for label, module in (("kernel", kernel), ("numpy", None)):  # the counts alone: no marks to jump between
        blend._greedy = module
        start = time.perf_counter()
        plain.append((blend.greedy_counts(weights, draws), time.perf_counter() - start))
        print(f"greedy counts only, {label:6s}: {plain[-1][1]:7.2f} s")
    blend._greedy = kernel
    print(f"counts only: numpy / kernel = {plain[1][1] / plain[0][1]:.1f}x; same: {plain[0][0] == plain[1][0]}")
    return ratio


def plan_part(draws: int) -> float:
    """``neox-epoch plan --json`` of a 22-source NeoX config (the Pile's weights, small written corpora) whose
    train_iters x train_batch_size is about ``draws``, in fresh processes, with the extensions and without."""
    from neox_epoch.formats.corpus import write_random_corpus

    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i in range(len(PILE)):
            paths.append(os.path.join(tmp, f"source{i:02d}_text_document"))
            write_random_corpus(paths[-1], 100 + i, 3000, 1, 400)
        batch, iters = 1024, -(-draws // 1024)
        config: dict[str, object] = {
            "train_data_paths": paths,
            "train_data_weights": list(PILE),
            "valid_data_paths": paths[:1],
            "test_data_paths": paths[:1],
            "seq_length": 64,
            "train_batch_size": batch,
            "train_iters": iters,
            "eval_interval": 10**9,
            "eval_iters": 0,
            "seed": 1234,
        }
        path = os.path.join(tmp, "pile22.yml")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(config, f)
        env = dict(os.environ, PYTHONPATH=ROOT)
        env.pop("NEOX_EPOCH_NO_EXTENSIONS", None)
        outs, times = [], []
        for label, off in (("kernel", False), ("numpy", True)):
            if off:
                env["NEOX_EPOCH_NO_EXTENSIONS"] = "1"
            start = time.perf_counter()
            run = subprocess.run(
                [sys.executable, "-m", "neox_epoch.cli", "plan", path, "--json"],
                env=env,
                capture_output=True,
                text=True,
            )
            times.append(time.perf_counter() - start)
            outs.append(run.stdout)
            print(f"plan 22 sources, {batch * iters:,d} samples, {label:6s}: {times[-1]:7.2f} s (rc {run.returncode})")
    ratio = times[1] / times[0]
    print(f"plan: numpy / kernel = {ratio:.1f}x; same JSON: {outs[0] == outs[1]}")
    return ratio


def lanes_part(draws: int) -> float:
    """22 log-uniform weights (1e-4..1), where the jump's proof does not apply: numpy's lanes against the C loop."""
    rng = random.Random(36)
    weights = [float(w) for w in blend.normalize([10 ** rng.uniform(-4, 0) for _ in range(22)])]
    kernel, got = blend._greedy, []
    for label, module in (("kernel", kernel), ("numpy", None)):
        blend._greedy = module
        start = time.perf_counter()
        got.append((blend.greedy_counts(weights, draws), time.perf_counter() - start))
        print(f"greedy 22 log-uniform weights, {draws:,d} draws, {label:6s}: {got[-1][1]:7.2f} s")
    blend._greedy = kernel
    ratio = got[1][1] / got[0][1]
    print(f"log-uniform: numpy / kernel = {ratio:.1f}x; same: {got[0][0] == got[1][0]}")
    return ratio


def audit_part(documents: int, epochs: int) -> float:
    from tests.audit.test_audit_unit import write_neox_index

    with tempfile.TemporaryDirectory() as tmp:
        lengths = [(7919 * i) % 1500 + 1 for i in range(documents)]
        write_neox_index(tmp, "corpus", lengths, 2048, epochs)
        env = dict(os.environ, PYTHONPATH=ROOT)
        env.pop("NEOX_EPOCH_NO_EXTENSIONS", None)
        outs, times = [], []
        for label, off in (("kernel", False), ("numpy", True)):
            if off:
                env["NEOX_EPOCH_NO_EXTENSIONS"] = "1"
            args = [sys.executable, "-m", "neox_epoch.cli", "audit", tmp, "--consumed", str(documents // 3)]
            start = time.perf_counter()
            run = subprocess.run([*args, "--json", "--no-progress"], env=env, capture_output=True, text=True)
            times.append(time.perf_counter() - start)
            outs.append(run.stdout)
            print(
                f"audit {documents:,d} documents x {epochs} epochs, {label:6s}: {times[-1]:7.2f} s"
                f" (rc {run.returncode})"
            )
    ratio = times[1] / times[0]
    print(f"audit: numpy / kernel = {ratio:.1f}x; same JSON: {outs[0] == outs[1]}")
    return ratio


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--draws", type=int, default=50_000_000)
    ap.add_argument("--lane-draws", type=int, default=5_000_000, help="draws of the log-uniform blend (0: skip)")
    ap.add_argument("--documents", type=int, default=2_000_000)
    ap.add_argument("--epochs", type=int, default=2)
    args = ap.parse_args()
    if blend._greedy is None:
        sys.exit("neox_epoch._greedy is not built here: nothing to compare against")
    plan_part(args.draws)
    greedy_part(args.draws)
    if args.lane_draws:
        lanes_part(args.lane_draws)
    audit_part(args.documents, args.epochs)


if __name__ == "__main__":
    main()
