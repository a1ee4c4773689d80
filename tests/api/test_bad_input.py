"""Bad input to the newer endpoints: a clear 4xx naming the problem, and nothing changed."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.tiny import TINY_HYPERPARAMETERS

SOURCE = "def f(prompt, completion, example):\n    return 1.0\n"


@pytest.fixture
def job(client: httpx.Client) -> dict:
    rows = "\n".join(json.dumps({"prompt": f"p{i}"}) for i in range(4)).encode()
    dataset = client.post("/v1/datasets", files={"file": ("d.jsonl", rows)}).json()
    return client.post(
        "/v1/jobs",
        json={
            "dataset_id": dataset["id"],
            "reward_functions": {"f": {"source": SOURCE}},
            "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 1},
        },
    ).json()


def test_artifacts_that_do_not_exist_are_404(client: httpx.Client, job: dict) -> None:
    missing = client.get(f"/v1/jobs/{job['id']}/checkpoints/999/adapter.tar.gz")
    assert missing.status_code == 404
    assert "no checkpoint at step 999" in missing.json()["detail"]
    cancelled = client.post(f"/v1/jobs/{job['id']}/cancel").json()
    assert cancelled["status"] == "cancelled"
    adapter = client.get(f"/v1/jobs/{job['id']}/adapter.tar.gz")
    assert adapter.status_code == 404 and "no final adapter" in adapter.json()["detail"]


def test_malformed_if_match_is_400_and_changes_nothing(client: httpx.Client, job: dict) -> None:
    response = client.put(
        f"/v1/jobs/{job['id']}/config",
        json={"reward_functions": {"f": {"source": SOURCE}}},
        headers={"If-Match": "not-a-version"},
    )
    assert response.status_code == 400 and "If-Match" in response.json()["detail"]
    assert client.get(f"/v1/jobs/{job['id']}/config").json()["version"] == 1


def test_resume_of_a_job_that_is_not_paused_is_409(client: httpx.Client, job: dict) -> None:
    client.post(f"/v1/jobs/{job['id']}/cancel")
    response = client.post(f"/v1/jobs/{job['id']}/resume")
    assert response.status_code == 409 and response.json()["error"] == "IllegalTransition"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"reward_functions": {"f": {"source": SOURCE}}}, "either samples or dataset_id"),
        ({"reward_functions": {"f": {"source": SOURCE}}, "samples": []}, "samples is empty"),
        ({"reward_functions": {}, "samples": [{"prompt": "p", "completion": "c"}]}, "at least one"),
        (
            {"reward_functions": {"bad name": {"source": SOURCE}}, "samples": []},
            "must be an identifier",
        ),
    ],
)
def test_reward_function_test_rejects_incomplete_requests(
    client: httpx.Client, body: dict, message: str
) -> None:
    response = client.post("/v1/reward-functions/test", json=body)
    assert response.status_code == 422
    assert message in response.text
