#!/usr/bin/env bash
# Runs the vLLM generation tests (tests/vllm_generation) in their own environment, .venv-vllm
# (vLLM's CPU build; created by scripts/setup_vllm.sh on first use). RFT_REQUIRE_VLLM=1 makes
# them fail instead of skipping if vLLM cannot generate there. Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_vllm.sh
# Each multiprocess engine start binds ZeroMQ sockets at VLLM_RPC_BASE_PATH/<uuid> (default:
# /tmp) and vLLM leaves the files behind: ~28 a run. Here they go to a folder removed after.
ipc_dir="$(mktemp -d -t rft-vllm-ipc.XXXXXX)"
trap 'rm -rf "$ipc_dir"' EXIT
VLLM_RPC_BASE_PATH="$ipc_dir" RFT_REQUIRE_VLLM=1 .venv-vllm/bin/python -m pytest \
  tests/vllm_generation "$@"
