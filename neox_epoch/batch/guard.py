"""Worker-side guard: stop before any model is built when the launched world is not the planned one.

Call :func:`check_world` first thing in the training script (after the launcher started it, before
``deepspeed.initialize`` or model construction). DeepSpeed finds a wrong world only inside
``deepspeed.initialize``, after the model is built; this reads ``WORLD_SIZE`` (set by every launcher:
deepspeed, torchrun, the MPI backends) and fails at once. Imports nothing but the standard library.
"""

from __future__ import annotations

import os

from neox_epoch.errors import BatchError, ConfigError
from neox_epoch.util.values import is_whole


def _env_int(name: str) -> int:
    raw = os.environ.get(name)
    if raw is None:
        raise ConfigError(
            f"environment variable {name} is not set; expected a process started by a launcher "
            "(deepspeed, torchrun); call check_world in the training script, after launch"
        )
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f'environment variable {name} is "{raw}"; expected an integer set by the launcher') from None
    if value <= 0:
        raise ConfigError(f"environment variable {name} is {value}; expected a positive integer set by the launcher")
    return value


def check_world(expected_world: int, expected_dp: int | None = None) -> int:
    """Compare ``WORLD_SIZE`` with the world the batch/epoch plan assumed; return ``WORLD_SIZE``.

    ``expected_dp`` (optional) is the planned data-parallel size; ``expected_world / expected_dp`` is then
    the model-parallel product (pp * mp), and the launched dp is ``WORLD_SIZE`` divided by it.
    Raises :class:`BatchError` on a mismatch, :class:`ConfigError` when ``WORLD_SIZE`` is missing or
    the expectations themselves are inconsistent.
    """
    if not is_whole(expected_world, 1):
        raise ConfigError(f"check_world: expected_world is {expected_world!r}; expected a positive integer")
    world = _env_int("WORLD_SIZE")
    rank = os.environ.get("RANK", "?")
    if expected_dp is not None:
        if not is_whole(expected_dp, 1):
            raise ConfigError(f"check_world: expected_dp is {expected_dp!r}; expected a positive integer")
        if expected_world % expected_dp:
            raise ConfigError(
                f"check_world: expected_world {expected_world} is not a multiple of expected_dp {expected_dp}; "
                "expected world = dp * pp * mp; pass the values check-batch printed"
            )
        model_parallel = expected_world // expected_dp
        if world % model_parallel:
            raise BatchError(
                f"WORLD_SIZE is {world} (rank {rank}) but the plan assumed {expected_world} processes with "
                f"pp * mp = {model_parallel}, which does not divide {world}; launch {expected_world} processes or "
                "re-run neox-epoch check-batch with the launcher flags used"
            )
        dp = world // model_parallel
        if dp != expected_dp:
            raise BatchError(
                f"WORLD_SIZE is {world} (rank {rank}), so dp = {world} / {model_parallel} = {dp}, but the plan "
                f"assumed dp {expected_dp} (world {expected_world}); launch {expected_world} processes or re-run "
                "neox-epoch check-batch with the launcher flags used and re-plan"
            )
    if world != expected_world:
        raise BatchError(
            f"WORLD_SIZE is {world} (rank {rank}) but the plan assumed a world of {expected_world}; launch "
            f"{expected_world} processes or re-run neox-epoch check-batch with the launcher flags used and re-plan"
        )
    return world
