#!/usr/bin/env bash
# README command two: set up, then run the whole test suite (real megatron-core 0.16.1 and 0.10.0,
# real deepspeed 0.19.8; real GPT-NeoX and Megatron-LM from NEOX_DIR / MEGATRON_LM_DIR, else from the vendored
# tarballs in ../shared/vendor, extracted into .cache/ (tests/frameworks.py); under CI=true none may skip).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
export DS_ACCELERATOR=cpu
ruff check neox_epoch tests scripts bench examples
python -m pytest -ra "$@"
