#!/usr/bin/env bash
# README command one: set up (the core only), write the bundled demo corpus and plan every shipped config on it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh core   # numpy, pyyaml and the package: the demo imports nothing else
. .venv/bin/activate
neox-epoch demo
