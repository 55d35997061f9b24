#!/usr/bin/env bash
# Verify a megatron-core release: run the truth suite (plan vs the real builder, exact tokens, plan vs audit,
# the audit on real caches, resume-check vs the real loaders, the counters) against megatron-core VERSION.
#   bash scripts/verify_megatron.sh 0.19.3            on today's stack (.venv-today, Python 3.12)
#   STACK=neox bash scripts/verify_megatron.sh 0.16.2 on NeoX's stack (.venv, Python 3.11)
# VERSION is installed without its dependencies into .cache/mcore-VERSION (tests/helpers/mcore_env.py) and put first
# on PYTHONPATH, so it shadows the stack's own megatron-core. When everything passes, adding VERSION to
# VERIFIED_MCORE_VERSIONS in neox_epoch/formats/detect.py is the one-line change that lets `neox-epoch plan` use it
# without --force-version (and to tests/mcore_env.STACK_VERSIONS, so CI keeps checking it).
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: bash scripts/verify_megatron.sh VERSION   (for example 0.19.3)}
shift
stack=${STACK:-today}
venv=.venv; [ "$stack" = today ] && venv=.venv-today
bash scripts/setup.sh "$stack"
py="$venv/bin/python"
# the PYTHONPATH entry holding VERSION ("" when the stack already has it), or FAILED: why
target=$(cd tests && "../$py" - "$version" <<'PY'
import sys

import mcore_env

path = mcore_env.mcore_pythonpath(sys.argv[1])
print(path if path is not None else "FAILED: " + mcore_env.LAST_FAILURE.get(sys.argv[1], "pip install failed"))
PY
)
case "$target" in FAILED:*) echo "verify_megatron: megatron-core $version: ${target#FAILED: }" >&2; exit 2 ;; esac
where=${target:-the install of stack $stack}
echo "== megatron-core $version from $where"
export DS_ACCELERATOR=cpu NEOX_EPOCH_STACK=$stack NEOX_EPOCH_MCORE_VERSIONS=$version
PYTHONPATH="$target${PYTHONPATH:+:$PYTHONPATH}" "$py" -m pytest -ra \
  tests/mcore/test_mcore_truth.py tests/audit/test_plan_vs_audit.py tests/mcore/test_exact_tokens_mcore.py tests/audit/test_audit_mcore.py \
  tests/mcore/test_mcore_e2e.py tests/mcore/test_mcore_counters.py tests/resume/test_resume_moves.py "$@"
