"""PUT /v1/jobs/{id}/config takes the document GET returned, edited, and requires If-Match."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy import text as sql
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from service.db import session_scope
from service.job_configs.repository import CONFIG_UPDATE_LOCK_CLASS
from service.models import Job
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


# Loading this module in the sandbox takes a while: the update's validation is seen running.
SLOW_SOURCE = "import time\ntime.sleep(3)\n\n\n" + SOURCE


def _update_turns(session: Session) -> list[bool]:
    """Whether each transaction waiting for or holding a config update's turn holds it."""
    rows = session.execute(
        sql("SELECT granted FROM pg_locks WHERE locktype = 'advisory' AND classid = :lock_class"),
        {"lock_class": CONFIG_UPDATE_LOCK_CLASS},
    )
    return [granted for (granted,) in rows]


def test_updates_take_turns_and_the_job_row_stays_free_while_one_validates(
    client: httpx.Client, job: dict[str, Any]
) -> None:
    """The worker locks the job's row to begin each step: validating an update's code in the
    sandbox (seconds) must not hold it. Two updates at once each get their own version."""
    path = f"/v1/jobs/{job['id']}/config"
    slow = {"reward_functions": {"score": {"source": SLOW_SOURCE}}, "temperature": 0.7}
    quick = {"reward_functions": {"score": {"source": SOURCE, "weight": 3.0}}}
    row_free_while_validating = waited_for_turn = False
    with ThreadPoolExecutor(max_workers=2) as pool:
        slow_update = pool.submit(client.put, path, json=slow, headers={"If-Match": "*"})
        while not _update_turns_seen(slow_update):
            time.sleep(0.05)
        quick_update = pool.submit(client.put, path, json=quick, headers={"If-Match": "*"})
        while not slow_update.done():
            time.sleep(0.05)
            with session_scope() as session:
                turns = _update_turns(session)
                try:
                    session.execute(
                        select(Job.id).where(Job.id == job["id"]).with_for_update(nowait=True)
                    )
                except OperationalError:
                    continue  # the update's own few writes at its end
                if turns.count(True) == 1 and _update_turns(session).count(True) == 1:
                    row_free_while_validating = True
                    waited_for_turn = waited_for_turn or False in turns
    responses = [slow_update.result(), quick_update.result()]
    assert [response.status_code for response in responses] == [200, 200], responses[1].text
    assert [response.json()["version"] for response in responses] == [2, 3]
    assert row_free_while_validating and waited_for_turn
    # The later version was built on the earlier one: neither update's change is lost.
    config = client.get(path).json()
    assert config["temperature"] == 0.7 and config["reward_functions"]["score"]["weight"] == 3.0


def _update_turns_seen(update: Future[httpx.Response]) -> bool:
    with session_scope() as session:
        return bool(_update_turns(session)) or update.done()
