#!/usr/bin/env bash
# Sets up and runs every check: ruff, mypy and the whole pytest suite (real Postgres, Redis,
# Celery worker and TRL training on the tiny model), then the vLLM generation tests in their own
# environment (.venv-vllm, vLLM's CPU build; RFT_TEST_VLLM=0 leaves them out).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The vLLM environment builds (minutes of downloads and unpacking on a fresh machine) while the
# main suite runs; the vLLM stage waits for it.
vllm_setup_pid=""
vllm_setup_log="$(mktemp -t rft-setup-vllm.XXXXXX.log)"
if [ "${RFT_TEST_VLLM:-1}" != 0 ]; then
  bash scripts/setup_vllm.sh >"$vllm_setup_log" 2>&1 &
  vllm_setup_pid=$!
  trap '[ -n "$vllm_setup_pid" ] && kill "$vllm_setup_pid" 2>/dev/null; rm -f "$vllm_setup_log"' EXIT
fi
# In CI a missing sandbox layer (bubblewrap, cgroups, seccomp) or Chromium fails the tests that
# need it instead of skipping them: CI would otherwise pass with them gone (tests/layers.py).
if [ "${CI:-}" = true ]; then
  export RFT_REQUIRE_ALL_LAYERS="${RFT_REQUIRE_ALL_LAYERS:-1}"
fi
# shellcheck disable=SC1091
. .venv/bin/activate
ruff check .
ruff format --check .
# mypy's cache lives outside the clone, keyed by mypy's version (workers/compiled_caches.py).
MYPY_CACHE_DIR="${MYPY_CACHE_DIR:-$(python -c \
  'from workers.compiled_caches import mypy_cache_dir; print(mypy_cache_dir())')}" mypy
# The docs site (mkdocs.yml): a broken link, anchor or included file fails the build.
NO_MKDOCS_2_WARNING=1 mkdocs build --strict
# The vLLM stage runs after the main suite, not beside it: on 2 cores both saturate the CPU,
# and side by side the main suite lost more time than the vLLM stage took alone (measured on
# a fresh clone: the first 28 % of the main suite took 21 min beside the vLLM stage, against 8
# min in an earlier run with the stages in turn, while the stage took 13.5 min against 7.7).
python -m pytest "$@"
# The vLLM tests skipped above (no vllm in .venv) run here, where vLLM missing is an error.
if [ "${RFT_TEST_VLLM:-1}" != 0 ]; then
  if ! wait "$vllm_setup_pid"; then
    vllm_setup_pid=""
    echo "scripts/setup_vllm.sh failed:" >&2
    cat "$vllm_setup_log" >&2
    exit 1
  fi
  vllm_setup_pid=""
  cat "$vllm_setup_log"
  bash scripts/test_vllm.sh
fi
