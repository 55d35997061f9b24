"""Whether stock GPT-NeoX, without neox-epoch, runs an exact NeoX plan, and with which config.

NeoX multiplies every per-source request by 1.005 in ``train_data_paths`` mode (its
``get_normalized_weights_and_num_samples``), even for one source; ``data_path`` + ``split`` mode has no
such factor. So for one train source, a stock config with ``data_path`` and the planned ``train_iters`` can
be exact: it is when NeoX's own index for that request is one epoch and training draws exactly the plan's
target. This is computed with the planner (``make_plan`` on the ``data_path`` variant), never assumed,
and claimed only when it holds. Pure functions, no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from neox_epoch.errors import PlanError
from neox_epoch.plan.inputs import SourceSpec
from neox_epoch.plan.planner import Plan, PlanInput, SourcePlan, make_plan
from neox_epoch.plan.schedule import passes_text

#: the split that puts every document of the source in the train split
ALL_TRAIN = "100,0,0"


def data_path_variant(inp: PlanInput, train_iters: int) -> PlanInput:
    """``inp`` as a stock NeoX data_path config with ``train_iters`` (no plugin settings).

    A ``train_data_paths`` input becomes ``data_path`` with split 100,0,0, so the train split holds the same
    documents (NeoX's data_path mode has no separate valid/test paths: it splits the one corpus).
    """
    split = inp.split if not inp.per_split_paths else ALL_TRAIN
    (spec,) = inp.train_sources
    return replace(
        inp,
        train_sources=(SourceSpec(spec.prefix, None, spec.name),),
        valid_sources=(),
        test_sources=(),
        per_split_paths=False,
        split=split,
        train_iters=train_iters,
        train_samples=None,
        blend_weights_override=None,
        warmup_iters=None,
        neox=replace(inp.neox, blend_buffer=None, exact_requests=None, separate_epochs=False, train_epochs=None),
    )


def stock_neox_exact(inp: PlanInput, plan: Plan, passes: Mapping[str, float]) -> dict[str, Any]:
    """``{"exact": bool, "why": str}`` and, when exact, ``"config"``: the stock NeoX keys that give ``plan``."""
    train = [s for s in plan.sources if s.split == "train"]
    if len(train) != 1:
        return {
            "exact": False,
            "why": (
                f"a blend of {len(train)} sources: stock NeoX blends only in train_data_paths mode, which multiplies "
                "every source's request by 1.005 and uses the config's float weights; exact per-source counts need "
                "neox-epoch"
            ),
        }
    (target,) = train
    variant = data_path_variant(inp, plan.train_iters)
    try:
        (stock,) = [s for s in make_plan(variant).sources if s.split == "train"]
    except PlanError as err:
        return {"exact": False, "why": f"the data_path variant cannot be planned: {err}"}
    wanted = target.target_samples if target.target_samples is not None else target.samples_drawn
    if stock.epochs_built != 1 or stock.samples_drawn != wanted:
        return {"exact": False, "why": _not_exact(stock, wanted, plan)}
    config: dict[str, Any] = {"data_path": stock.prefix, "split": variant.split, "train_iters": plan.train_iters}
    return {"exact": True, "config": config, "why": _exact_why(inp, stock, plan, passes)}


def _exact_why(inp: PlanInput, stock: SourcePlan, plan: Plan, passes: Mapping[str, float]) -> str:
    request = plan.train_iters * plan.global_batch_size
    why = (
        f"data_path + split mode has no 1.005 factor: NeoX asks for train_iters * train_batch_size = "
        f"{plan.train_iters} * {plan.global_batch_size} = {request} samples, builds 1 epoch "
        f"({stock.samples_built} samples) and draws {stock.samples_drawn}, the plan's target for "
        f"{passes_text(next(iter(passes.values())))}; no neox_epoch block needed"
    )
    if inp.per_split_paths:
        why += (
            f"; with split {ALL_TRAIN} there is no valid/test split (NeoX's data_path mode splits the one corpus "
            "and cannot take valid_data_paths), so NeoX skips evaluation"
        )
    return why


def _not_exact(stock: SourcePlan, wanted: int, plan: Plan) -> str:
    if stock.epochs_built != 1:
        return (
            f"with data_path and train_iters {plan.train_iters}, NeoX's index for {stock.samples_requested} "
            f"samples holds {stock.epochs_built} epochs shuffled together, not one; the run needs neox-epoch"
        )
    return (
        f"with data_path and train_iters {plan.train_iters}, NeoX draws {stock.samples_drawn} samples, not the "
        f"target {wanted}; the run needs neox-epoch"
    )
