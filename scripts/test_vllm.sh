#!/usr/bin/env bash
# Runs the vLLM generation tests (tests/vllm_generation) in their own environment, .venv-vllm
# (vLLM's CPU build; created by scripts/setup_vllm.sh on first use). RFT_REQUIRE_VLLM=1 makes
# them fail instead of skipping if vLLM cannot generate there. Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_vllm.sh
RFT_REQUIRE_VLLM=1 .venv-vllm/bin/python -m pytest tests/vllm_generation "$@"
