"""megatron-core adapter: exact passes (``exact``), data stages (``stages``) and live passes per source
(``counters``).

megatron.core and torch are imported only inside functions. The public API, re-exported here::

    from neox_epoch.mcore import exact_config, install, live_counters, verify_build
    from neox_epoch.mcore import build_stages, exact_stages
"""

from neox_epoch.mcore.counters import LiveCounters, live_counters
from neox_epoch.mcore.counters_state import CountersStateError
from neox_epoch.mcore.exact import (
    BuildMismatchError,
    ExactSetup,
    exact_config,
    install,
    log_plan,
    plan_lines,
    verify_build,
)
from neox_epoch.mcore.stages import StagedDataset, StagesSetup, build_stages, exact_stages, stage_lines

__all__ = [
    "BuildMismatchError",
    "CountersStateError",
    "ExactSetup",
    "LiveCounters",
    "StagedDataset",
    "StagesSetup",
    "build_stages",
    "exact_config",
    "exact_stages",
    "install",
    "live_counters",
    "log_plan",
    "plan_lines",
    "stage_lines",
    "verify_build",
]
