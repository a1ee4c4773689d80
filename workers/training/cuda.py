"""Does this worker have usable CUDA: one answer (``usable_cuda_devices``), asked by the worker's
start-up check and its advert, the engine check (``fsdp``), the generation choice and the
trainer alike.

torch decides where a job trains (``torch.cuda.is_available()``), so torch gives the answer.
The NVIDIA driver (``/proc/driver/nvidia``) only says that GPUs are there: with a driver older
than the CUDA the torch wheel was built for, or a CPU build of torch, they are there and
unusable, and jobs would train on CPU without a word (an ``fsdp`` job as plain DDP). A worker
in that state refuses to start (``CudaProbe.problem``), naming both versions.

Where no NVIDIA kernel driver is there at all (nor WSL2's GPU device, ``/dev/dxg``), or
CUDA_VISIBLE_DEVICES hides every GPU, no CUDA library can reach a GPU and torch is not asked:
a CPU worker keeps torch out of its own process (importing it takes seconds).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

NVIDIA_PROC = "/proc/driver/nvidia"
# WSL2's paravirtualised GPU: CUDA works there without /proc/driver/nvidia.
WSL_GPU_DEVICE = "/dev/dxg"


@dataclass(frozen=True)
class CudaProbe:
    """What this process sees: GPUs the driver lists, and those torch can use."""

    driver_gpus: int  # listed by the driver, narrowed by CUDA_VISIBLE_DEVICES
    usable_gpus: int  # torch.cuda.device_count() where torch.cuda.is_available(), else 0
    driver_version: str | None  # None: unknown (or no driver)
    torch_version: str | None  # None: torch not asked (no GPU to reach)
    torch_cuda: str | None  # torch.version.cuda, the CUDA the wheel was built for; None: CPU

    def problem(self) -> str | None:
        """Why GPUs the driver shows cannot train, or None (usable, or none there)."""
        if self.usable_gpus > 0 or self.driver_gpus == 0:
            return None
        driver = (
            f"NVIDIA driver {self.driver_version}"
            if self.driver_version
            else "an NVIDIA driver of unknown version"
        )
        if self.torch_cuda is None:
            why = f"torch {self.torch_version} is a CPU build (torch.version.cuda is None)"
        else:
            why = (
                f"torch {self.torch_version} is built for CUDA {self.torch_cuda} "
                "(torch.version.cuda), and torch.cuda.is_available() is False: a driver older "
                "than that CUDA needs is the usual cause"
            )
        return (
            f"this worker sees {self.driver_gpus} GPU(s) with {driver}, but torch cannot use "
            f"them: {why}. Jobs would train on CPU without saying so (an fsdp job as plain "
            "DDP). Update the driver, or install a torch built for a CUDA this driver runs; "
            'to train on CPU on purpose, hide the GPUs (CUDA_VISIBLE_DEVICES="").'
        )


@functools.cache
def probe_cuda() -> CudaProbe:
    """This process's answer, probed once: torch's, as the trainer asks it."""
    driver_gpus = _driver_gpus()
    if driver_gpus == 0 and not Path(WSL_GPU_DEVICE).exists():
        torch_version, torch_cuda, usable = None, None, 0
    else:
        torch_version, torch_cuda, usable = _torch_cuda()
    return CudaProbe(
        driver_gpus=driver_gpus,
        usable_gpus=usable,
        driver_version=_driver_version() if driver_gpus else None,
        torch_version=torch_version,
        torch_cuda=torch_cuda,
    )


def usable_cuda_devices() -> int:
    """CUDA GPUs this process can train on: 0 means CPU, whatever the driver says."""
    return probe_cuda().usable_gpus


def driver_lists_gpus() -> bool:
    """Whether the NVIDIA driver lists a GPU this process may see (torch not asked)."""
    return _driver_gpus() > 0


def _driver_gpus() -> int:
    """GPUs the driver lists (``/proc/driver/nvidia/gpus``), narrowed by CUDA_VISIBLE_DEVICES."""
    gpus = Path(NVIDIA_PROC) / "gpus"
    present = len(list(gpus.iterdir())) if gpus.is_dir() else 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return present
    chosen = [device for device in visible.split(",") if device.strip() not in ("", "-1")]
    return min(present, len(chosen))


def _driver_version() -> str | None:
    """The driver's version, from ``/proc/driver/nvidia/version`` or else ``nvidia-smi``."""
    try:
        text = (Path(NVIDIA_PROC) / "version").read_text()
    except OSError:
        text = ""
    # "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 ..." (the open
    # modules say "... Open Kernel Module for x86_64  550.54.14 ...").
    found = re.search(r"NVRM version:.*?\b(\d+\.\d+(?:\.\d+)*)\b", text)
    if found:
        return found.group(1)
    nvidia_smi = shutil.which("nvidia-smi")
    if nvidia_smi is None:
        return None
    try:
        answer = subprocess.run(
            [nvidia_smi, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = answer.stdout.strip().splitlines()
    return lines[0].strip() if answer.returncode == 0 and lines else None


def _torch_cuda() -> tuple[str, str | None, int]:
    """torch's version, the CUDA it was built for, and the GPUs it can use."""
    import torch

    usable = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return torch.__version__, torch.version.cuda, usable
