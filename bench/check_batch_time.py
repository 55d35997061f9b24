"""Time-to-error: `neox-epoch check-batch` versus DeepSpeed's own batch check, on CPU. Run by hand.

The same wrong config (train_batch_size 12, micro 2, grad accumulation 2 on `--num_gpus 2`: 12 != 2 * 2 * 2)
is given to

* ``neox-epoch check-batch ds.json --num_gpus 2`` (exits 2 with the fix), and
* ``deepspeed --num_gpus 2 tests/helpers/ds_rank_probe.py --ds_config ds.json --with_shm_op``: a tiny 4x4 model
  and ``deepspeed.initialize``, which stops with DeepSpeed's AssertionError; timed until the launcher exits,
  and until the rank reports the error.

``--cold`` points TORCH_EXTENSIONS_DIR at an empty directory, so DeepSpeed first JIT-compiles its CPU
shared-memory op, as on a fresh machine. Usage: ``python bench/check_batch_time.py [--cold] [--repeat N]``.

Measured by hand on the 2-core CPU development machine (deepspeed 0.19.8, torch 2.13.0 CPU), seconds:

====================================  ======  =====
                                      warm    cold
====================================  ======  =====
check-batch exits 2 with the fix      1.9     1.8
deepspeed: a rank reports the error   5.1     30.5
deepspeed: the launcher exits         7.6     32.7
ratio launcher exit / check-batch     4.0x    17.7x
====================================  ======  =====

(warm: medians of 3 on an idle machine; cold: one run with an empty TORCH_EXTENSIONS_DIR. Under load from
other jobs an earlier warm run took 4.2 s against 19.7 s.) On a GPU cluster DeepSpeed's check comes after
the real model is built; check-batch's time does not grow with the model.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

#: seconds, measured by hand (see the module docstring); re-run the script to measure on your machine
MEASURED = {
    "check_batch": 1.9,
    "deepspeed_warm_rank_error": 5.1,
    "deepspeed_warm_launcher_exit": 7.6,
    "deepspeed_cold_rank_error": 30.5,
    "deepspeed_cold_launcher_exit": 32.7,
}

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = os.path.join(ROOT, "tests", "helpers", "ds_rank_probe.py")
CONFIG = {"train_batch_size": 12, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _deepspeed() -> list[str]:
    script = os.path.join(os.path.dirname(sys.executable), "deepspeed")
    return [script] if os.path.exists(script) else [sys.executable, "-m", "deepspeed.launcher.runner"]


def time_check_batch(config: str, env: dict[str, str]) -> float:
    """Seconds until ``neox-epoch check-batch`` exits (it must exit 2)."""
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "neox_epoch.cli", "check-batch", config, "--num_gpus", "2"],
        env=env,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - started
    if proc.returncode != 2:
        raise SystemExit(f"check-batch exited {proc.returncode}, expected 2:\n{proc.stderr}")
    return elapsed


def time_deepspeed(config: str, env: dict[str, str], workdir: str) -> tuple[float, float]:
    """(seconds until the launcher exits, seconds until a rank reports DeepSpeed's error)."""
    out = tempfile.mkdtemp(dir=workdir)
    cmd = [
        *_deepspeed(),
        "--num_gpus",
        "2",
        "--master_port",
        str(_free_port()),
        PROBE,
        "--out",
        out,
        "--ds_config",
        config,
        "--with_shm_op",
    ]
    started = time.perf_counter()
    wall_start = time.time()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    records = [json.load(open(os.path.join(out, f))) for f in os.listdir(out) if f.endswith(".json")]
    if proc.returncode == 0 or not records or any("12 != 2 * 2 * 2" not in r["initialize"] for r in records):
        raise SystemExit(
            f"deepspeed did not stop with the batch assertion (rc {proc.returncode}):\n{proc.stderr[-2000:]}"
        )
    rank_error = max(os.path.getmtime(os.path.join(out, f)) for f in os.listdir(out)) - wall_start
    return elapsed, rank_error


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cold", action="store_true", help="empty TORCH_EXTENSIONS_DIR: DeepSpeed JIT-compiles first")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each (median reported)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        config = os.path.join(workdir, "ds.json")
        with open(config, "w") as f:
            json.dump(CONFIG, f)
        env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_SIZE", "CUDA_VISIBLE_DEVICES")}
        env["DS_ACCELERATOR"] = "cpu"
        env["PYTHONPATH"] = os.pathsep.join([ROOT, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        checks, exits, errors = [], [], []
        for i in range(args.repeat):
            run_env = dict(env)
            if args.cold:
                run_env["TORCH_EXTENSIONS_DIR"] = os.path.join(workdir, f"ext{i}")
            checks.append(time_check_batch(config, run_env))
            exit_s, error_s = time_deepspeed(config, run_env, workdir)
            exits.append(exit_s)
            errors.append(error_s)
    kind = "cold" if args.cold else "warm"
    check, exit_s, error_s = statistics.median(checks), statistics.median(exits), statistics.median(errors)
    print(f"check-batch time-to-error:             {check:6.1f} s")
    print(f"deepspeed ({kind}) rank reports error:  {error_s:6.1f} s")
    print(f"deepspeed ({kind}) launcher exits:      {exit_s:6.1f} s")
    print(f"ratio (launcher exit / check-batch):   {exit_s / check:6.1f}x")
    print(
        f"recorded by hand: check-batch {MEASURED['check_batch']} s; deepspeed {kind} "
        f"{MEASURED[f'deepspeed_{kind}_launcher_exit']} s "
        f"({MEASURED[f'deepspeed_{kind}_launcher_exit'] / MEASURED['check_batch']:.1f}x)"
    )


if __name__ == "__main__":
    main()
