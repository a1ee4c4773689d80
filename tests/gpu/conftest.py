"""Tests that need CUDA GPUs: a job on one GPU (bf16, activation checkpointing, the CUDA
start-up check) and jobs over two GPUs (FSDP, DDP over NCCL). Each module says how many GPUs
its tests need (``GPUS_NEEDED``, default ``GPUS_PER_JOB``); on a machine with fewer they are
collected and skipped, saying why; a GPU machine runs them as they are
(``python -m pytest tests/gpu``, or ``bash scripts/gpu_check.sh``).

They train the built-in tiny model (no model hub needed) through the whole stack, as the CPU
tests in tests/integration do; what they add is what only GPUs exercise: FSDP (it does not run
on CPU), NCCL, bf16 and activation checkpointing ("auto" turns both on with CUDA).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from service.stack import LocalStack
from tests.conftest import stack_of_its_own, tenant_client
from tests.layers import needs_gpu

GPUS_PER_JOB = 2
HERE = Path(__file__).resolve().parent


def gpu_problem(needed: int = GPUS_PER_JOB) -> str | None:
    """Why tests needing ``needed`` GPUs cannot run here, or None when they can."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count < needed:
        return f"needs {needed} CUDA GPU(s), torch sees {count}"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE not in item.path.parents:
            continue
        module = getattr(item, "module", None)
        needed = getattr(module, "GPUS_NEEDED", GPUS_PER_JOB)
        problem = gpu_problem(needed)
        if problem is not None:
            item.add_marker(needs_gpu(problem, needed))


@contextlib.contextmanager
def stack_on_one_gpu(prefix: str, **env: str) -> Iterator[LocalStack]:
    """A stack whose one worker gives a job the first visible GPU, generating with
    model.generate() (vLLM's jobs have their own tests: tests/vllm_generation); ``env`` adds
    to the worker's settings."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
    base = {
        "RFT_WORKER_DEVICES": "1",
        "CUDA_VISIBLE_DEVICES": visible,
        "RFT_GENERATION_BACKEND": "transformers",
    }
    with stack_of_its_own(prefix, env={**base, **env}) as stack:
        yield stack


@pytest.fixture(scope="module")
def gpu_stack() -> Iterator[LocalStack]:
    """The whole service with one worker that gives a job two GPUs."""
    # The worker's GPUs: the first two unless the machine says otherwise.
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", ",".join(map(str, range(GPUS_PER_JOB))))
    with stack_of_its_own(
        "rft-gpu-",
        env={
            "RFT_WORKER_DEVICES": str(GPUS_PER_JOB),
            "CUDA_VISIBLE_DEVICES": visible,
            # Short, so a killed worker's job is taken over quickly.
            "RFT_WORKER_LEASE_S": "6",
            # model.generate() on the trainer's sharded model: what FSDP must serve. vLLM's
            # colocate jobs have their own tests (tests/vllm_generation, GPU or CPU).
            "RFT_GENERATION_BACKEND": "transformers",
        },
    ) as stack:
        yield stack


@pytest.fixture
def gpu_client(gpu_stack: LocalStack) -> Iterator[httpx.Client]:
    with tenant_client(gpu_stack) as http:
        yield http
