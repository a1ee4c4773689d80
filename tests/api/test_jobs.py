from __future__ import annotations

import json

import httpx
import pytest

from tests.tiny import TINY_HYPERPARAMETERS

GOOD_SOURCE = "def shout(prompt, completion, example):\n    return float(completion.isupper())\n"


@pytest.fixture
def dataset_id(client: httpx.Client) -> str:
    rows = "\n".join(json.dumps({"prompt": f"p{i}"}) for i in range(8)).encode()
    return client.post("/v1/datasets", files={"file": ("d.jsonl", rows)}).json()["id"]


def job_request(dataset_id: str, source: str = GOOD_SOURCE, **overrides: object) -> dict:
    body: dict = {
        "dataset_id": dataset_id,
        "reward_functions": {"shout": {"source": source, "weight": 1.0}},
        "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 1},
    }
    body.update(overrides)
    return body


def job_count(client: httpx.Client) -> int:
    return len(client.get("/v1/jobs", params={"limit": 1000}).json()["data"])


def test_syntax_error_in_reward_code_is_400_naming_the_function(
    client: httpx.Client, dataset_id: str
) -> None:
    before = job_count(client)
    response = client.post(
        "/v1/jobs", json=job_request(dataset_id, "def shout(prompt, completion, example:\n  x")
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "InvalidRewardFunction"
    assert "'shout'" in response.json()["detail"]
    assert job_count(client) == before


def test_wrong_signature_is_400(client: httpx.Client, dataset_id: str) -> None:
    response = client.post("/v1/jobs", json=job_request(dataset_id, "def shout(x):\n  return 1\n"))
    assert response.status_code == 400
    assert "shout" in response.json()["detail"]


def test_unknown_dataset_is_404(client: httpx.Client) -> None:
    before = job_count(client)
    response = client.post("/v1/jobs", json=job_request("ds_nope"))
    assert response.status_code == 404
    assert "ds_nope" in response.json()["detail"]
    assert job_count(client) == before


def test_another_tenants_dataset_cannot_be_used(
    client: httpx.Client, other_client: httpx.Client, dataset_id: str
) -> None:
    assert other_client.post("/v1/jobs", json=job_request(dataset_id)).status_code == 404


@pytest.mark.parametrize(
    ("hyperparameters", "field"),
    [
        ({"train_steps": 0}, "train_steps"),
        ({"num_generations": 1}, "num_generations"),
        ({"learning_rate": -1}, "learning_rate"),
        ({"lora_target_modules": ["lm_head"]}, "lm_head"),
        ({"no_such_knob": 1}, "no_such_knob"),
        ({"epsilon": 0.3, "epsilon_high": 0.2}, "epsilon_high"),
        ({"micro_batch_size": 3}, "micro_batch_size"),
        ({"stop": ["", "x"]}, "stop"),
        ({"preset": "huge"}, "preset"),
    ],
)
def test_invalid_hyperparameters_are_422_naming_the_field(
    client: httpx.Client, dataset_id: str, hyperparameters: dict, field: str
) -> None:
    response = client.post(
        "/v1/jobs", json=job_request(dataset_id, hyperparameters=hyperparameters)
    )
    assert response.status_code == 422
    assert field in response.text


def test_jobs_store_and_return_the_resolved_hyperparameters(
    client: httpx.Client, dataset_id: str
) -> None:
    hyperparameters = {"preset": "tiny-cpu", "train_steps": 1, "stop": ["\n"]}
    response = client.post(
        "/v1/jobs", json=job_request(dataset_id, hyperparameters=hyperparameters)
    )
    assert response.status_code == 201, response.text
    client.post(f"/v1/jobs/{response.json()['id']}/cancel")
    stored = client.get(f"/v1/jobs/{response.json()['id']}").json()["hyperparameters"]
    assert stored == response.json()["hyperparameters"]
    # The preset's values, what the request set, and the automatic micro-batch, all spelled out.
    assert stored["learning_rate"] == 2e-2 and stored["max_completion_length"] == 16
    assert stored["train_steps"] == 1 and stored["stop"] == ["\n"]
    assert stored["micro_batch_size"] == 16 and stored["lr_scheduler_type"] == "constant"


def test_a_dataset_smaller_than_a_step_is_refused_at_creation(client: httpx.Client) -> None:
    rows = "\n".join(json.dumps({"prompt": f"p{i}"}) for i in range(3)).encode()
    dataset_id = client.post("/v1/datasets", files={"file": ("d.jsonl", rows)}).json()["id"]
    response = client.post(
        "/v1/jobs",
        json=job_request(
            dataset_id, hyperparameters={**TINY_HYPERPARAMETERS, "prompts_per_step": 4}
        ),
    )
    assert response.status_code == 400
    assert "has 3 rows, fewer than prompts_per_step=4" in response.json()["detail"]


def test_another_tenants_job_is_404_everywhere(
    client: httpx.Client, other_client: httpx.Client, dataset_id: str
) -> None:
    job = client.post("/v1/jobs", json=job_request(dataset_id)).json()
    for path in ("", "/steps", "/completions", "/events/history"):
        response = other_client.get(f"/v1/jobs/{job['id']}{path}")
        assert response.status_code == 404, path
    assert other_client.post(f"/v1/jobs/{job['id']}/cancel").status_code == 404
    assert client.get(f"/v1/jobs/{job['id']}").json()["status"] != "cancelled"
    assert job["id"] not in [j["id"] for j in other_client.get("/v1/jobs").json()["data"]]


def test_idempotency_key_returns_the_same_job(client: httpx.Client, dataset_id: str) -> None:
    headers = {"Idempotency-Key": "create-once"}
    first = client.post("/v1/jobs", json=job_request(dataset_id), headers=headers)
    second = client.post("/v1/jobs", json=job_request(dataset_id), headers=headers)
    assert first.status_code == second.status_code == 201
    assert first.json()["id"] == second.json()["id"]


def test_cancelling_an_ended_job_is_409(client: httpx.Client, dataset_id: str) -> None:
    job = client.post("/v1/jobs", json=job_request(dataset_id)).json()
    client.post(f"/v1/jobs/{job['id']}/cancel")
    response = client.post(f"/v1/jobs/{job['id']}/cancel")
    assert response.status_code == 409
    assert response.json()["error"] == "IllegalTransition"
