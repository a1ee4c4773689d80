"""The ``pausing`` phase of a real job through the API: between a pause and its worker letting
go (the step it is on finishes, the checkpoint is saved), a resume calls the pause off and a
cancel stops the job. A slow reward function keeps each step a few seconds long, so the
requests land while the worker is still inside the step after the one waited for."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from rft.cli.app import app
from service.stack import LocalStack
from tests.integration import helpers
from tests.integration.helpers import all_pages, create_job, upload_jsonl, wait_for, wait_until
from tests.tiny import TINY_HYPERPARAMETERS

pytestmark = pytest.mark.integration

STEP_S = 2.5  # the reward function's share of each step: the window a request must land in
QUICK_REWARD = "def one(prompt, completion, example):\n    return 1.0\n"


def slow_job(client: httpx.Client, *, train_steps: int) -> dict[str, Any]:
    return helpers.slow_job(client, train_steps=train_steps, step_s=STEP_S, checkpoint_every=100)


def pause_mid_step(client: httpx.Client, job_id: str, after_step: int) -> None:
    """Pause just after ``after_step`` was recorded: the worker is inside the next step."""
    wait_until(client, job_id, lambda j: j["steps_completed"] >= after_step, timeout_s=300)
    paused = client.post(f"/v1/jobs/{job_id}/pause")
    assert paused.status_code == 200, paused.text
    assert paused.json()["status"] == "pausing"


def event_kinds(client: httpx.Client, job_id: str) -> list[str]:
    return [event["kind"] for event in all_pages(client, f"/v1/jobs/{job_id}/events/history")]


def statuses(client: httpx.Client, job_id: str) -> list[str]:
    events = all_pages(client, f"/v1/jobs/{job_id}/events/history")
    return [event["data"]["status"] for event in events if event["kind"] == "status"]


def test_resume_while_pausing_calls_the_pause_off_and_the_job_trains_on(
    stack: LocalStack, tenant: httpx.Client, tenant_key: str
) -> None:
    train_steps = 4
    job = slow_job(tenant, train_steps=train_steps)

    pause_mid_step(tenant, job["id"], 1)
    assert tenant.get(f"/v1/jobs/{job['id']}").json()["status"] == "pausing"
    assert tenant.post(f"/v1/jobs/{job['id']}/pause").status_code == 409  # already pausing
    resumed = tenant.post(f"/v1/jobs/{job['id']}/resume")
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["status"] == "running"

    # Once more, through the command line.
    pause_mid_step(tenant, job["id"], 2)
    cli = CliRunner(
        env={"RFT_API_KEY": tenant_key, "RFT_BASE_URL": stack.base_url, "COLUMNS": "200"}
    )
    result = cli.invoke(app, ["jobs", "resume", job["id"]])
    assert result.exit_code == 0, (result.output, result.exception)
    assert f"{job['id']} running" in result.output and "called off" in result.output

    finished = wait_for(tenant, job["id"], timeout_s=600)
    assert finished["status"] == "succeeded", finished["failure_reason"]
    assert finished["steps_completed"] == train_steps
    steps = tenant.get(f"/v1/jobs/{job['id']}/steps").json()["data"]
    assert [step["step"] for step in steps] == list(range(1, train_steps + 1))
    # The worker never let go, nor started again from a checkpoint.
    kinds = event_kinds(tenant, job["id"])
    assert not {"paused", "pause_called_off", "resumed"} & set(kinds), kinds
    assert statuses(tenant, job["id"]) == [
        "queued",
        "running",
        "pausing",
        "running",
        "pausing",
        "running",
        "succeeded",
    ]


def test_cancel_while_pausing_ends_the_job_cancelled(tenant: httpx.Client) -> None:
    job = slow_job(tenant, train_steps=4)
    pause_mid_step(tenant, job["id"], 1)
    cancelled = tenant.post(f"/v1/jobs/{job['id']}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelled"
    assert tenant.post(f"/v1/jobs/{job['id']}/resume").status_code == 409

    # The worker stops after the step it was on and takes the next job; the job stays cancelled.
    dataset_id = upload_jsonl(tenant, [{"prompt": f"Say {w}:"} for w in "ab"])
    follow_up = create_job(
        tenant,
        {
            "dataset_id": dataset_id,
            "reward_functions": {"one": {"source": QUICK_REWARD}},
            "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 1},
        },
    )
    assert wait_for(tenant, follow_up["id"], timeout_s=300)["status"] == "succeeded"
    ended = tenant.get(f"/v1/jobs/{job['id']}").json()
    assert ended["status"] == "cancelled" and ended["failure_reason"] == "cancelled by the user"
    assert ended["steps_completed"] < 4
    assert "paused" not in event_kinds(tenant, job["id"])
    assert statuses(tenant, job["id"]) == ["queued", "running", "pausing", "cancelled"]
