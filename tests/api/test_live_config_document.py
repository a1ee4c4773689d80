"""PUT /v1/jobs/{id}/config takes the document GET returned, edited, and requires If-Match."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.tiny import TINY_HYPERPARAMETERS

SOURCE = "def score(prompt, completion, example):\n    return 1.0\n"
SECRET = "sk-document-test-8c1f"


@pytest.fixture
def job(client: httpx.Client) -> Iterator[dict[str, Any]]:
    rows = "\n".join(json.dumps({"prompt": f"p{i}"}) for i in range(4)).encode()
    dataset = client.post("/v1/datasets", files={"file": ("d.jsonl", rows)}).json()
    response = client.post(
        "/v1/jobs",
        json={
            "dataset_id": dataset["id"],
            "reward_functions": {"score": {"source": SOURCE}},
            "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 1000},
            "secrets": {"JUDGE_KEY": SECRET},
        },
    )
    assert response.status_code == 201, response.text
    yield response.json()
    client.post(f"/v1/jobs/{response.json()['id']}/cancel")


def test_the_document_get_returned_goes_back_with_its_etag(
    client: httpx.Client, job: dict[str, Any]
) -> None:
    path = f"/v1/jobs/{job['id']}/config"
    got = client.get(path)
    document = got.json()
    assert set(document) >= {"job_id", "version", "created_at", "secret_names", "allow_network"}
    document["reward_functions"]["score"]["weight"] = 0.5
    document["temperature"] = 0.7

    updated = client.put(path, json=document, headers={"If-Match": got.headers["ETag"]})
    assert updated.status_code == 200, updated.text
    body = updated.json()
    assert body["version"] == 2 and updated.headers["ETag"] == '"2"'
    # A weight is not a new version of the function; read-only fields came back unharmed.
    assert body["changed_functions"] == [] and body["secrets_changed"] is False
    config = client.get(path).json()
    score = config["reward_functions"]["score"]
    assert (score["source"], score["weight"], score["label"]) == (SOURCE, 0.5, "score_v1")
    assert config["temperature"] == 0.7 and config["secret_names"] == ["JUDGE_KEY"]

    # The same document again: its version is stale now.
    stale = client.put(path, json=document, headers={"If-Match": got.headers["ETag"]})
    assert stale.status_code == 412 and "stale" in stale.json()["detail"]


def test_if_match_is_required_except_for_dry_runs(
    client: httpx.Client, job: dict[str, Any]
) -> None:
    path = f"/v1/jobs/{job['id']}/config"
    body = {"reward_functions": {"score": {"source": SOURCE, "weight": 2.0}}}
    missing = client.put(path, json=body)
    assert missing.status_code == 428, missing.text
    assert missing.json()["error"] == "PreconditionRequired"
    assert "If-Match" in missing.json()["detail"] and '"1"' in missing.json()["detail"]
    assert client.get(path).json()["version"] == 1

    assert client.put(path, json=body, params={"dry_run": "true"}).status_code == 200
    forced = client.put(path, json=body, headers={"If-Match": "*"})
    assert forced.status_code == 200 and forced.json()["version"] == 2


@pytest.mark.parametrize(
    ("field", "value", "complaint"),
    [
        ("job_id", "job_someone_else", "is not this job"),
        ("allow_network", True, "allow_network is fixed at job creation"),
        ("runtime_packages", ["numpy"], "runtime_packages are fixed at job creation"),
        ("secret_names", [], "secret_names is read-only"),
    ],
)
def test_read_only_fields_that_were_changed_are_refused(
    client: httpx.Client, job: dict[str, Any], field: str, value: object, complaint: str
) -> None:
    path = f"/v1/jobs/{job['id']}/config"
    got = client.get(path)
    document = {**got.json(), field: value}
    response = client.put(path, json=document, headers={"If-Match": got.headers["ETag"]})
    assert response.status_code == 400 and complaint in response.json()["detail"], response.text
    assert client.get(path).json()["version"] == 1


def test_secrets_are_set_replaced_and_removed_by_name_and_never_shown(
    client: httpx.Client, job: dict[str, Any]
) -> None:
    path = f"/v1/jobs/{job['id']}/config"
    functions = {"score": {"source": SOURCE}}

    def put(secrets: dict[str, str | None]) -> httpx.Response:
        body = {"reward_functions": functions, "secrets": secrets}
        return client.put(path, json=body, headers={"If-Match": "*"})

    added = put({"OTHER_KEY": "sk-other-value-51ab"})
    assert added.status_code == 200 and added.json()["secrets_changed"] is True
    assert added.json()["config"]["secret_names"] == ["JUDGE_KEY", "OTHER_KEY"]
    assert put({"JUDGE_KEY": "sk-rotated-value-77"}).json()["config"]["secret_names"] == [
        "JUDGE_KEY",
        "OTHER_KEY",
    ]
    removed = put({"OTHER_KEY": None})
    assert removed.json()["config"]["secret_names"] == ["JUDGE_KEY"]
    assert client.get(f"/v1/jobs/{job['id']}").json()["secret_names"] == ["JUDGE_KEY"]

    unknown = put({"NEVER_SET": None})
    assert unknown.status_code == 400 and "NEVER_SET" in unknown.json()["detail"]
    reserved = put({"PATH": "/evil"})
    assert reserved.status_code == 422 and "reserved" in reserved.text

    shown = [client.get(p).text for p in (path, f"{path}/versions", f"/v1/jobs/{job['id']}")]
    shown += [client.get(f"/v1/jobs/{job['id']}/events/history").text]
    for text in shown:
        for value in (SECRET, "sk-other-value-51ab", "sk-rotated-value-77"):
            assert value not in text


def test_the_api_document_lists_the_config_update_errors(client: httpx.Client) -> None:
    document = client.get("/openapi.json").json()
    put = document["paths"]["/v1/jobs/{job_id}/config"]["put"]
    assert {"409", "412", "428"} <= set(put["responses"])
    assert "If-Match" in put["description"] and "428" in put["description"]
