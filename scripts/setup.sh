#!/usr/bin/env bash
# Create the virtual environments neox-epoch and its tests need (idempotent).
#   bash scripts/setup.sh        both stacks, everything the tests need:
#     ./.venv        NeoX's stack:  Python 3.11, numpy<2 (as GPT-NeoX pins), torch 2.13.0 (CPU build),
#                    megatron-core 0.16.1 (0.10.0 is installed by the tests into .cache/), deepspeed 0.19.8
#     ./.venv-today  today's stack: Python 3.12, the newest numpy 2.x, torch 2.14.1, megatron-core 0.19.2
#                    (Python >= 3.12 only; its wheel carries Megatron-LM 0.19's megatron/training), deepspeed 0.19.8
#   bash scripts/setup.sh core   only ./.venv with what the planner, the audit and the demo import
#   bash scripts/setup.sh neox | today   one stack
# torch is pinned FIRST in each venv: an unpinned torch request pulls a multi-GB CUDA build. On Python 3.12 only
# the CUDA build of torch 2.14.1 exists (about 5.5 GB with its nvidia wheels); it imports and runs on the CPU.
# Interpreters: PYTHON (default python3) for .venv; PYTHON_TODAY for .venv-today, else the first Python 3.12
# found as python3.12 or in pyenv's versions.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}

is_py312() { [ -n "$1" ] && "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' >/dev/null 2>&1; }

find_py312() {
  local root c
  root=$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")
  for c in "${PYTHON_TODAY:-}" python3.12 "$root"/versions/3.12*/bin/python3.12 /usr/bin/python3.12 \
           /usr/local/bin/python3.12; do
    if is_py312 "$c"; then command -v "$c" || echo "$c"; return 0; fi
  done
  return 1
}

base_tools() { python -m pip install -q --upgrade "pip<26" wheel "setuptools<81"; }
# setuptools from the venv builds the package (no build isolation: nothing is downloaded for the build)
install_self() { python -m pip install -q --no-deps --no-build-isolation -e .; }

setup_core() {
  [ -x .venv/bin/python ] || "${PYTHON:-python3}" -m venv .venv
  . .venv/bin/activate
  if [ ! -f .venv/.neox-epoch-core-v1 ]; then
    python -m pip install -q "numpy<2" pyyaml wheel
    touch .venv/.neox-epoch-core-v1
  fi
  install_self
  deactivate
}

setup_neox() {
  [ -x .venv/bin/python ] || "${PYTHON:-python3}" -m venv .venv
  . .venv/bin/activate
  if [ ! -f .venv/.neox-epoch-setup-v5 ]; then
    base_tools
    python -m pip install -q torch==2.13.0
    python -m pip install -q "numpy<2" packaging pyyaml pytest ruff hypothesis
    python -m pip install -q mypy==2.4.1  # scripts/test.sh type-checks on each stack (its own numpy's stubs)
    python -m pip install -q megatron-core==0.16.1
    python -m pip install -q deepspeed==0.19.8
    # Megatron-LM's training side (tests/helpers/frameworks.py, megatron_lm_*) imports these beyond megatron-core.
    # triton 3.9.0 is the large one: a 286 MB wheel, about 1 GB installed.
    python -m pip install -q six regex triton==3.9.0 pydantic
    # Megatron-LM's own TensorBoard writer (--tensorboard-dir), which the Megatron-LM hooks write through
    python -m pip install -q tensorboard
    touch .venv/.neox-epoch-setup-v5
  fi
  install_self
  deactivate
}

setup_today() {
  local py
  if [ ! -x .venv-today/bin/python ]; then
    py=$(find_py312) || { echo "setup: no Python 3.12 found for today's stack (.venv-today): install one (pyenv install 3.12) or set PYTHON_TODAY=/path/to/python3.12" >&2; exit 2; }
    "$py" -m venv .venv-today
  fi
  . .venv-today/bin/activate
  if [ ! -f .venv-today/.neox-epoch-setup-v3 ]; then
    base_tools
    python -m pip install -q torch==2.14.1
    python -m pip install -q "numpy>=2" packaging pyyaml pytest ruff hypothesis
    python -m pip install -q mypy==2.4.1
    python -m pip install -q megatron-core==0.19.2 deepspeed==0.19.8
    python -m pip install -q six regex pydantic tensorboard
    touch .venv-today/.neox-epoch-setup-v3
  fi
  install_self
  deactivate
}

setup_system() {
  # The multi-node launch test (tests/neox/test_neox_training.py) runs DeepSpeed's pdsh launcher over ssh to
  # 127.0.0.1 with a private sshd (tests/helpers/local_sshd.py): Debian's openssh-server and pdsh, installed here as
  # root when missing (elsewhere install them yourself; without them that test skips, and fails under CI=true).
  if { [ ! -x /usr/sbin/sshd ] || ! command -v pdsh >/dev/null; } && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q openssh-server pdsh >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q openssh-server pdsh >/dev/null; }
  fi
}

setup_chromium() {
  # The report page's browser test (tests/run_report/test_report_browser.py) renders the page in headless Chromium:
  # Debian's chromium, installed here as root when missing (elsewhere install it yourself; without it that test
  # skips, and fails under CI=true).
  command -v chromium >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null
  else
    echo "setup: chromium is not installed; the report page's browser test needs it: as root, apt-get install -y chromium" >&2
  fi
}

case "$what" in
  core) setup_core ;;
  neox) setup_neox; setup_system; setup_chromium ;;
  today) setup_today; setup_chromium ;;
  all) setup_neox; setup_today; setup_system; setup_chromium ;;
  *) echo "usage: bash scripts/setup.sh [all|core|neox|today]" >&2; exit 2 ;;
esac
