"""The worker says what generates each job, and refuses a backend it cannot run.

(Jobs that generate with vLLM are in tests/vllm_generation, which runs in .venv-vllm.)
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from service.stack import LocalStack
from tests.conftest import tenant_client
from tests.integration.helpers import all_pages, create_job, upload_jsonl, wait_for
from tests.layers import needs_layer
from tests.tiny import TINY_HYPERPARAMETERS

pytestmark = [
    pytest.mark.integration,
    # The main environment (CI's) has no vllm by design: there these tests always run.
    needs_layer(
        importlib.util.find_spec("vllm") is None,
        "vllm is installed here; these tests are about a worker without it",
    ),
]

LETTER_A = (
    "def letter_a(prompt, completion, example):\n"
    "    return completion.count('a') / max(1, len(completion))\n"
)


def one_step_job(client: httpx.Client) -> dict[str, object]:
    dataset_id = upload_jsonl(client, [{"prompt": f"Say {w}:"} for w in "abcd"])
    return create_job(
        client,
        {
            "dataset_id": dataset_id,
            "reward_functions": {"letter_a": {"source": LETTER_A}},
            "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 1},
        },
    )


def test_without_vllm_auto_generates_with_transformers_and_says_so(client: httpx.Client) -> None:
    job = wait_for(client, str(one_step_job(client)["id"]))
    assert job["status"] == "succeeded", job["failure_reason"]
    events = all_pages(client, f"/v1/jobs/{job['id']}/events/history")
    generation = [e for e in events if e["kind"] == "generation"]
    assert [e["message"] for e in generation] == ["generation: transformers (cpu)"]
    assert generation[0]["data"]["backend"] == "transformers"
    assert "vllm is not installed" in generation[0]["data"]["why_not_vllm"]


@pytest.fixture(scope="module")
def vllm_required_stack() -> Iterator[LocalStack]:
    state_dir = Path(tempfile.mkdtemp(prefix="rft-novllm-"))
    with LocalStack(state_dir, workers=1, extra_env={"RFT_GENERATION_BACKEND": "vllm"}) as stack:
        yield stack
    shutil.rmtree(state_dir, ignore_errors=True)


def test_vllm_asked_for_without_vllm_fails_the_job_at_start_saying_what_to_install(
    vllm_required_stack: LocalStack,
) -> None:
    with tenant_client(vllm_required_stack) as client:
        job = wait_for(client, str(one_step_job(client)["id"]))
        assert job["status"] == "failed"
        assert job["steps_completed"] == 0
        reason = job["failure_reason"]
        assert reason.startswith("RFT_GENERATION_BACKEND=vllm, but vllm is not installed"), reason
        assert "rft-service[vllm]" in reason and "scripts/setup_vllm.sh" in reason
