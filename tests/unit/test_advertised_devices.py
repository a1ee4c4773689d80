"""What a worker's advert says about its GPUs (workers.advertised_devices, and the advert
itself: service.work_queue.queue)."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from service.settings import Settings
from service.work_queue.queue import WorkerCapacity, _capacity
from workers import advertised_devices
from workers.advertised_devices import generates_with_vllm_colocated, smallest_visible_gib

# nvidia-smi --query-gpu=index,uuid,memory.total --format=csv,noheader,nounits
LISTED = """0, GPU-1a2b3c4d-0000-0000-0000-000000000000, 81559
1, GPU-5e6f7a8b-0000-0000-0000-000000000000, 81559
2, GPU-9c0d1e2f-0000-0000-0000-000000000000, 24564
"""


def test_the_smallest_gpu_the_worker_may_use() -> None:
    assert smallest_visible_gib(LISTED, None) == 24.0
    assert smallest_visible_gib(LISTED, "0,1") == 79.6
    # By UUID, and by its prefix, as CUDA_VISIBLE_DEVICES accepts them.
    assert smallest_visible_gib(LISTED, "GPU-5e6f7a8b") == 79.6
    assert smallest_visible_gib(LISTED, "") is None
    assert smallest_visible_gib("", None) is None
    assert smallest_visible_gib("garbage\n0, x, not-a-number\n", None) is None


def test_no_nvidia_smi_is_no_memory(monkeypatch: Any) -> None:
    monkeypatch.setattr(advertised_devices.shutil, "which", lambda name: None)
    assert advertised_devices.gpu_memory_gib() is None


def test_vllm_colocated_follows_the_settings(monkeypatch: Any) -> None:
    monkeypatch.setattr(advertised_devices.importlib.util, "find_spec", lambda name: object())
    assert generates_with_vllm_colocated(Settings())
    assert not generates_with_vllm_colocated(Settings(generation_backend="transformers"))
    assert not generates_with_vllm_colocated(Settings(vllm_mode="server"))
    monkeypatch.setattr(advertised_devices.importlib.util, "find_spec", lambda name: None)
    assert not generates_with_vllm_colocated(Settings())


def test_adverts_old_and_new_are_read() -> None:
    new = {"devices": 2, "accelerator": "cuda", "gpu_memory_gib": 79.6, "vllm": True}
    assert _capacity(json.dumps(new)) == WorkerCapacity(2, "cuda", 79.6, True)
    # Workers from before: no memory, no vLLM said, so nothing is checked against them.
    assert _capacity(json.dumps({"devices": 2, "accelerator": "cuda"})) == WorkerCapacity(2, "cuda")
    assert _capacity("3") == WorkerCapacity(3, "cpu")


def test_adverts_say_the_device_kind_and_generation_backend() -> None:
    advert = {"devices": 1, "accelerator": "cuda", "device_kind": "cuda:NVIDIA H200"}
    read = _capacity(json.dumps({**advert, "generation_backend": "vllm"}))
    assert (read.device_kind, read.generation_backend) == ("cuda:NVIDIA H200", "vllm")
    # Older workers (or a garbled field) say nothing: their kind is unknown, never guessed.
    old = _capacity(json.dumps({"devices": 1, "accelerator": "cpu", "device_kind": 7}))
    assert (old.device_kind, old.generation_backend) == (None, None)


def test_the_device_kind_names_the_gpu(monkeypatch: Any) -> None:
    assert advertised_devices.device_kind("cpu") == "cpu"
    monkeypatch.setattr(advertised_devices.shutil, "which", lambda name: None)
    assert advertised_devices.device_kind("cuda") == "cuda"  # no nvidia-smi to ask
    monkeypatch.setattr(advertised_devices.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    listed = subprocess.CompletedProcess([], 0, stdout="NVIDIA H200\nNVIDIA H200\n")
    monkeypatch.setattr(advertised_devices.subprocess, "run", lambda *args, **kwargs: listed)
    assert advertised_devices.device_kind("cuda") == "cuda:NVIDIA H200"
    assert (
        advertised_devices.generation_backend(Settings(generation_backend="vllm"), "cpu") == "vllm"
    )
    assert advertised_devices.generation_backend(Settings(), "cpu") == "transformers"
