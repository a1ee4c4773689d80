"""A job asking for more devices than any running worker says it holds: with no worker at all
it is accepted with a warning and waits in its size's queue; a worker that can hold it
(RFT_WORKER_DEVICES=2) then takes it and trains it on 2 ranks, not fewer."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from service.stack import LocalStack
from tests.conftest import tenant_client
from tests.integration.helpers import all_pages, create_job, upload_jsonl, wait_for
from tests.tiny import TINY_HYPERPARAMETERS

pytestmark = pytest.mark.integration

REWARD = (
    "def count_a(prompts, completions, **kwargs):\n    return [c.count('a') for c in completions]\n"
)


def test_a_job_waits_for_a_worker_that_can_hold_it() -> None:
    state_dir = Path(tempfile.mkdtemp(prefix="rft-device-queue-"))
    env = {"RFT_WORKER_DEVICES": "2", "OMP_NUM_THREADS": "1"}
    with LocalStack(state_dir, workers=0, extra_env=env) as stack, tenant_client(stack) as client:
        dataset_id = upload_jsonl(client, [{"prompt": f"Say {w}:"} for w in "abcd"])
        job = create_job(
            client,
            {
                "dataset_id": dataset_id,
                "num_devices": 2,
                "reward_functions": {"count_a": {"source": REWARD}},
                "hyperparameters": {
                    **TINY_HYPERPARAMETERS,
                    "train_steps": 2,
                    "prompts_per_step": 2,
                    "num_generations": 4,
                },
            },
        )
        events = all_pages(client, f"/v1/jobs/{job['id']}/events/history")
        warnings = [e["message"] for e in events if e["kind"] == "warning"]
        assert any("waits for a worker with 2 devices" in message for message in warnings)
        assert client.get(f"/v1/jobs/{job['id']}").json()["status"] == "queued"

        stack.start_worker()
        finished = wait_for(client, job["id"], timeout_s=900)
        assert finished["status"] == "succeeded", finished.get("failure_reason")
        log = (stack.log_dir / "worker1.log").read_text(errors="replace")
        assert "/rank1]" in log  # trained on 2 ranks
