"""``neox_epoch_state.json`` in a Megatron-LM checkpoint's iteration directory (``<save>/iter_0000010/``).

Holds the live counters' state (:meth:`neox_epoch.mcore.counters.LiveCounters.state_dict`: consumed samples,
draws per source, the data fingerprint). Written atomically by rank 0 after Megatron-LM saved the iteration;
read on resume before the first step. Torch-free.
"""

from __future__ import annotations

import json
import os
from typing import Any

from neox_epoch.errors import ConfigError
from neox_epoch.util.atomic import write_text_atomic

#: the file's name inside the iteration directory
STATE_NAME = "neox_epoch_state.json"


def iteration_dir(root: str, iteration: int) -> str:
    """Megatron-LM's directory of one iteration (``iter_%07d``)."""
    return os.path.join(root, f"iter_{int(iteration):07d}")


def write(root: str | None, iteration: int, state: dict[str, Any]) -> str | None:
    """Write ``state`` into the iteration directory (None when there is no such directory)."""
    if not root:
        return None
    directory = iteration_dir(root, iteration)
    if not os.path.isdir(directory):
        return None
    path = os.path.join(directory, STATE_NAME)
    write_text_atomic(path, json.dumps(state, sort_keys=True) + "\n")
    return path


def read(root: str | None, iteration: int) -> dict[str, Any] | None:
    """The state saved with iteration ``iteration`` under ``root`` (None: not saved)."""
    if not root:
        return None
    path = os.path.join(iteration_dir(root, iteration), STATE_NAME)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as err:
        raise ConfigError(
            f"{path}: cannot read it ({err}); restore it from the checkpoint or delete it to resume "
            "without the fingerprint check"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object written by neox-epoch; delete it to resume without it")
    return data
