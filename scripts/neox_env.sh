#!/usr/bin/env bash
# Create a CPU-only Python environment that can import and run GPT-NeoX's data code, and compile
# NeoX's C++ dataset helpers. Used by scripts/neox_golden.py and the NeoX-backed tests.
#
# Usage:
#   scripts/neox_env.sh NEOX_DIR VENV_DIR
#   NEOX_DIR=... NEOX_VENV=... scripts/neox_env.sh
#
# NEOX_DIR is a GPT-NeoX checkout (a bare git directory can be extracted with
# `git --git-dir=<dir> archive HEAD | tar -x -C <somewhere>`). VENV_DIR is created if missing.
# Optional: PYTHON (interpreter for the venv, default python3), TORCH_SPEC (default torch==2.13.0).
#
# Then:
#   NEOX_DIR=... VENV_DIR/bin/python scripts/neox_golden.py tests/fixtures/neox --neox-commit <sha>
set -euo pipefail

NEOX_DIR="${1:-${NEOX_DIR:-}}"
VENV="${2:-${NEOX_VENV:-}}"
PYTHON="${PYTHON:-python3}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if [[ -z "$NEOX_DIR" || -z "$VENV" ]]; then
    echo "usage: $0 NEOX_DIR VENV_DIR   (or set NEOX_DIR and NEOX_VENV)" >&2
    exit 2
fi
if [[ ! -f "$NEOX_DIR/megatron/data/helpers.cpp" ]]; then
    echo "error: $NEOX_DIR is not a GPT-NeoX checkout (no megatron/data/helpers.cpp)" >&2
    exit 2
fi
NEOX_DIR="$(cd "$NEOX_DIR" && pwd)"

[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
VENV="$(cd "$VENV" && pwd)"  # absolute: make -C changes directory, and PATH must still find the venv
PIP=("$VENV/bin/python" -m pip)

# torch first, pinned, so nothing later pulls another torch; every later install keeps it pinned.
"${PIP[@]}" install "$TORCH_SPEC"
PIN="$(mktemp)"
trap 'rm -f "$PIN"' EXIT
"$VENV/bin/python" -c 'import torch; print("torch==" + torch.__version__)' > "$PIN"

# megatron/__init__.py imports NeoXArgs: pyyaml, pkg_resources (setuptools<81), deepspeed,
# transformers/tokenizers/sentencepiece, requests. pybind11 builds the helpers.
"${PIP[@]}" install -c "$PIN" "numpy<2" pybind11 pyyaml "setuptools<81" wheel
# deepspeed stands in for DeeperSpeed (a git URL); no ops are compiled.
DS_BUILD_OPS=0 "${PIP[@]}" install -c "$PIN" --no-build-isolation deepspeed==0.16.5
"${PIP[@]}" install -c "$PIN" requests transformers==4.38.0 sentencepiece
# NeoX's tensorboard_dir writer (its own pinned requirement); the training tests read the events back.
"${PIP[@]}" install -c "$PIN" -r "$NEOX_DIR/requirements/requirements-tensorboard.txt"

# NeoX compiles megatron/data/helpers.cpp at run time with make; the venv's python3 must come first.
PATH="$VENV/bin:$PATH" make -C "$NEOX_DIR/megatron/data"

# This project, so that neox_epoch is importable next to NeoX.
"${PIP[@]}" install --no-deps -e "$REPO"

cd "$NEOX_DIR"
"$VENV/bin/python" -c 'from megatron.data import data_utils, gpt2_dataset, blendable_dataset, helpers; import neox_epoch.formats.corpus; print("NeoX data code imports OK")'
