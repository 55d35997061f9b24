"""What neox-epoch's Megatron-LM hooks cost per training step (run by hand, not a test).

Megatron-LM's real pretrain_gpt.py trains a tiny GPT on CPU (2 ranks, torchrun, gloo; the GPU test double of
tests/helpers/megatron_lm_cpu) on a 2-source blend, interleaved: ``neox-epoch launch --source-epochs a=1 b=2 torchrun
... pretrain_gpt.py FLAGS`` (hooks on) and the same torchrun line with the flags the launch applied but without
the worker (hooks off): same run length. Per run: the mean wall time per step from Megatron-LM's own iteration
log timestamps (first step excluded), and, with hooks on, the seconds spent inside the hook methods
(tests/helpers/megatron_lm_cpu/hook_timer.py) divided by the steps. Prints each repeat and the differences/ratios.

Usage (the stack's Python; MEGATRON_LM_019_DIR / MEGATRON_LM_DIR as tests/helpers/frameworks.py reads them):
    python bench/megatron_hooks_bench.py [--repeats 3] [--docs 120]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(REPO, "tests", "helpers"), os.path.join(REPO, "tests", "helpers", "megatron_lm_cpu")]

import frameworks  # noqa: E402
import harness  # noqa: E402

STAMP = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+)\] iteration +(\d+)/ *(\d+) \|")


def _per_step(log: str) -> tuple[int, float]:
    """(steps, mean seconds per step) from Megatron-LM's iteration lines, step 1 excluded."""
    stamps = {int(m.group(2)): datetime.fromisoformat(m.group(1)) for m in STAMP.finditer(log)}
    first, last = min(stamps), max(stamps)
    return last, (stamps[last] - stamps[first]).total_seconds() / (last - first)


def _worker_free(argv: list[str]) -> list[str]:
    i = argv.index("-m")
    return argv[:i] + argv[i + 2 :]


def _stack() -> tuple[str, dict[str, str]]:
    if frameworks.megatron_lm_stack() == "today":
        return os.path.join(frameworks.megatron_lm_019_dir(), "pretrain_gpt.py"), frameworks.megatron_lm_today_env()
    return os.path.join(frameworks.megatron_lm_dir(), "pretrain_gpt.py"), frameworks.megatron_lm_env()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--docs", type=int, default=120, help="documents per corpus (sets the run length)")
    parser.add_argument("--log-interval", type=int, default=10, help="Megatron-LM's --log-interval (ours follows)")
    opts = parser.parse_args()
    script, env = _stack()
    root = tempfile.mkdtemp(prefix="mlm-hooks-bench-")
    run = harness.new_run(os.path.join(root, "run"), script, env)
    harness.write_random_corpus(run.path("a"), 1, opts.docs, 20, 100)
    harness.write_random_corpus(run.path("b"), 2, opts.docs * 3 // 4, 20, 100)
    run.env.pop("NEOX_EPOCH_MEGATRON_RECORD_DIR")
    neox_epoch = os.path.join(os.path.dirname(sys.executable), "neox-epoch")
    line = [
        "torchrun",
        "--nproc-per-node",
        "2",
        script,
        *run.flags(4, "--save-interval", "1000"),
        "--log-interval",
        str(opts.log_interval),
    ]
    dry = subprocess.run(
        [neox_epoch, "launch", "--dry-run", "--source-epochs", "a=1", "b=2", *line],
        env=run.env,
        capture_output=True,
        text=True,
        check=True,
    )
    hooked = json.loads(dry.stdout.strip().splitlines()[-1])["argv"]
    plain = _worker_free(hooked)
    on: list[float] = []
    off: list[float] = []
    inside: list[float] = []
    once: list[float] = []
    for r in range(opts.repeats):
        for kind in ("on", "off"):
            times = os.path.join(root, f"times-{r}")
            os.makedirs(times, exist_ok=True)
            env_k = dict(run.env, NEOX_EPOCH_MEGATRON_HOOK_TIMES=times)
            argv = [neox_epoch, "launch", "--source-epochs", "a=1", "b=2", *line] if kind == "on" else plain
            proc = subprocess.run(argv, env=env_k, cwd=run.root, capture_output=True, text=True)
            if proc.returncode != 0:
                print(proc.stderr[-3000:], file=sys.stderr)
                return 1
            steps, per = _per_step(proc.stdout + proc.stderr)
            (on if kind == "on" else off).append(per)
            msg = f"repeat {r} hooks {kind}: {steps} steps, {per * 1e3:.2f} ms/step"
            if kind == "on":
                ranks = [json.load(open(p, encoding="utf-8")) for p in glob.glob(os.path.join(times, "rank*.json"))]
                spent = max(sum(m["seconds"] for m in t.values()) for t in ranks)
                step_s = max(t.get("after_step", {}).get("seconds", 0.0) for t in ranks)
                inside.append(step_s / steps)
                once.append(spent - step_s)
                msg += (
                    f"; inside the hooks (slowest rank): per step (after_step) {step_s / steps * 1e3:.3f} ms, "
                    f"once per launch (build check, saves, final) {(spent - step_s) * 1e3:.1f} ms"
                )
            for p in glob.glob(os.path.join(run.path("ckpt"), "*")):
                subprocess.run(["rm", "-rf", p], check=True)
            print(msg, flush=True)
    diff = statistics.median(on) - statistics.median(off)
    print(
        f"median ms/step: hooks on {statistics.median(on) * 1e3:.2f}, off {statistics.median(off) * 1e3:.2f}; "
        f"difference {diff * 1e3:+.2f} ms/step, ratio {statistics.median(on) / statistics.median(off):.3f}"
    )
    print(
        f"time inside the per-step hook: median {statistics.median(inside) * 1e3:.3f} ms/step, "
        f"max {max(inside) * 1e3:.3f} ms/step (target < 1 ms); once per launch: median "
        f"{statistics.median(once) * 1e3:.1f} ms ({statistics.median(once) / steps * 1e3:.3f} ms/step over "
        f"{steps} steps)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
