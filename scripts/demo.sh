#!/usr/bin/env bash
# README command one: set up, write the bundled demo corpus and plan every shipped config on it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
neox-epoch demo
