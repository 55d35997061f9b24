"""The hooks' build check (neox_epoch.megatron_lm.build_check) on train splits built by the real megatron-core
BlendedMegatronDatasetBuilder: the build of a plan matches it; the build of another plan is refused with one line
per difference (samples built per source, the blend's size and draws)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optional
import pytest

optional.require("megatron.core")

from neox_epoch.mcore import exact_config  # noqa: E402
from neox_epoch.megatron_lm.build_check import BuildMismatch, check, differences  # noqa: E402
from tests.mcore.test_mcore_counters import build_train, gpt_config  # noqa: E402


def test_build_against_its_plan_and_another(corpus: Any, tmp_path: Path) -> None:
    prefixes = [corpus(f"s{k}", 40 + k, n, 1, 300) for k, n in enumerate([150, 90])]
    config = gpt_config(prefixes, [0.5, 0.5], str(tmp_path / "cache"))
    setup = exact_config(config, {"s0": 1, "s1": 2}, 8)
    train = build_train(setup)
    assert differences(setup.plan, train) == []
    check(setup.plan, train)
    other = exact_config(config, {"s0": 1, "s1": 1}, 8).plan
    found = differences(other, train)
    assert found and any(line.startswith("s1: ") and "samples built, planned" in line for line in found)
    with pytest.raises(BuildMismatch, match="differs from the plan:\n  "):
        check(other, train)
