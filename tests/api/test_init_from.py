"""init_from at creation: what the API refuses, before any weights are copied or any worker is
spent (tests/integration/test_lineage.py trains parents and children for real)."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.api.test_jobs import job_count, job_request


def upload_rows(client: httpx.Client) -> str:
    rows = "\n".join(json.dumps({"prompt": f"p{i}"}) for i in range(8)).encode()
    return str(client.post("/v1/datasets", files={"file": ("d.jsonl", rows)}).json()["id"])


@pytest.fixture
def dataset_id(client: httpx.Client) -> str:
    return upload_rows(client)


def cancelled_job(client: httpx.Client, dataset_id: str) -> str:
    """A job cancelled at once: it has neither a final adapter nor a checkpoint."""
    job_id = str(client.post("/v1/jobs", json=job_request(dataset_id)).json()["id"])
    client.post(f"/v1/jobs/{job_id}/cancel")
    return job_id


@pytest.mark.parametrize(
    "init_from",
    ["ds_0123", "job_abc:checkpoint-", "job_abc:ckpt-3", "job_abc:checkpoint--1", " job_abc", ""],
)
def test_a_malformed_init_from_is_422_saying_the_format(
    client: httpx.Client, dataset_id: str, init_from: str
) -> None:
    response = client.post("/v1/jobs", json=job_request(dataset_id, init_from=init_from))
    assert response.status_code == 422, response.text
    assert "init_from: expected 'job_…' (a job's final adapter) or 'job_…:checkpoint-N'" in (
        response.text
    )


def test_an_unknown_or_foreign_parent_is_404_alike(
    client: httpx.Client, other_client: httpx.Client, dataset_id: str
) -> None:
    before = job_count(client)
    unknown = client.post("/v1/jobs", json=job_request(dataset_id, init_from="job_nope"))
    assert unknown.status_code == 404
    assert unknown.json()["detail"] == "init_from: job 'job_nope' not found"

    foreign = cancelled_job(other_client, upload_rows(other_client))
    response = client.post(
        "/v1/jobs", json=job_request(dataset_id, init_from=f"{foreign}:checkpoint-1")
    )
    assert response.status_code == 404
    assert response.json()["detail"] == f"init_from: job {foreign!r} not found"
    assert job_count(client) == before


def test_a_parent_without_the_weights_is_400_saying_why(
    client: httpx.Client, dataset_id: str
) -> None:
    running = client.post(
        "/v1/jobs",
        json=job_request(dataset_id, hyperparameters={"preset": "tiny-cpu", "train_steps": 1000}),
    ).json()["id"]
    try:
        response = client.post("/v1/jobs", json=job_request(dataset_id, init_from=running))
    finally:
        client.post(f"/v1/jobs/{running}/cancel")
    assert response.status_code == 400
    detail = response.json()["detail"]
    assert f"init_from: job {running!r} is " in detail  # queued or running, by now
    assert "has no final adapter yet (it has one once it succeeds)" in detail

    cancelled = cancelled_job(client, dataset_id)
    response = client.post("/v1/jobs", json=job_request(dataset_id, init_from=cancelled))
    assert response.status_code == 400
    assert response.json()["detail"] == (
        f"init_from: job {cancelled!r} is cancelled and has no final adapter; "
        "it has no checkpoints either"
    )
    response = client.post(
        "/v1/jobs", json=job_request(dataset_id, init_from=f"{cancelled}:checkpoint-3")
    )
    assert response.status_code == 400
    assert response.json()["detail"] == (
        f"init_from: job {cancelled!r} has no checkpoint at step 3; it has no checkpoints either"
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"init_from_optimizer": True}, "init_from_optimizer needs init_from 'job_…:checkpoint-N'"),
        (
            {"init_from": "job_abc", "init_from_optimizer": True},
            "a final adapter keeps no optimizer state",
        ),
        (
            {
                "init_from": "job_abc:checkpoint-2",
                "init_from_optimizer": True,
                "engine": "deepspeed_zero2",
            },
            "init_from_optimizer needs engine 'ddp' (this job asks for 'deepspeed_zero2')",
        ),
    ],
)
def test_optimizer_state_without_a_ddp_checkpoint_is_422(
    client: httpx.Client, dataset_id: str, fields: dict, message: str
) -> None:
    response = client.post("/v1/jobs", json=job_request(dataset_id, **fields))
    assert response.status_code == 422, response.text
    assert message in response.text


def test_full_fine_tuning_neither_continues_nor_is_continued(
    client: httpx.Client, dataset_id: str
) -> None:
    """init_from continues a LoRA adapter: a job training every weight (adapter 'full') can
    neither start from one nor be a parent."""
    parent = cancelled_job(client, dataset_id)
    request = job_request(dataset_id, init_from=f"{parent}:checkpoint-1")
    request["hyperparameters"]["adapter"] = "full"
    before = job_count(client)
    response = client.post("/v1/jobs", json=request)
    assert response.status_code == 400, response.text
    assert "this job trains every weight (adapter 'full')" in response.json()["detail"]

    full = job_request(dataset_id)
    full["hyperparameters"]["adapter"] = "full"
    full_parent = str(client.post("/v1/jobs", json=full).json()["id"])
    client.post(f"/v1/jobs/{full_parent}/cancel")
    response = client.post(
        "/v1/jobs", json=job_request(dataset_id, init_from=f"{full_parent}:checkpoint-1")
    )
    assert response.status_code == 400, response.text
    assert f"job {full_parent!r} trained every weight" in response.json()["detail"]
    assert job_count(client) == before + 1
