"""Checkpoints and adapters in an S3-compatible bucket: a job resumes on a machine that never
saw its checkpoint, and the adapter downloads through the API."""

from __future__ import annotations

import io
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from service.stack import LocalStack
from tests.conftest import tenant_client
from tests.integration.helpers import (
    all_pages,
    create_job,
    slow_reward,
    upload_jsonl,
    wait_for,
    wait_until,
)
from tests.integration.test_faults import STEP_S
from tests.moto_s3 import CREDENTIALS, moto_s3_server
from tests.tiny import TINY_HYPERPARAMETERS

pytestmark = pytest.mark.integration

BUCKET = "rft-artifacts"


@pytest.fixture(scope="module")
def s3_stack() -> Iterator[tuple[LocalStack, str]]:
    with moto_s3_server() as endpoint:
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **_keys()).create_bucket(
            Bucket=BUCKET
        )
        state_dir = Path(tempfile.mkdtemp(prefix="rft-s3-"))
        env = {
            "RFT_ARTIFACT_STORE": "s3",
            "RFT_S3_BUCKET": BUCKET,
            "RFT_S3_ENDPOINT_URL": endpoint,
            "RFT_S3_REGION": "us-east-1",
            **CREDENTIALS,
        }
        with LocalStack(state_dir, workers=1, extra_env=env) as stack:
            yield stack, endpoint
        shutil.rmtree(state_dir, ignore_errors=True)


def _keys() -> dict[str, str]:
    return {
        "aws_access_key_id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    }


def test_resume_on_a_machine_without_the_checkpoint(s3_stack: tuple[LocalStack, str]) -> None:
    """Paused, then resumed with nothing of the job on the worker's disk: the checkpoint comes
    from the bucket. (A lost worker's job resumes the same way, from the latest checkpoint:
    tests/integration/test_faults.py.)"""
    stack, endpoint = s3_stack
    train_steps = 8
    with tenant_client(stack) as client:
        dataset_id = upload_jsonl(client, [{"prompt": f"Say {w}:"} for w in "abcdefgh"])
        job = create_job(
            client,
            {
                "dataset_id": dataset_id,
                "reward_functions": {"slow": {"source": slow_reward(STEP_S)}},
                "hyperparameters": {
                    **TINY_HYPERPARAMETERS,
                    "train_steps": train_steps,
                    "num_generations": 4,
                    "checkpoint_every": 4,
                },
            },
        )
        wait_until(client, job["id"], lambda j: j["steps_completed"] >= 2)
        assert client.post(f"/v1/jobs/{job['id']}/pause").status_code == 200
        paused = wait_until(client, job["id"], lambda j: j["status"] == "paused")
        assert paused["steps_completed"] < train_steps
        # The worker that resumes it is "another machine": nothing of the job is on its disk.
        shutil.rmtree(stack.state_dir / "artifacts" / job["id"], ignore_errors=True)
        assert client.post(f"/v1/jobs/{job['id']}/resume").status_code == 200

        job = wait_for(client, job["id"], timeout_s=300)
        assert job["status"] == "succeeded", job["failure_reason"]
        steps = client.get(f"/v1/jobs/{job['id']}/steps").json()["data"]
        assert [s["step"] for s in steps] == list(range(1, train_steps + 1))
        events = all_pages(client, f"/v1/jobs/{job['id']}/events/history")
        resumed = [e["data"]["checkpoint_step"] for e in events if e["kind"] == "resumed"]
        assert resumed == [paused["steps_completed"]]

        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **_keys())
        keys = {
            item["Key"]
            for item in s3.list_objects_v2(Bucket=BUCKET, Prefix=f"rft/{job['id']}/")["Contents"]
        }
        assert f"rft/{job['id']}/checkpoint-4/trainer_state.json" in keys
        assert f"rft/{job['id']}/adapter/adapter_model.safetensors" in keys

        # Off the worker's disk entirely: the API serves the adapter from the bucket.
        shutil.rmtree(stack.state_dir / "artifacts" / job["id"], ignore_errors=True)
        response = client.get(f"/v1/jobs/{job['id']}/adapter.tar.gz")
        assert response.status_code == 200, response.text
        with tarfile.open(fileobj=io.BytesIO(response.content)) as archive:
            names = archive.getnames()
        assert f"{job['id']}-adapter/adapter_config.json" in names
        assert f"{job['id']}-adapter/adapter_model.safetensors" in names


def test_a_child_starts_from_its_own_copy_in_the_bucket(s3_stack: tuple[LocalStack, str]) -> None:
    stack, endpoint = s3_stack
    with tenant_client(stack) as client:
        body = {
            "dataset_id": upload_jsonl(client, [{"prompt": f"Say {w}:"} for w in "abcd"]),
            "reward_functions": {"slow": {"source": slow_reward(0)}},
            "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 1, "num_generations": 4},
        }
        parent = wait_for(client, create_job(client, body)["id"], timeout_s=300)
        assert parent["status"] == "succeeded", parent["failure_reason"]
        # Copied in the bucket at creation; the worker fetches the child's copy, the parent's
        # folder is on no disk.
        shutil.rmtree(stack.state_dir / "artifacts" / parent["id"], ignore_errors=True)
        child = create_job(client, {**body, "init_from": parent["id"]})
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **_keys())
        copy = s3.list_objects_v2(Bucket=BUCKET, Prefix=f"rft/{child['id']}/initial-adapter/")
        assert {item["Key"].rsplit("/", 1)[1] for item in copy["Contents"]} >= {
            "adapter_config.json",
            "adapter_model.safetensors",
        }
        child = wait_for(client, child["id"], timeout_s=300)
        assert child["status"] == "succeeded", child["failure_reason"]
        fetched = stack.state_dir / "artifacts" / child["id"] / "initial-adapter"
        assert (fetched / "adapter_model.safetensors").is_file()
