"""One answer to "does this worker have usable CUDA" (workers.training.cuda): torch's, with the
driver's GPUs only to notice GPUs torch cannot use. A worker that sees GPUs it cannot use
refuses to start naming the driver's and torch's CUDA versions; every place that decides
between CUDA and CPU asks the same function. The probes (driver, torch) are monkeypatched."""

from __future__ import annotations

import argparse
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from workers.training import cuda, engines, generation
from workers.training.cuda import CudaProbe, probe_cuda, usable_cuda_devices
from workers.training.engines import EngineUnavailable, check_engine_available

ROOT = Path(__file__).resolve().parents[2]
DRIVER_VERSION_FILE = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.54.03  Tue Jun  6 22:20:39 UTC 2023\n"
    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
)


@pytest.fixture(autouse=True)
def fresh_probe() -> Iterator[None]:
    probe_cuda.cache_clear()
    yield
    probe_cuda.cache_clear()


def machine(
    monkeypatch: pytest.MonkeyPatch,
    *,
    driver_gpus: int,
    usable: int,
    torch_cuda: str | None = "12.8",
    driver_version: str | None = "535.54.03",
) -> None:
    """What the probes see: the driver's GPUs and version, and torch's build and answer."""
    monkeypatch.setattr(cuda, "_driver_gpus", lambda: driver_gpus)
    monkeypatch.setattr(cuda, "_driver_version", lambda: driver_version)
    monkeypatch.setattr(cuda, "_torch_cuda", lambda: ("2.13.0", torch_cuda, usable))


def start_worker(monkeypatch: pytest.MonkeyPatch, devices: int = 1) -> int:
    from server import cli
    from service.settings import get_settings

    monkeypatch.setenv("RFT_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    monkeypatch.setenv("RFT_REDIS_URL", "redis://127.0.0.1:1/0")
    monkeypatch.setenv("RFT_WORKER_DEVICES", str(devices))
    # Past the checks, the worker would start Celery: not here.
    from service.work_queue import celery_app

    monkeypatch.setattr(celery_app.celery_app, "worker_main", lambda argv: None)
    get_settings.cache_clear()
    try:
        return cli._worker(argparse.Namespace(exports_only=False))
    finally:
        get_settings.cache_clear()


def test_a_driver_older_than_torchs_cuda_stops_the_worker_naming_both_versions(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    machine(monkeypatch, driver_gpus=2, usable=0, torch_cuda="12.8", driver_version="535.54.03")
    assert usable_cuda_devices() == 0
    assert start_worker(monkeypatch) == 2
    error = capsys.readouterr().err
    assert "NVIDIA driver 535.54.03" in error and "CUDA 12.8" in error, error
    assert "torch.version.cuda" in error and "train on CPU" in error
    assert 'CUDA_VISIBLE_DEVICES=""' in error  # the way to train on CPU on purpose


def test_a_cpu_build_of_torch_beside_a_driver_stops_the_worker(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    machine(monkeypatch, driver_gpus=1, usable=0, torch_cuda=None, driver_version="550.54.14")
    assert start_worker(monkeypatch) == 2
    error = capsys.readouterr().err
    assert "NVIDIA driver 550.54.14" in error and "CPU build" in error, error


@pytest.mark.parametrize(
    ("driver_gpus", "usable"),
    [(0, 0), (2, 2)],  # a CPU machine (or GPUs hidden on purpose); GPUs torch can use
)
def test_a_worker_whose_torch_agrees_with_its_driver_starts(
    monkeypatch: pytest.MonkeyPatch, driver_gpus: int, usable: int
) -> None:
    machine(monkeypatch, driver_gpus=driver_gpus, usable=usable)
    assert probe_cuda().problem() is None
    assert start_worker(monkeypatch, devices=max(1, usable)) == 0


def test_a_worker_offering_more_gpus_than_it_can_use_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    machine(monkeypatch, driver_gpus=2, usable=2)
    assert start_worker(monkeypatch, devices=4) == 2
    assert "RFT_WORKER_DEVICES=4, but this worker sees 2 GPU(s)" in capsys.readouterr().err


def test_gpus_torch_cannot_use_count_as_none_wherever_the_worker_decides(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The driver lists a GPU, torch cannot use it: fsdp is refused (rather than run as DDP
    on CPU), and generation and the trainer take the CPU."""
    machine(monkeypatch, driver_gpus=1, usable=0)
    with pytest.raises(EngineUnavailable, match="none that torch can use"):
        check_engine_available("fsdp")
    assert generation._trainer_device() == "cpu"
    probe_cuda.cache_clear()
    machine(monkeypatch, driver_gpus=1, usable=1)
    check_engine_available("fsdp")
    assert generation._trainer_device() == "cuda"


def test_nothing_else_asks_the_driver_or_torch_whether_cuda_is_there() -> None:
    """One answer: outside workers/training/cuda.py no worker or service code reads the
    driver's /proc files or calls torch.cuda.is_available() to pick CUDA or CPU."""
    offenders = []
    for folder in ("workers", "service"):
        for path in (ROOT / folder).rglob("*.py"):
            if path == Path(cuda.__file__):
                continue
            text = path.read_text()
            if re.search(r"/proc/driver/nvidia|torch\.cuda\.is_available\(", text):
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []
    assert engines.usable_cuda_devices is usable_cuda_devices


def test_the_driver_lists_gpus_narrowed_by_cuda_visible_devices(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for index in range(4):
        (tmp_path / "gpus" / f"0000:0{index}:00.0").mkdir(parents=True)
    monkeypatch.setattr(cuda, "NVIDIA_PROC", str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert cuda._driver_gpus() == 4
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert cuda._driver_gpus() == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert cuda._driver_gpus() == 0
    monkeypatch.setattr(cuda, "NVIDIA_PROC", str(tmp_path / "absent"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert cuda._driver_gpus() == 0


@pytest.mark.parametrize(
    ("text", "version"),
    [
        (DRIVER_VERSION_FILE, "535.54.03"),
        (
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.14  Release Build"
            "  (dvs-builder@U16-I3-B03-4-3)  Thu Feb 22 01:25:25 UTC 2024\n",
            "550.54.14",
        ),
    ],
)
def test_the_driver_version_comes_from_proc(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, text: str, version: str
) -> None:
    (tmp_path / "version").write_text(text)
    monkeypatch.setattr(cuda, "NVIDIA_PROC", str(tmp_path))
    monkeypatch.setattr(cuda.shutil, "which", lambda name: pytest.fail("nvidia-smi asked"))
    assert cuda._driver_version() == version


def test_without_the_proc_file_nvidia_smi_says_the_driver_version(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(cuda, "NVIDIA_PROC", str(tmp_path))  # no version file
    monkeypatch.setattr(cuda.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    asked: list[list[str]] = []

    def nvidia_smi(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        asked.append(command)
        return subprocess.CompletedProcess(command, 0, stdout="535.54.03\n535.54.03\n")

    monkeypatch.setattr(cuda.subprocess, "run", nvidia_smi)
    assert cuda._driver_version() == "535.54.03"
    assert asked == [["/usr/bin/nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]]
    monkeypatch.setattr(cuda.shutil, "which", lambda name: None)
    assert cuda._driver_version() is None


def test_an_unknown_driver_version_is_said_so() -> None:
    probe = CudaProbe(
        driver_gpus=1, usable_gpus=0, driver_version=None, torch_version="2.13.0", torch_cuda="13.0"
    )
    problem = probe.problem()
    assert problem is not None
    assert "NVIDIA driver of unknown version" in problem and "CUDA 13.0" in problem


def test_without_a_driver_torch_is_not_asked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No NVIDIA driver (nor WSL2's GPU device): no CUDA library reaches a GPU, and a CPU
    worker keeps torch (seconds to import) out of its process."""
    monkeypatch.setattr(cuda, "NVIDIA_PROC", str(tmp_path / "absent"))
    monkeypatch.setattr(cuda, "WSL_GPU_DEVICE", str(tmp_path / "dxg"))
    monkeypatch.setattr(cuda, "_torch_cuda", lambda: pytest.fail("torch asked"))
    assert usable_cuda_devices() == 0 and probe_cuda().problem() is None
    # WSL2: CUDA without /proc/driver/nvidia; torch answers.
    probe_cuda.cache_clear()
    (tmp_path / "dxg").touch()
    monkeypatch.setattr(cuda, "_torch_cuda", lambda: ("2.13.0", "12.8", 1))
    assert usable_cuda_devices() == 1


def test_the_real_probe_answers_as_torch_does_here() -> None:
    """Unpatched: on this machine torch's answer is the answer (CPU where there is no GPU)."""
    import torch

    expected = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert usable_cuda_devices() == expected
