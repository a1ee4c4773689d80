"""init_from for real: a parent trains, children start from its final adapter and from one of
its checkpoints (the optimizer state too), and they outlive the parent's deletion."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from service.base_models.built_in.tiny_tool_model import TINY_TOOL_MODEL_NAME
from service.db import to_sqlalchemy_url
from service.stack import LocalStack
from tests.integration.helpers import (
    A_SHARE,
    create_job,
    slow_reward,
    upload_jsonl,
    wait_for,
    wait_until,
)
from tests.tiny import TINY_HYPERPARAMETERS

pytestmark = pytest.mark.integration

ROWS = [{"prompt": f"Write about {topic}:"} for topic in ("cats", "dogs", "rain", "bread")]


def job_body(dataset_id: str, **fields: Any) -> dict[str, Any]:
    hyperparameters = {**TINY_HYPERPARAMETERS, "num_generations": 4, "learning_rate": 5e-2}
    return {
        "dataset_id": dataset_id,
        "reward_functions": {"a_share": {"source": A_SHARE}},
        **fields,
        "hyperparameters": {**hyperparameters, **fields.get("hyperparameters", {})},
    }


def trained_parent(client: httpx.Client, dataset_id: str) -> dict[str, Any]:
    """Two steps at LoRA rank 8 (not the default 16), checkpointed after each."""
    job = create_job(
        client,
        job_body(
            dataset_id, hyperparameters={"train_steps": 2, "checkpoint_every": 1, "lora_rank": 8}
        ),
    )
    finished = wait_for(client, job["id"], timeout_s=300)
    assert finished["status"] == "succeeded", finished["failure_reason"]
    return finished


def artifacts(stack: LocalStack, job_id: str) -> Path:
    return stack.state_dir / "artifacts" / job_id


def delete_job(stack: LocalStack, job_id: str) -> None:
    """What deleting a job takes away: its row (every row of its own goes with it) and its
    artifacts. The API has no delete yet; this is what one would do."""
    engine = create_engine(to_sqlalchemy_url(stack.database_url or ""))
    try:
        with engine.begin() as connection:
            connection.execute(text("DELETE FROM jobs WHERE id = :id"), {"id": job_id})
    finally:
        engine.dispose()
    shutil.rmtree(artifacts(stack, job_id))


def test_a_child_that_does_not_fit_its_trained_parent_is_400(
    stack: LocalStack, client: httpx.Client, other_client: httpx.Client
) -> None:
    dataset_id = upload_jsonl(client, ROWS)
    parent = trained_parent(client, dataset_id)["id"]

    def refusal(init_from: str, **fields: Any) -> httpx.Response:
        response = client.post("/v1/jobs", json=job_body(dataset_id, init_from=init_from, **fields))
        assert response.status_code == 400, response.text
        return response

    detail = refusal(parent, base_model=TINY_TOOL_MODEL_NAME).json()["detail"]
    assert detail == (
        f"init_from: job {parent!r} trained an adapter for base model 'rft-tiny', and this job "
        f"asks for {TINY_TOOL_MODEL_NAME!r}: an adapter fits only its own base model (leave "
        "base_model out to take the parent's)"
    )
    detail = refusal(parent, hyperparameters={"lora_rank": 16, "lora_alpha": 32}).json()["detail"]
    assert detail == (
        f"init_from: this job's LoRA shape differs from job {parent!r}'s adapter: lora_rank 16 "
        "(the parent's: 8); leave them out to take the parent's, or set them equal"
    )
    detail = refusal(f"{parent}:checkpoint-3").json()["detail"]
    assert detail == (
        f"init_from: job {parent!r} has no checkpoint at step 3; its checkpoints are at steps "
        f"1, 2 (e.g. '{parent}:checkpoint-2')"
    )
    # A checkpoint whose optimizer state is not one file (as DeepSpeed's and FSDP's are not).
    (artifacts(stack, parent) / "checkpoint-2" / "optimizer.pt").unlink()
    detail = refusal(f"{parent}:checkpoint-2", init_from_optimizer=True).json()["detail"]
    assert detail.startswith(
        f"init_from_optimizer: checkpoint 2 of job {parent!r} keeps no optimizer.pt"
    )
    # Another tenant's trained job reads as a missing one.
    other_dataset = upload_jsonl(other_client, ROWS)
    response = other_client.post("/v1/jobs", json=job_body(other_dataset, init_from=parent))
    assert response.status_code == 404
    assert response.json()["detail"] == f"init_from: job {parent!r} not found"


def test_children_start_from_the_parent_and_outlive_it(
    stack: LocalStack, client: httpx.Client
) -> None:
    dataset_id = upload_jsonl(client, ROWS)
    parent = trained_parent(client, dataset_id)["id"]
    # Neither names base_model nor LoRA shape: both are the parent's. The first, a second
    # stage with a reward of its own, has steps slow enough to be paused half-way.
    from_adapter = create_job(
        client,
        job_body(
            dataset_id,
            init_from=parent,
            reward_functions={"slow": {"source": slow_reward(0.3)}},
            hyperparameters={"train_steps": 8},
        ),
    )
    from_checkpoint = create_job(
        client,
        job_body(
            dataset_id,
            init_from=f"{parent}:checkpoint-1",
            init_from_optimizer=True,
            hyperparameters={"train_steps": 2},
        ),
    )
    for child, step in ((from_adapter, None), (from_checkpoint, 1)):
        assert child["parent_job_id"] == parent and child["parent_checkpoint_step"] == step
        assert child["base_model"] == "rft-tiny" and child["hyperparameters"]["lora_rank"] == 8
    assert (from_adapter["init_from"], from_adapter["init_from_optimizer"]) == (parent, False)
    assert from_checkpoint["init_from"] == f"{parent}:checkpoint-1"
    assert from_checkpoint["init_from_optimizer"] is True
    # Each child keeps its own copy of the weights it starts from.
    weights = "adapter_model.safetensors"
    copy = artifacts(stack, from_adapter["id"]) / "initial-adapter"
    assert (copy / weights).read_bytes() == (
        artifacts(stack, parent) / "adapter" / weights
    ).read_bytes()
    assert not (copy / "optimizer.pt").exists()
    copy = artifacts(stack, from_checkpoint["id"]) / "initial-adapter"
    assert (copy / "optimizer.pt").is_file()

    # The parent goes while a child is paused half-way: the child resumes and finishes.
    wait_until(client, from_adapter["id"], lambda job: job["steps_completed"] >= 1)
    assert client.post(f"/v1/jobs/{from_adapter['id']}/pause").status_code == 200
    wait_until(client, from_adapter["id"], lambda job: job["status"] == "paused")
    delete_job(stack, parent)
    assert client.get(f"/v1/jobs/{parent}").status_code == 404
    assert client.post(f"/v1/jobs/{from_adapter['id']}/resume").status_code == 200
    for child in (from_adapter, from_checkpoint):
        finished = wait_for(client, child["id"], timeout_s=300)
        assert finished["status"] == "succeeded", finished["failure_reason"]
        assert finished["init_from"] == child["init_from"]
        assert finished["parent_job_id"] == parent
