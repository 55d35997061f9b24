"""Planning in the NeoX hooks: the run's plan from NeoX's parsed args, train_iters and the schedule keys set on
them, and train_iters checked equal on all ranks (an all-reduce)."""

from __future__ import annotations

from typing import Any

from neox_epoch.errors import PlanError
from neox_epoch.neox.hook_resume import resumed_plan
from neox_epoch.neox.hook_state import State, set_arg
from neox_epoch.neox.planning import RunPlan, make_run_plan, values_from_args
from neox_epoch.util.ranklog import rank_zero_logger

log = rank_zero_logger("neox_epoch.neox")


def plan_for(state: State, neox_args: Any) -> RunPlan:
    """Plan once per process from NeoX's parsed args; set train_iters and the schedule keys that follow it on
    ``neox_args`` (before NeoX builds its learning-rate scheduler), logging every change."""
    if state.run is None:
        state.run = resumed_plan(
            state, neox_args, make_run_plan(values_from_args(neox_args), state.block, state.hook.settings)
        )
    rp = state.run
    apply_overwrite(neox_args, rp)
    tbs = getattr(neox_args, "train_batch_size", None)
    if tbs is not None and int(tbs) != rp.train_batch_size:
        raise PlanError(
            f"train_batch_size: NeoX uses {tbs} but the plan used {rp.train_batch_size}; relaunch with "
            "neox-epoch launch (or check-batch) so both see the same world"
        )
    _same_on_all_ranks(rp.train_iters)
    return rp


def apply_overwrite(neox_args: Any, rp: RunPlan) -> None:
    """Set each value of ``rp.overwrite()`` that differs on ``neox_args``; rank 0 logs ``key old -> new: why``."""
    why = {c.key: c.why for c in rp.schedule.changes}
    for key, value in rp.overwrite().items():
        current = getattr(neox_args, key, None)
        if current == value:
            continue
        set_arg(neox_args, key, value)
        log.warning("neox_epoch: %s %s -> %s: %s", key, current, value, why.get(key, "planned by neox_epoch"))


def _same_on_all_ranks(value: int) -> None:
    try:
        import torch
        import torch.distributed as dist
    except ImportError:  # pragma: no cover
        return
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    lo = torch.tensor([value], dtype=torch.long, device=device)
    hi = torch.tensor([value], dtype=torch.long, device=device)
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    if int(lo.item()) != int(hi.item()):
        raise PlanError(
            f"train_iters differs across ranks ({int(lo.item())}..{int(hi.item())}): the ranks see "
            "different data files or configs; make them identical"
        )
