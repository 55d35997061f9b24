"""The same runs as tests/megatron_lm/test_megatron_lm_training.py on Megatron-LM core_v0.16.1 (NeoX's stack:
Python 3.11, megatron-core 0.16.1, the core_v0.16.1 tree first on PYTHONPATH as tests/helpers/frameworks.py
megatron_lm_env() sets it)."""

from __future__ import annotations

import os

import frameworks
import pytest
from test_megatron_lm_training import *  # noqa: F403 (the same fixtures and tests, on this stack)

pytestmark = [pytest.mark.megatron_lm, pytest.mark.slow, frameworks.needs_stack("neox")]


@pytest.fixture(scope="module")
def mlm_stack() -> tuple[str, dict[str, str]]:
    """core_v0.16.1's pretrain_gpt.py and the environment with its tree first on PYTHONPATH."""
    return os.path.join(frameworks.megatron_lm_dir(), "pretrain_gpt.py"), frameworks.megatron_lm_env()
