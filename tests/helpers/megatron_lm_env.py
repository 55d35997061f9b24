"""Run ``tests/helpers/megatron_lm_truth.py`` under Megatron-LM's training code of this interpreter's stack.

NeoX's stack (Python 3.11): tag core_v0.16.1's tree from ``tests/helpers/frameworks.py`` (``MEGATRON_LM_DIR``, else the
vendored tarball extracted once into ``.cache/`` with the installed megatron-core wheel's compiled helpers
copied in), first on PYTHONPATH. Today's stack (Python >= 3.12): the megatron-core 0.19.2 wheel's own
megatron/training, with core_v0.19.0's pretrain_gpt.py after it on sys.path. The truth script reports the
version it ran.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import frameworks

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRUTH_SCRIPT = os.path.join(REPO, "tests", "helpers", "megatron_lm_truth.py")


def megatron_lm_dir() -> str:
    """The Megatron-LM tree of this stack: core_v0.16.1 (NeoX's stack) or core_v0.19.0 (today's: its
    pretrain_gpt.py and examples/); skips the calling test, with the reason, when it cannot be had here."""
    if frameworks.megatron_lm_stack() == "today":
        return frameworks.megatron_lm_019_dir()
    return frameworks.megatron_lm_dir()


def run_truth(cases: list[dict[str, Any]], workdir: str, timeout: float = 120.0) -> dict[str, Any]:
    """Run the truth script on ``cases`` with the Megatron-LM tree first on PYTHONPATH; its OUT.json."""
    today = frameworks.megatron_lm_stack() == "today"
    env = frameworks.megatron_lm_today_env() if today else frameworks.megatron_lm_env()
    os.makedirs(workdir, exist_ok=True)
    cases_path = os.path.join(workdir, "mlm-cases.json")
    out_path = os.path.join(workdir, "mlm-truth.json")
    with open(cases_path, "w", encoding="utf-8") as f:
        json.dump(cases, f)
    env.pop("WORLD_SIZE", None)
    env.pop("RANK", None)
    proc = subprocess.run(
        [sys.executable, TRUTH_SCRIPT, cases_path, out_path, "--timeout", str(timeout)],
        env=env,
        capture_output=True,
        text=True,
        cwd=workdir,
    )
    if proc.returncode != 0 or not os.path.isfile(out_path):
        raise RuntimeError(f"megatron_lm_truth.py failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    with open(out_path, encoding="utf-8") as f:
        return json.load(f)
