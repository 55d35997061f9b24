"""Seeds as the frameworks validate them, refused before planning.

GPT-NeoX (``megatron/initialize.py``, ``_set_random_seed``) and Megatron-LM (``megatron/training/initialize.py``,
``_set_random_seed``) both stop at start-up on a seed that is not > 0 ("Seed (N) should be a positive integer."),
then seed numpy with it (``np.random.seed``), which refuses anything outside [0, 2^32 - 1] ("Seed must be between 0
and 2**32 - 1"); their dataset builders' ``np.random.RandomState(seed)`` refuses the same. A plan for a seed the
run refuses would be a plan of a run that never starts.
"""

from __future__ import annotations

from neox_epoch.errors import ConfigError

#: numpy's RandomState accepts seeds in [0, SEED_LIMIT)
SEED_LIMIT = 1 << 32


def check_seed(seed: int, key: str, framework: str) -> int:
    """``seed`` when ``framework`` ("GPT-NeoX" or "Megatron-LM") starts with it; else ConfigError naming ``key``."""
    if seed <= 0:
        raise ConfigError(
            f"{key}: {seed}; {framework} refuses it at start-up (_set_random_seed: 'Seed ({seed}) "
            f"should be a positive integer.'): expected a whole number in [1, {SEED_LIMIT - 1}]; "
            "set a positive seed"
        )
    if seed >= SEED_LIMIT:
        raise ConfigError(
            f"{key}: {seed}; {framework} seeds numpy with it, which refuses it ('Seed must be between "
            f"0 and 2**32 - 1'): expected a whole number in [1, {SEED_LIMIT - 1}]; set a smaller seed"
        )
    return seed
