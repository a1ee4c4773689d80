"""A job's validation set at creation: what is accepted, and clear 4xx for what is not."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.tiny import TINY_HYPERPARAMETERS

SOURCE = "def f(prompt, completion, example):\n    return 1.0\n"


def upload(client: httpx.Client, rows: int) -> str:
    content = "\n".join(json.dumps({"prompt": f"p{i}"}) for i in range(rows)).encode()
    response = client.post("/v1/datasets", files={"file": ("d.jsonl", content)})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def job_request(dataset_id: str, **fields: object) -> dict[str, object]:
    return {
        "dataset_id": dataset_id,
        "reward_functions": {"f": {"source": SOURCE}},
        "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 1},
        **fields,
    }


def test_a_validation_dataset_and_eval_settings_are_stored_and_shown(
    client: httpx.Client,
) -> None:
    train, validation = upload(client, 4), upload(client, 3)
    body = job_request(train, validation_dataset_id=validation)
    body["hyperparameters"] = {
        **TINY_HYPERPARAMETERS,
        "train_steps": 1,
        "eval_every": 2,
        "eval_samples": 3,
        "eval_max_prompts": 10,
        "eval_temperature": 0.5,
        "keep_best": 2,
    }
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["validation_dataset_id"] == validation and job["validation_split"] is None
    stored = job["hyperparameters"]
    assert (stored["eval_every"], stored["eval_samples"], stored["eval_max_prompts"]) == (2, 3, 10)
    assert (stored["eval_temperature"], stored["keep_best"]) == (0.5, 2)
    assert client.get(f"/v1/jobs/{job['id']}").json()["validation_dataset_id"] == validation
    # No evaluation has run yet: an empty page, not an error.
    assert client.get(f"/v1/jobs/{job['id']}/evals").json() == {
        "data": [],
        "has_more": False,
        "next_cursor": None,
    }


def test_a_job_without_validation_says_so(client: httpx.Client) -> None:
    job = client.post("/v1/jobs", json=job_request(upload(client, 4))).json()
    assert job["validation_dataset_id"] is None and job["validation_split"] is None
    assert job["hyperparameters"]["eval_every"] is None


def test_an_unknown_validation_dataset_is_404_naming_it(client: httpx.Client) -> None:
    response = client.post(
        "/v1/jobs", json=job_request(upload(client, 4), validation_dataset_id="ds_nope")
    )
    assert response.status_code == 404
    assert response.json()["detail"] == "validation dataset 'ds_nope' not found"


def test_another_tenants_validation_dataset_is_404(
    client: httpx.Client, other_client: httpx.Client
) -> None:
    theirs = upload(other_client, 3)
    response = client.post(
        "/v1/jobs", json=job_request(upload(client, 4), validation_dataset_id=theirs)
    )
    assert response.status_code == 404
    assert theirs in response.json()["detail"]


def test_a_dataset_and_a_split_together_are_422(client: httpx.Client) -> None:
    dataset = upload(client, 4)
    response = client.post(
        "/v1/jobs",
        json=job_request(dataset, validation_dataset_id=dataset, validation_split=0.25),
    )
    assert response.status_code == 422
    assert "validation_dataset_id or validation_split, not both" in response.text


@pytest.mark.parametrize("split", [0, 1, 1.5, -0.1])
def test_a_split_outside_0_1_is_422(client: httpx.Client, split: float) -> None:
    response = client.post("/v1/jobs", json=job_request(upload(client, 4), validation_split=split))
    assert response.status_code == 422
    assert "validation_split" in response.text


def test_a_split_that_leaves_too_few_training_rows_is_400(client: httpx.Client) -> None:
    # 3 rows, half held out (2, rounded): 1 left, fewer than prompts_per_step=2.
    response = client.post("/v1/jobs", json=job_request(upload(client, 3), validation_split=0.5))
    assert response.status_code == 400
    assert response.json()["detail"] == (
        "validation_split=0.5 holds out 2 of the dataset's 3 rows, leaving 1 to train on, "
        "fewer than prompts_per_step=2: lower validation_split or add rows"
    )


@pytest.mark.parametrize(
    ("setting", "field"),
    [
        ({"eval_every": 0}, "eval_every"),
        ({"eval_samples": 0}, "eval_samples"),
        ({"eval_max_prompts": 0}, "eval_max_prompts"),
        ({"eval_temperature": -1}, "eval_temperature"),
        ({"keep_best": -1}, "keep_best"),
    ],
)
def test_invalid_eval_settings_are_422_naming_the_field(
    client: httpx.Client, setting: dict[str, object], field: str
) -> None:
    body = job_request(upload(client, 4), validation_split=0.25)
    body["hyperparameters"] = {**TINY_HYPERPARAMETERS, **setting}
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 422
    assert field in response.text


def test_evals_of_an_unknown_job_are_404(client: httpx.Client) -> None:
    response = client.get("/v1/jobs/job_nope/evals")
    assert response.status_code == 404
    assert "job_nope" in response.json()["detail"]
