"""The planner: what a run builds and draws per source, and the train_iters for exactly N passes.

The Python API: ``PlanInput``, ``SourceSpec``, ``make_plan`` and ``exact_plan`` (see docs/plan.md).
"""

from neox_epoch.plan.exact import exact_plan, passes_per_source
from neox_epoch.plan.inputs import McoreOptions, NeoxOptions, PlanInput, PlanWarning, SourceSpec
from neox_epoch.plan.planner import Plan, SourcePlan, make_plan

__all__ = [
    "McoreOptions",
    "NeoxOptions",
    "Plan",
    "PlanInput",
    "PlanWarning",
    "SourcePlan",
    "SourceSpec",
    "exact_plan",
    "make_plan",
    "passes_per_source",
]
