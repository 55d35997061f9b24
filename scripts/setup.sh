#!/usr/bin/env bash
# Create ./.venv with everything neox-epoch and its tests need (idempotent).
#   bash scripts/setup.sh        everything: torch, megatron-core, deepspeed, the test tools, the package
#   bash scripts/setup.sh core   only what the planner, the audit and the demo import: numpy, pyyaml, the package
# torch is pinned FIRST to 2.13.0 (the CPU build): an unpinned torch request pulls a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
if [ "${1:-}" = core ]; then
  core=.venv/.neox-epoch-core-v1
  if [ ! -f "$core" ]; then
    python -m pip install -q "numpy<2" pyyaml wheel
    touch "$core"
  fi
  # setuptools from the venv builds the package (no build isolation: nothing is downloaded for the build)
  python -m pip install -q --no-deps --no-build-isolation -e .
  exit 0
fi
stamp=.venv/.neox-epoch-setup-v3
if [ ! -f "$stamp" ]; then
  python -m pip install -q --upgrade "pip<26" wheel "setuptools<81"
  python -m pip install -q torch==2.13.0
  python -m pip install -q "numpy<2" packaging pyyaml pytest ruff matplotlib hypothesis
  python -m pip install -q megatron-core==0.16.1
  python -m pip install -q deepspeed==0.19.8
  # Megatron-LM's training side (tests/frameworks.py, megatron_lm_*) imports these beyond megatron-core.
  # triton 3.9.0 is the large one: a 286 MB wheel, about 1 GB installed (about 10 s to install here).
  python -m pip install -q six regex triton==3.9.0 pydantic
  touch "$stamp"
fi
python -m pip install -q --no-deps --no-build-isolation -e .
# The multi-node launch test (tests/test_neox_training.py) runs DeepSpeed's pdsh launcher over ssh to
# 127.0.0.1 with a private sshd (tests/local_sshd.py): Debian's openssh-server and pdsh, installed here as
# root when missing (elsewhere install them yourself; without them that test skips, and fails under CI=true).
if { [ ! -x /usr/sbin/sshd ] || ! command -v pdsh >/dev/null; } && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q openssh-server pdsh >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q openssh-server pdsh >/dev/null; }
fi
