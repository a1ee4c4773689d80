"""Runs are never lost: pause and resume, worker death, Redis and Postgres outages.

These tests break servers, so they run on a stack of their own, with a short worker lease.
One job lives through every fault in turn (a job's start is most of what a fault test costs):
what each move does to a job's row is tested at the row, without training
(tests/recording/test_job_lease.py); here a real worker shows it obeys.

The stack keeps its checkpoints and adapters in an S3-compatible bucket (moto's server, the
true outside edge), as a deployment over several machines does: each resume runs with nothing
of the job on the worker's disk (the machine that takes it never saw it), so its checkpoint
comes from the bucket; the adapter and checkpoint downloads and a child's starting weights
come from there too.
"""

from __future__ import annotations

import io
import shutil
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest

from service.stack import LocalStack
from tests.conftest import stack_of_its_own, tenant_client
from tests.integration import helpers
from tests.integration.helpers import (
    all_pages,
    create_job,
    slow_reward,
    upload_jsonl,
    wait_for,
    wait_until,
)
from tests.moto_s3 import CREDENTIALS, moto_s3_server
from tests.tiny import TINY_HYPERPARAMETERS

pytestmark = pytest.mark.integration

LEASE_S = 6
# A little work per call keeps steps long enough to break things in the middle of a run.
STEP_S = 0.15
# Every fault lands mid-run: the pause after step 3, the kill after the second periodic
# checkpoint, the Redis restart and the Postgres outage after the resume from the kill.
TRAIN_STEPS = 48
CHECKPOINT_EVERY = 10


BUCKET = "rft-artifacts"


@pytest.fixture(scope="module")
def bucket_endpoint() -> Iterator[str]:
    with moto_s3_server() as endpoint:
        s3_client(endpoint).create_bucket(Bucket=BUCKET)
        yield endpoint


def s3_client(endpoint: str) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    )


def bucket_keys(endpoint: str, prefix: str) -> set[str]:
    listed = s3_client(endpoint).list_objects_v2(Bucket=BUCKET, Prefix=prefix)
    return {item["Key"] for item in listed.get("Contents", [])}


@pytest.fixture(scope="module")
def fault_stack(shared_model_cache: Path, bucket_endpoint: str) -> Iterator[LocalStack]:
    with stack_of_its_own(
        "rft-faults-",
        env={
            "RFT_WORKER_LEASE_S": str(LEASE_S),
            "RFT_QUEUED_RESEND_AFTER_S": "5",
            "RFT_ARTIFACT_STORE": "s3",
            "RFT_S3_BUCKET": BUCKET,
            "RFT_S3_ENDPOINT_URL": bucket_endpoint,
            "RFT_S3_REGION": "us-east-1",
            **CREDENTIALS,
        },
        model_cache=shared_model_cache,
    ) as stack:
        yield stack


def forget_on_disk(stack: LocalStack, job_id: str) -> None:
    """Remove every file of the job from the workers' disk: the next machine to touch it
    never saw it (only the bucket has it)."""
    shutil.rmtree(stack.state_dir / "artifacts" / job_id, ignore_errors=True)


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


def test_a_job_lives_through_pause_a_killed_worker_and_redis_and_postgres_outages(
    fault_stack: LocalStack, fault_client: httpx.Client, bucket_endpoint: str
) -> None:
    client = fault_client
    job = slow_job(client, train_steps=TRAIN_STEPS, checkpoint_every=CHECKPOINT_EVERY)
    job_id = job["id"]

    # Pause: the worker checkpoints the step it is on (not a periodic one) and lets go.
    wait_until(client, job_id, lambda j: j["steps_completed"] >= 3)
    paused = client.post(f"/v1/jobs/{job_id}/pause")
    assert paused.status_code == 200 and paused.json()["status"] == "pausing"
    assert client.post(f"/v1/jobs/{job_id}/pause").status_code == 409
    wait_until(client, job_id, lambda j: j["status"] == "paused")
    events = all_pages(client, f"/v1/jobs/{job_id}/events/history")
    assert any(e["kind"] == "paused" for e in events), events
    paused_at = client.get(f"/v1/jobs/{job_id}").json()["steps_completed"]
    assert paused_at < CHECKPOINT_EVERY
    checkpoints = client.get(f"/v1/jobs/{job_id}/checkpoints").json()["data"]
    assert paused_at in [c["step"] for c in checkpoints]

    # The freed worker takes other work while the job is paused.
    other = wait_for(client, slow_job(client, train_steps=2)["id"], timeout_s=300)
    assert other["status"] == "succeeded"
    assert client.get(f"/v1/jobs/{job_id}").json()["steps_completed"] == paused_at

    # A config stored while paused applies to the resumed run, from the step after the pause.
    config = client.get(f"/v1/jobs/{job_id}/config")
    document = config.json()
    document["reward_functions"]["slow"]["weight"] = 2.0
    updated = client.put(
        f"/v1/jobs/{job_id}/config", json=document, headers={"If-Match": config.headers["ETag"]}
    )
    assert updated.status_code == 200, updated.text
    assert updated.json()["applies_from_step"] == paused_at + 1

    # Resume: queued again, and it continues from the pause's checkpoint, fetched from the
    # bucket (the worker that resumes it is "another machine").
    forget_on_disk(fault_stack, job_id)
    resumed = client.post(f"/v1/jobs/{job_id}/resume")
    assert resumed.status_code == 200 and resumed.json()["status"] == "queued", resumed.text

    # A killed worker: a new one takes the job from its latest periodic checkpoint.
    wait_until(client, job_id, lambda j: j["steps_completed"] >= CHECKPOINT_EVERY + 3)
    fault_stack.kill_worker(fault_stack.workers[0])
    killed_at = client.get(f"/v1/jobs/{job_id}").json()["steps_completed"]
    assert killed_at < TRAIN_STEPS
    forget_on_disk(fault_stack, job_id)  # a lost machine: its disk is gone with it
    fault_stack.start_worker()
    wait_until(
        client,
        job_id,
        lambda j: j["status"] == "running" and j["steps_completed"] > killed_at,
        timeout_s=300,
    )

    # Redis restarts empty mid-run, then Postgres goes away for a while.
    fault_stack.restart_redis()
    after_redis = client.get(f"/v1/jobs/{job_id}").json()["steps_completed"]
    assert after_redis < TRAIN_STEPS
    wait_until(client, job_id, lambda j: j["steps_completed"] >= after_redis + 2)
    fault_stack.stop_postgres()
    time.sleep(4)
    fault_stack.start_postgres()

    job = wait_for(client, job_id, timeout_s=300)
    assert job["status"] == "succeeded", job["failure_reason"]
    assert job["steps_completed"] == TRAIN_STEPS
    assert_complete_record(client, job, TRAIN_STEPS)
    steps = client.get(f"/v1/jobs/{job_id}/steps").json()["data"]
    assert {s["config_version"] for s in steps if s["step"] <= paused_at} == {1}
    assert {s["config_version"] for s in steps if s["step"] > paused_at} == {2}
    events = all_pages(client, f"/v1/jobs/{job_id}/events/history")
    kinds = [e["kind"] for e in events]
    assert "worker_lost" in kinds
    resumes = [e["data"]["checkpoint_step"] for e in events if e["kind"] == "resumed"]
    assert resumes[0] == paused_at
    assert paused_at < resumes[-1] <= killed_at and resumes[-1] % CHECKPOINT_EVERY == 0

    # Everything the resumes read, and what downloads serve, is in the bucket.
    keys = bucket_keys(bucket_endpoint, f"rft/{job_id}/")
    for step in (paused_at, resumes[-1]):
        assert f"rft/{job_id}/checkpoint-{step}/trainer_state.json" in keys
    assert f"rft/{job_id}/adapter/adapter_model.safetensors" in keys

    # Off the workers' disk entirely: the API serves the adapter and a checkpoint from the
    # bucket.
    forget_on_disk(fault_stack, job_id)
    archive = client.get(f"/v1/jobs/{job_id}/adapter.tar.gz")
    assert archive.status_code == 200
    assert archive.headers["content-type"] == "application/gzip" and len(archive.content) > 1000
    with tarfile.open(fileobj=io.BytesIO(archive.content)) as opened:
        names = opened.getnames()
    assert f"{job_id}-adapter/adapter_config.json" in names
    assert f"{job_id}-adapter/adapter_model.safetensors" in names
    step_archive = client.get(checkpoints[0]["download_path"])
    assert step_archive.status_code == 200

    # The worker is still consuming after the restarts: a child of the job, whose starting
    # weights are copied in the bucket at its creation; the worker fetches the child's copy
    # (the parent's folder is on no disk).
    child = create_job(
        client,
        {
            "dataset_id": upload_jsonl(client, [{"prompt": f"Say {w}:"} for w in "abcd"]),
            "reward_functions": {"slow": {"source": slow_reward(0)}},
            "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 1, "num_generations": 4},
            "init_from": job_id,
        },
    )
    copied = bucket_keys(bucket_endpoint, f"rft/{child['id']}/initial-adapter/")
    assert {key.rsplit("/", 1)[1] for key in copied} >= {
        "adapter_config.json",
        "adapter_model.safetensors",
    }
    follow_up = wait_for(client, child["id"], timeout_s=300)
    assert follow_up["status"] == "succeeded", follow_up["failure_reason"]
    fetched = fault_stack.state_dir / "artifacts" / child["id"] / "initial-adapter"
    assert (fetched / "adapter_model.safetensors").is_file()
