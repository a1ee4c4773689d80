"""GET /v1/jobs/{id}/events on the real stack: replay, live follow, resume, end, tenancy."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from service.stack import LocalStack
from tests.integration.helpers import create_job, upload_jsonl, wait_until
from tests.tiny import TINY_HYPERPARAMETERS
from tests.ui.event_stream import Message, messages_until

pytestmark = pytest.mark.integration

STREAM_TIMEOUT = httpx.Timeout(60, read=30)


def constant_job(client: httpx.Client, *, train_steps: int) -> dict[str, Any]:
    dataset_id = upload_jsonl(client, [{"prompt": f"Say {w}:"} for w in "abcd"])
    source = "def score(prompt, completion, example):\n    return 1.0\n"
    return create_job(
        client,
        {
            "dataset_id": dataset_id,
            "reward_functions": {"score": {"source": source}},
            "hyperparameters": {
                **TINY_HYPERPARAMETERS,
                "train_steps": train_steps,
                "num_generations": 2,
            },
        },
    )


def step_numbers(messages: list[Message]) -> list[int]:
    return [m.json["step"] for m in messages if m.event == "step"]


def test_stream_replays_follows_resumes_and_ends(client: httpx.Client) -> None:
    job_id = constant_job(client, train_steps=300)["id"]
    wait_until(client, job_id, lambda job: job["steps_completed"] >= 2)
    recorded = client.get(f"/v1/jobs/{job_id}/steps").json()["data"]

    with client.stream("GET", f"/v1/jobs/{job_id}/events", timeout=STREAM_TIMEOUT) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        # Live: read until a step that did not exist when the steps were read, and at least
        # the first `job` snapshot (it closes the replay batch, which may already hold that
        # step when the job moved on in between).
        reached = {"job": False, "newer_step": False}

        def replay_closed_and_a_newer_step(message: Message) -> bool:
            if message.event == "job":
                reached["job"] = True
            if message.event == "step" and message.json["step"] > len(recorded):
                reached["newer_step"] = True
            return reached["job"] and reached["newer_step"]

        seen = messages_until(response, replay_closed_and_a_newer_step)
    steps = step_numbers(seen)
    assert steps == list(range(1, len(steps) + 1)) and len(steps) > len(recorded)
    # A replayed step is exactly the item GET /steps returns.
    first_step = next(m for m in seen if m.event == "step")
    assert first_step.json == recorded[0]
    assert [m.json["data"]["status"] for m in seen if m.event == "status"][:2] == [
        "queued",
        "running",
    ]
    assert any(m.event == "job" and m.json["id"] == job_id for m in seen)
    assert all(m.id for m in seen)

    # Resume after the second step, once by header and once by query: no duplicates.
    second = next(m for m in seen if m.event == "step" and m.json["step"] == 2)
    for resume in ({"headers": {"Last-Event-ID": second.id}}, {"params": {"after": second.id}}):
        with client.stream(
            "GET", f"/v1/jobs/{job_id}/events", timeout=STREAM_TIMEOUT, **resume
        ) as response:
            resumed = messages_until(response, lambda m: m.event == "job")
        assert step_numbers(resumed)[0] == 3
        assert not any(m.event == "status" for m in resumed)  # both before step 2

    assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    with client.stream(
        "GET", f"/v1/jobs/{job_id}/events", params={"after": seen[-1].id}, timeout=STREAM_TIMEOUT
    ) as response:
        # Read until the server closes: `end` must be the last message.
        rest = messages_until(response, lambda m: False)
    final = client.get(f"/v1/jobs/{job_id}/steps").json()["data"]
    assert steps + step_numbers(rest) == [step["step"] for step in final]
    assert rest[-1].event == "end" and rest[-1].json["status"] == "cancelled"
    assert rest[-2].event == "job" and rest[-2].json["steps_completed"] == len(final)


def test_stream_of_an_ended_job_replays_and_closes(client: httpx.Client) -> None:
    job_id = constant_job(client, train_steps=300)["id"]
    assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    with client.stream("GET", f"/v1/jobs/{job_id}/events", timeout=STREAM_TIMEOUT) as response:
        messages = messages_until(response, lambda m: False)  # until the server closes
    statuses = [m.json["data"]["status"] for m in messages if m.event == "status"]
    assert statuses[0] == "queued" and statuses[-1] == "cancelled"
    assert [m.event for m in messages[-2:]] == ["job", "end"]


def test_stream_is_tenant_scoped(
    stack: LocalStack, client: httpx.Client, other_client: httpx.Client
) -> None:
    job_id = constant_job(client, train_steps=300)["id"]
    client.post(f"/v1/jobs/{job_id}/cancel")
    assert other_client.get(f"/v1/jobs/{job_id}/events").status_code == 404
    assert httpx.get(f"{stack.base_url}/v1/jobs/{job_id}/events").status_code == 401
    bad_cursor = client.get(f"/v1/jobs/{job_id}/events", params={"after": "12"})
    assert bad_cursor.status_code == 400 and "s<step>.e<event id>" in bad_cursor.json()["detail"]
