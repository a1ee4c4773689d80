"""Exports over the API without a worker building them: who may ask, and what is refused.
(tests/integration/test_exports.py builds, downloads and pushes them.)"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.tiny import TINY_HYPERPARAMETERS

SOURCE = "def f(prompt, completion, example):\n    return 1.0\n"


@pytest.fixture
def cancelled_job(client: httpx.Client) -> dict[str, Any]:
    """A job that never trained (cancelled at once: it has no adapter), with one secret."""
    rows = "\n".join(json.dumps({"prompt": f"p{i}"}) for i in range(4)).encode()
    dataset = client.post("/v1/datasets", files={"file": ("d.jsonl", rows)}).json()
    job = client.post(
        "/v1/jobs",
        json={
            "dataset_id": dataset["id"],
            "reward_functions": {"f": {"source": SOURCE}},
            "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 1},
            "secrets": {"JUDGE_KEY": "not-a-hub-token"},
        },
    ).json()
    assert client.post(f"/v1/jobs/{job['id']}/cancel").json()["status"] == "cancelled"
    return dict(job)


def test_a_job_without_an_adapter_is_409_saying_what_to_export_instead(
    client: httpx.Client, cancelled_job: dict[str, Any]
) -> None:
    job_id = cancelled_job["id"]
    for response in (
        client.post(f"/v1/jobs/{job_id}/exports", json={"kind": "merged"}),
        client.get(f"/v1/jobs/{job_id}/merged.tar.gz"),
    ):
        assert response.status_code == 409, response.text
        assert response.json()["error"] == "AdapterNotReady"
        assert f"job {job_id} has no final adapter: it is cancelled" in response.json()["detail"]
        assert "checkpoint_step" in response.json()["detail"]
    assert client.get(f"/v1/jobs/{job_id}/exports").json() == {"data": []}


def test_a_checkpoint_the_job_does_not_have_is_404(
    client: httpx.Client, cancelled_job: dict[str, Any]
) -> None:
    job_id = cancelled_job["id"]
    for response in (
        client.post(f"/v1/jobs/{job_id}/exports", json={"checkpoint_step": 7}),
        client.get(f"/v1/jobs/{job_id}/checkpoints/7/merged.tar.gz"),
    ):
        assert response.status_code == 404, response.text
        assert "has no checkpoint at step 7" in response.json()["detail"]
    missing = client.get(f"/v1/jobs/{job_id}/exports/exp_nope")
    assert missing.status_code == 404 and "has no export 'exp_nope'" in missing.json()["detail"]


def test_a_hub_token_secret_the_job_does_not_have_is_400_naming_its_secrets(
    client: httpx.Client, cancelled_job: dict[str, Any]
) -> None:
    response = client.post(
        f"/v1/jobs/{cancelled_job['id']}/exports",
        json={"kind": "adapter", "hub": {"repo_id": "me/model", "token_secret": "HF_TOKEN"}},
    )
    assert response.status_code == 400, response.text
    assert "no secret named 'HF_TOKEN' (its secrets: ['JUDGE_KEY'])" in response.json()["detail"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"kind": "adapter"}, "an adapter export needs a hub destination"),
        (
            {"kind": "adapter", "dtype": "bfloat16", "hub": {"repo_id": "a/b", "token": "t"}},
            "dtype applies to merged exports only",
        ),
        ({"dtype": "int8"}, "dtype"),
        ({"checkpoint_step": -1}, "checkpoint_step"),
        ({"format": "gguf"}, "format"),
        ({"hub": {"repo_id": "a/b"}}, "exactly one of token_secret or token"),
        (
            {"hub": {"repo_id": "a/b", "token": "t", "token_secret": "HF_TOKEN"}},
            "exactly one of token_secret or token",
        ),
        ({"hub": {"repo_id": "no-namespace", "token": "t"}}, "repo_id"),
        ({"hub": {"repo_id": "a/b", "token_secret": "not a name"}}, "token_secret"),
    ],
)
def test_a_bad_body_is_422_naming_the_problem(
    client: httpx.Client, cancelled_job: dict[str, Any], body: dict[str, Any], message: str
) -> None:
    response = client.post(f"/v1/jobs/{cancelled_job['id']}/exports", json=body)
    assert response.status_code == 422, response.text
    assert message in response.text


def test_another_tenants_job_has_no_exports_to_see_or_make(
    other_client: httpx.Client, cancelled_job: dict[str, Any]
) -> None:
    job_id = cancelled_job["id"]
    for method, path, body in [
        ("POST", f"/v1/jobs/{job_id}/exports", {"kind": "merged"}),
        ("GET", f"/v1/jobs/{job_id}/exports", None),
        ("GET", f"/v1/jobs/{job_id}/exports/exp_nope", None),
        ("GET", f"/v1/jobs/{job_id}/merged.tar.gz", None),
        ("GET", f"/v1/jobs/{job_id}/checkpoints/1/merged.tar.gz", None),
    ]:
        response = other_client.request(method, path, json=body)
        assert response.status_code == 404, (path, response.text)
        assert response.json() == {"error": "NotFound", "detail": f"job {job_id!r} not found"}
