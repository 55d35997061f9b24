#!/usr/bin/env bash
# README command two: set up, then run the whole test suite (real megatron-core 0.16.1 and 0.10.0,
# real deepspeed 0.19.8; GPT-NeoX tests run when NEOX_DIR points at a checkout, else they say they skipped).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
export DS_ACCELERATOR=cpu
ruff check neox_epoch tests scripts bench examples
python -m pytest -ra "$@"
