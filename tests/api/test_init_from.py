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


def test_openai_s_fine_tuned_model_names_continue_a_job_or_say_what_is_wrong(
    client: httpx.Client, other_client: httpx.Client, dataset_id: str
) -> None:
    """OpenAI's fine-tuning API continues a fine-tuned model when ``model`` names one: here
    ``ft:<base>:<job id>[:ckpt-step-N]`` is the job's init_from. A name of the wrong form, or of
    the wrong base model, is a 400 naming ``model``; another tenant's job is a 404 like a missing
    one; a job without the weights is the init_from 400; nothing is created by any of them."""
    parent = cancelled_job(client, dataset_id)
    base = client.get(f"/v1/jobs/{parent}").json()["base_model"]
    foreign = cancelled_job(other_client, upload_rows(other_client))
    before = job_count(client)

    def create(model: str) -> httpx.Response:
        return client.post(
            "/v1/fine_tuning/jobs",
            json={"model": model, "training_file": dataset_id, "method": {"type": "supervised"}},
        )

    malformed = create(f"ft:{base}:ds_0123")
    assert malformed.status_code == 400, malformed.text
    assert "a fine-tuned model is named 'ft:<base model>:<job id>'" in malformed.text
    assert malformed.json()["error"]["param"] == "model"
    wrong_base = create(f"ft:other/model:{parent}")
    assert wrong_base.status_code == 400
    assert f"job {parent} trains {base!r}, not 'other/model'" in wrong_base.text
    for missing in (f"ft:{base}:job_nope", f"ft:{base}:{foreign}"):
        response = create(missing)
        assert response.status_code == 404, response.text
        assert f"No such model: {missing}" in response.text
    unfinished = create(f"ft:{base}:{parent}:ckpt-step-2")
    assert unfinished.status_code == 400
    assert "has no checkpoint at step 2" in unfinished.text
    assert job_count(client) == before
