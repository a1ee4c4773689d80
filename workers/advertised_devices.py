"""What a worker tells the API about its GPUs' memory and its generation, for its advert.

Read once when the worker starts, cheaply and without torch (the worker keeps torch and CUDA
out of its own process): ``nvidia-smi`` for the memory, the settings and an import check for
vLLM. Anything that cannot be read is None / False, and the API then checks nothing.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import subprocess
from typing import Any

logger = logging.getLogger(__name__)

NVIDIA_SMI_TIMEOUT_S = 10.0


def gpu_memory_gib(visible: str | None = None) -> float | None:
    """Total memory of the smallest GPU this worker may use (CUDA_VISIBLE_DEVICES, by index
    or UUID), in GiB; None without GPUs or nvidia-smi."""
    executable = shutil.which("nvidia-smi")
    if executable is None:
        return None
    try:
        listed = subprocess.run(
            [
                executable,
                "--query-gpu=index,uuid,memory.total",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        logger.warning("could not read the GPUs' memory with nvidia-smi: %s", exc)
        return None
    return smallest_visible_gib(
        listed, os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    )


def device_kind(accelerator: str) -> str:
    """What this worker's measured throughput is filed under: ``cpu``, or ``cuda:`` and the
    first GPU's name (``cuda:NVIDIA H200``; ``cuda`` when nvidia-smi cannot say)."""
    if accelerator != "cuda":
        return "cpu"
    executable = shutil.which("nvidia-smi")
    if executable is None:
        return "cuda"
    try:
        names = subprocess.run(
            [executable, "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            check=True,
        ).stdout.splitlines()
    except (OSError, subprocess.SubprocessError) as exc:
        logger.warning("could not read the GPUs' names with nvidia-smi: %s", exc)
        return "cuda"
    return f"cuda:{names[0].strip()}" if names and names[0].strip() else "cuda"


def generation_backend(settings: Any, accelerator: str) -> str:
    """The backend this worker's jobs generate with, as its advert says: ``vllm`` or
    ``transformers`` (the run itself records what it really used)."""
    if accelerator == "cuda":
        return "vllm" if generates_with_vllm_colocated(settings) else "transformers"
    return "vllm" if settings.generation_backend == "vllm" else "transformers"


def smallest_visible_gib(listed: str, visible: str | None) -> float | None:
    """From nvidia-smi's ``index, uuid, memory.total`` lines (MiB): the smallest of the GPUs
    that ``visible`` (CUDA_VISIBLE_DEVICES; None: all) names."""
    gpus: list[tuple[str, str, float]] = []
    for line in listed.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) != 3:
            continue
        try:
            gpus.append((fields[0], fields[1], float(fields[2]) / 1024))
        except ValueError:
            continue
    if visible is not None:
        wanted = [name.strip() for name in visible.split(",") if name.strip() not in ("", "-1")]
        gpus = [
            gpu
            for gpu in gpus
            if any(
                name == gpu[0] or (name.startswith("GPU-") and gpu[1].startswith(name))
                for name in wanted
            )
        ]
    if not gpus:
        return None
    return round(min(memory for _, _, memory in gpus), 1)


def generates_with_vllm_colocated(settings: Any) -> bool:
    """Whether this worker's jobs will generate with vLLM on their own GPUs: its settings
    allow it and vLLM is installed (what ``RFT_GENERATION_BACKEND=auto`` then picks). Only a
    check that vLLM can be found: importing it takes seconds."""
    if settings.generation_backend == "transformers" or settings.vllm_mode != "colocate":
        return False
    return importlib.util.find_spec("vllm") is not None
