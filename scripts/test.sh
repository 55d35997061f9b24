#!/usr/bin/env bash
# README command two (what CI runs): set up both stacks, check lint, format and types, then run the test suite on each.
#   NeoX's stack (.venv: Python 3.11, numpy<2, megatron-core 0.16.1 and 0.10.0): every test.
#   Today's stack (.venv-today: Python 3.12, numpy 2.x, megatron-core 0.19.2): every test that can run there;
#   tests that run on one stack only carry the `stack` marker (GPT-NeoX's own tests: NeoX pins numpy<2) and are
#   deselected on the other, with the reason in the summary (tests/conftest.py).
# Real GPT-NeoX and Megatron-LM come from NEOX_DIR / MEGATRON_LM_DIR, else from the vendored tarballs in
# ../shared/vendor, extracted into .cache/ (tests/helpers/frameworks.py); under CI=true none may skip.
# The two stacks' suites run at the same time (SERIAL=1: one after the other); NeoX's output comes as it runs, today's
# when both have ended. Arguments are passed to both pytest runs; STACKS="neox" (or "today") runs one stack only.
set -euo pipefail
cd "$(dirname "$0")/.."
stacks=${STACKS:-neox today}
if [ "$stacks" = "neox today" ]; then bash scripts/setup.sh all; else for s in $stacks; do bash scripts/setup.sh "$s"; done; fi
export DS_ACCELERATOR=cpu
export NEOX_EPOCH_STACK_PYTHONS="neox=$PWD/.venv/bin/python,today=$PWD/.venv-today/bin/python"
.venv/bin/ruff check neox_epoch tests scripts bench examples
.venv/bin/ruff format --check neox_epoch tests scripts bench examples
for s in $stacks; do  # type checks ([tool.mypy] in pyproject.toml) at each stack's Python and numpy stubs
  venv=.venv; [ "$s" = today ] && venv=.venv-today
  echo "== mypy, stack $s"
  "$venv/bin/python" -m mypy
done
run_stack() {  # the suite on one stack: run_stack STACK PYTEST-ARGS...
  local stack=$1 venv=.venv
  shift
  [ "$stack" = today ] && venv=.venv-today
  echo "== stack $stack: $("$venv/bin/python" -c 'import sys, numpy; print(f"Python {sys.version.split()[0]}, numpy {numpy.__version__}")')"
  NEOX_EPOCH_STACK=$stack "$venv/bin/python" -m pytest -ra --durations=40 "$@"
}
status=0
if [ "$stacks" = "neox today" ] && [ "${SERIAL:-0}" != 1 ]; then
  # both stacks at once (each its own pytest and temporary folders; SERIAL=1: one after the other): NeoX's output
  # as it comes, today's kept in a file and printed when both have ended
  today_log=$(mktemp)
  trap 'rm -f "$today_log"' EXIT
  run_stack today "$@" > "$today_log" 2>&1 &
  today_pid=$!
  run_stack neox "$@" || status=$?
  wait "$today_pid" || status=$?
  cat "$today_log"
else
  for s in $stacks; do
    run_stack "$s" "$@" || status=$?
  done
fi
exit $status
