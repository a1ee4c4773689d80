"""Runs are never lost: worker death, Redis and Postgres outages, pause and resume.

These tests break servers, so they run on a stack of their own, with a short worker lease.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.stack import LocalStack
from tests.conftest import stack_of_its_own, tenant_client
from tests.integration import helpers
from tests.integration.helpers import (
    all_pages,
    wait_for,
    wait_until,
)

pytestmark = pytest.mark.integration

LEASE_S = 6
# A little work per call keeps steps long enough to break things in the middle of a run.
STEP_S = 0.15


@pytest.fixture(scope="module")
def fault_stack(shared_model_cache: Path) -> Iterator[LocalStack]:
    with stack_of_its_own(
        "rft-faults-",
        env={"RFT_WORKER_LEASE_S": str(LEASE_S), "RFT_QUEUED_RESEND_AFTER_S": "5"},
        model_cache=shared_model_cache,
    ) as stack:
        yield stack


@pytest.fixture
def fault_client(fault_stack: LocalStack) -> Iterator[httpx.Client]:
    with tenant_client(fault_stack) as http:
        yield http


def slow_job(
    client: httpx.Client, *, train_steps: int, checkpoint_every: int = 5
) -> dict[str, Any]:
    return helpers.slow_job(
        client, train_steps=train_steps, step_s=STEP_S, checkpoint_every=checkpoint_every
    )


def assert_complete_record(client: httpx.Client, job: dict[str, Any], train_steps: int) -> None:
    steps = client.get(f"/v1/jobs/{job['id']}/steps").json()["data"]
    assert [s["step"] for s in steps] == list(range(1, train_steps + 1))
    completions = all_pages(client, f"/v1/jobs/{job['id']}/completions")
    assert len(completions) == train_steps * 2 * 4
    per_step: dict[int, int] = {}
    for row in completions:
        per_step[row["step"]] = per_step.get(row["step"], 0) + 1
    assert set(per_step.values()) == {8}


def test_killed_worker_is_replaced_and_the_job_resumes_from_its_checkpoint(
    fault_stack: LocalStack, fault_client: httpx.Client
) -> None:
    train_steps = 24
    job = slow_job(fault_client, train_steps=train_steps)
    wait_until(fault_client, job["id"], lambda j: j["steps_completed"] >= 8)
    fault_stack.kill_worker(fault_stack.workers[0])
    killed_at = fault_client.get(f"/v1/jobs/{job['id']}").json()["steps_completed"]
    assert killed_at < train_steps
    fault_stack.start_worker()

    job = wait_for(fault_client, job["id"], timeout_s=300)
    assert job["status"] == "succeeded", job["failure_reason"]
    assert job["steps_completed"] == train_steps
    assert_complete_record(fault_client, job, train_steps)
    events = all_pages(fault_client, f"/v1/jobs/{job['id']}/events/history")
    kinds = [e["kind"] for e in events]
    assert "worker_lost" in kinds and "resumed" in kinds
    resumed = next(e for e in events if e["kind"] == "resumed")
    assert 5 <= resumed["data"]["checkpoint_step"] <= killed_at


def test_redis_restart_mid_run(fault_stack: LocalStack, fault_client: httpx.Client) -> None:
    job = slow_job(fault_client, train_steps=16)
    wait_until(fault_client, job["id"], lambda j: j["steps_completed"] >= 3)
    fault_stack.restart_redis()
    job = wait_for(fault_client, job["id"], timeout_s=300)
    assert job["status"] == "succeeded", job["failure_reason"]
    assert_complete_record(fault_client, job, 16)
    # The worker is still consuming after the restart.
    follow_up = wait_for(fault_client, slow_job(fault_client, train_steps=2)["id"], timeout_s=300)
    assert follow_up["status"] == "succeeded"


def test_postgres_outage_mid_run(fault_stack: LocalStack, fault_client: httpx.Client) -> None:
    job = slow_job(fault_client, train_steps=16)
    wait_until(fault_client, job["id"], lambda j: j["steps_completed"] >= 3)
    fault_stack.stop_postgres()
    time.sleep(4)
    fault_stack.start_postgres()
    job = wait_for(fault_client, job["id"], timeout_s=300)
    assert job["status"] == "succeeded", job["failure_reason"]
    assert_complete_record(fault_client, job, 16)


def test_pause_frees_the_worker_and_resume_continues(
    fault_stack: LocalStack, fault_client: httpx.Client
) -> None:
    train_steps = 16
    job = slow_job(fault_client, train_steps=train_steps, checkpoint_every=100)
    wait_until(fault_client, job["id"], lambda j: j["steps_completed"] >= 3)
    paused = fault_client.post(f"/v1/jobs/{job['id']}/pause")
    assert paused.status_code == 200 and paused.json()["status"] == "pausing"
    assert fault_client.post(f"/v1/jobs/{job['id']}/pause").status_code == 409

    # The worker checkpoints the step it is on and lets go: then the job reads paused.
    wait_until(fault_client, job["id"], lambda j: j["status"] == "paused", timeout_s=60)
    events = all_pages(fault_client, f"/v1/jobs/{job['id']}/events/history")
    assert any(e["kind"] == "paused" for e in events), events
    paused_at = fault_client.get(f"/v1/jobs/{job['id']}").json()["steps_completed"]
    checkpoints = fault_client.get(f"/v1/jobs/{job['id']}/checkpoints").json()["data"]
    assert paused_at in [c["step"] for c in checkpoints]

    # The freed worker takes other work while the job is paused.
    other = wait_for(fault_client, slow_job(fault_client, train_steps=2)["id"], timeout_s=300)
    assert other["status"] == "succeeded"
    assert fault_client.get(f"/v1/jobs/{job['id']}").json()["steps_completed"] == paused_at

    resumed = fault_client.post(f"/v1/jobs/{job['id']}/resume")
    assert resumed.status_code == 200 and resumed.json()["status"] == "queued", resumed.text
    job = wait_for(fault_client, job["id"], timeout_s=300)
    assert job["status"] == "succeeded", job["failure_reason"]
    assert_complete_record(fault_client, job, train_steps)

    archive = fault_client.get(f"/v1/jobs/{job['id']}/adapter.tar.gz")
    assert archive.status_code == 200
    assert archive.headers["content-type"] == "application/gzip" and len(archive.content) > 1000
    step_archive = fault_client.get(checkpoints[0]["download_path"])
    assert step_archive.status_code == 200
