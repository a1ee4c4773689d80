"""No tenant can see or touch another tenant's datasets, jobs, logs or artifacts."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.tiny import TINY_HYPERPARAMETERS

SOURCE = "def f(prompt, completion, example):\n    return 1.0\n"


@pytest.fixture
def foreign_job(client: httpx.Client) -> dict:
    rows = "\n".join(json.dumps({"prompt": f"p{i}"}) for i in range(4)).encode()
    dataset = client.post("/v1/datasets", files={"file": ("d.jsonl", rows)}).json()
    job = client.post(
        "/v1/jobs",
        json={
            "dataset_id": dataset["id"],
            "reward_functions": {"f": {"source": SOURCE}},
            "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 1},
        },
    ).json()
    return {"job": job, "dataset": dataset}


ENDPOINTS = [
    ("GET", "/v1/jobs/{job}"),
    ("GET", "/v1/jobs/{job}/steps"),
    ("GET", "/v1/jobs/{job}/evals"),
    ("GET", "/v1/jobs/{job}/completions"),
    ("GET", "/v1/jobs/{job}/events/history"),
    ("GET", "/v1/jobs/{job}/events"),
    ("GET", "/v1/jobs/{job}/logs"),
    ("GET", "/v1/jobs/{job}/reward-errors"),
    ("GET", "/v1/jobs/{job}/config"),
    ("GET", "/v1/jobs/{job}/config/versions"),
    ("GET", "/v1/jobs/{job}/checkpoints"),
    ("GET", "/v1/jobs/{job}/checkpoints/1/adapter.tar.gz"),
    ("GET", "/v1/jobs/{job}/adapter.tar.gz"),
    ("POST", "/v1/jobs/{job}/cancel"),
    ("POST", "/v1/jobs/{job}/pause"),
    ("POST", "/v1/jobs/{job}/resume"),
    ("PUT", "/v1/jobs/{job}/config"),
    ("GET", "/v1/datasets/{dataset}"),
]


@pytest.mark.parametrize(("method", "template"), ENDPOINTS)
def test_every_endpoint_hides_other_tenants_resources(
    client: httpx.Client,
    other_client: httpx.Client,
    foreign_job: dict,
    method: str,
    template: str,
) -> None:
    path = template.format(job=foreign_job["job"]["id"], dataset=foreign_job["dataset"]["id"])
    body = {"reward_functions": {"f": {"source": SOURCE}}} if method == "PUT" else None
    response = other_client.request(method, path, json=body)
    assert response.status_code == 404, (path, response.text)
    assert response.json()["error"] == "NotFound"
    # The owner's job is untouched: not cancelled, paused or re-configured.
    job = client.get(f"/v1/jobs/{foreign_job['job']['id']}").json()
    assert job["status"] in {"queued", "running", "succeeded"}
    assert job["config_version"] == 1


def test_reward_function_test_cannot_read_another_tenants_dataset(
    other_client: httpx.Client, foreign_job: dict
) -> None:
    response = other_client.post(
        "/v1/reward-functions/test",
        json={
            "reward_functions": {"f": {"source": SOURCE}},
            "dataset_id": foreign_job["dataset"]["id"],
        },
    )
    assert response.status_code == 404


def test_lists_only_show_the_callers_own(
    client: httpx.Client, other_client: httpx.Client, foreign_job: dict
) -> None:
    assert other_client.get("/v1/jobs").json()["data"] == []
    assert other_client.get("/v1/datasets").json()["data"] == []
    assert [j["id"] for j in client.get("/v1/jobs").json()["data"]] == [foreign_job["job"]["id"]]
