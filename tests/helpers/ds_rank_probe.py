"""Started by the deepspeed launcher (tests/batch/test_check_batch.py, bench/check_batch_time.py): record this rank.

Writes ``<out>/rank<RANK>.json`` with WORLD_SIZE, RANK, LOCAL_RANK, LOCAL_SIZE, CUDA_VISIBLE_DEVICES and the
``--local_rank`` argument. Options:

* ``--expected_world N``: also record the outcome of the worker-side guard
  ``neox_epoch.batch.guard.check_world(N)``.
* ``--ds_config PATH``: also run ``deepspeed.initialize`` on a tiny model with that DeepSpeed config and
  record ``"ok"`` or DeepSpeed's error; on an error the rank exits 1 after tearing down, as a real training
  script would (so the launcher reports the failure). The CPU-only shared-memory op is not built (it
  JIT-compiles for 15-90 s on first use and plays no part in the batch check) unless ``--with_shm_op``
  is given (bench/check_batch_time.py uses that to time what a real script pays).

Without ``--ds_config`` no process group is created; with it the script ends with barrier() and
destroy_process_group().
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def _write(out: str, record: dict[str, object]) -> None:
    path = os.path.join(out, f"rank{os.environ['RANK']}.json")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(record, f)
    os.replace(path + ".tmp", path)


def _initialize(config_path: str, with_shm_op: bool) -> str:
    """deepspeed.initialize a 4x4 linear model with ``config_path``; return "ok" or the error text."""
    import importlib

    import deepspeed
    import torch

    if not with_shm_op:
        importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    try:
        deepspeed.initialize(model=model, optimizer=optimizer, config=config_path)
        return "ok"
    except Exception as err:  # noqa: BLE001 - recorded for the test, then re-raised by the caller
        return f"{type(err).__name__}: {err}"


def main() -> int:
    started = time.time()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, help="directory for the per-rank records")
    parser.add_argument("--expected_world", type=int, help="run check_world with this expected world")
    parser.add_argument("--ds_config", help="run deepspeed.initialize with this DeepSpeed JSON")
    parser.add_argument("--with_shm_op", action="store_true", help="let DeepSpeed build its CPU shm op")
    parser.add_argument("--local_rank", type=int, help="set by the deepspeed launcher")
    args = parser.parse_args()

    record: dict[str, object] = {
        name: os.environ.get(name)
        for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_SIZE", "CUDA_VISIBLE_DEVICES")
    }
    record["local_rank_arg"] = args.local_rank
    if args.expected_world is not None:
        from neox_epoch.batch.guard import check_world
        from neox_epoch.errors import NeoxEpochError

        try:
            check_world(args.expected_world)
            record["guard"] = "ok"
        except NeoxEpochError as err:
            record["guard"] = str(err)
    failed = False
    if args.ds_config is not None:
        outcome = _initialize(args.ds_config, args.with_shm_op)
        record["initialize"] = outcome
        record["initialize_seconds"] = round(time.time() - started, 3)
        failed = outcome != "ok"
        import torch.distributed as dist

        if dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()
    _write(args.out, record)
    return 1 if failed else 0


if __name__ == "__main__":
    exit_code = main()
    # Skip the interpreter teardown: on CPU a rank aborts in C++ static destructors there now and then
    # ("terminate called without an active exception"), which would fail a launch that succeeded.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)
