"""The live counters' saved state: its format, the error a state that disagrees with the dataset raises, and the
run's data fingerprint saved in it."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from neox_epoch.errors import NeoxEpochError
from neox_epoch.formats.fingerprint import DataFingerprint, fingerprint
from neox_epoch.plan.model import Plan

log = logging.getLogger("neox_epoch.mcore")


#: ``state_dict()["format"]``
STATE_FORMAT = "neox_epoch.mcore.counters/1"


class CountersStateError(NeoxEpochError):
    """A counters state (checkpoint) disagrees with the train dataset, or the training loop went backwards."""


def run_fingerprint(plan: Plan, plan_or_setup: Any, datasets: list[Any]) -> DataFingerprint | None:
    """The run's data fingerprint: the train prefixes, seq_length, the seed (the setup's config, else the built
    dataset's) and the stage plan; None when no seed is known."""
    config = getattr(plan_or_setup, "config", None) or getattr(datasets[0] if datasets else None, "config", None)
    seed = getattr(config, "random_seed", None)
    if seed is None:
        return None
    stages = plan.settings.get("stages")
    try:
        return fingerprint(
            [sp.prefix for sp in plan.sources if sp.split == "train"],
            int(plan.seq_length),
            int(seed),
            stages if isinstance(stages, Mapping) else None,
        )
    except NeoxEpochError as err:  # e.g. two prefixes with the same last path component: the draws check remains
        log.warning("neox_epoch: no data fingerprint in the counters' state: %s", err)
        return None
