#!/usr/bin/env bash
# Sets up and runs every check: ruff, mypy, the docs site build and the whole pytest suite (real Postgres, Redis,
# Celery worker and TRL training on the tiny model), and beside it the vLLM generation tests in
# their own environment (.venv-vllm, vLLM's CPU build; RFT_TEST_VLLM=0 leaves them out).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# In CI a missing sandbox layer (bubblewrap, cgroups, seccomp) or Chromium fails the tests that
# need it instead of skipping them: CI would otherwise pass with them gone (tests/layers.py).
if [ "${CI:-}" = true ]; then
  export RFT_REQUIRE_ALL_LAYERS="${RFT_REQUIRE_ALL_LAYERS:-1}"
fi
# The vLLM stage (tests/vllm_generation in .venv-vllm) runs beside the main suite: its
# environment builds (minutes of downloads and unpacking on a fresh machine) while ruff, mypy
# and the first tests run, then its tests run while the main suite goes on. Much of either
# suite's time is spent waiting (engine and worker starts, step polling), so the two share the
# cores rather than each waiting its turn. Its output is printed after the main suite's.
vllm_stage_pid=""
vllm_stage_log="$(mktemp -t rft-vllm-stage.XXXXXX.log)"
trap '[ -n "$vllm_stage_pid" ] && kill -- "-$vllm_stage_pid" 2>/dev/null; rm -f "$vllm_stage_log"' EXIT
if [ "${RFT_TEST_VLLM:-1}" != 0 ]; then
  # A session of its own (setsid), so that an early exit here (ruff, mypy) stops its whole tree.
  setsid bash -c '
    started=$SECONDS
    bash scripts/setup_vllm.sh || { echo "scripts/setup_vllm.sh failed"; exit 1; }
    echo "vLLM environment ready after $((SECONDS - started)) s"
    started=$SECONDS
    status=0
    bash scripts/test_vllm.sh || status=$?
    echo "vLLM tests took $((SECONDS - started)) s"
    exit $status
  ' >"$vllm_stage_log" 2>&1 &
  vllm_stage_pid=$!
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
main_status=0
python -m pytest "$@" || main_status=$?
# The vLLM tests skipped above (no vllm in .venv) ran in the stage beside it, where vLLM
# missing is an error.
vllm_status=0
if [ -n "$vllm_stage_pid" ]; then
  wait "$vllm_stage_pid" || vllm_status=$?
  vllm_stage_pid=""
  echo "=== vLLM stage (tests/vllm_generation in .venv-vllm) ==="
  cat "$vllm_stage_log"
fi
if [ "$main_status" != 0 ] || [ "$vllm_status" != 0 ]; then
  echo "failed: main suite exit $main_status, vLLM stage exit $vllm_status" >&2
  exit 1
fi
