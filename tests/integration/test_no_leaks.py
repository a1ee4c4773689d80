"""Nothing a client reads names a server folder, and a revoked key stops an open stream."""

from __future__ import annotations

import json

import httpx
import pytest
from sqlalchemy import select

from service.auth.service import authenticate, revoke_api_key
from service.db import session_scope
from service.jobs.service import cancel_job, get_job
from service.jobs.status import JobStatus
from service.jobs.transitions import transition
from service.models import Checkpoint
from service.stack import LocalStack
from tests.conftest import new_tenant_key, tenant_client
from tests.integration.helpers import all_pages, create_job, upload_jsonl, wait_for
from tests.tiny import TINY_HYPERPARAMETERS
from tests.ui.event_stream import Message, read_messages

pytestmark = pytest.mark.integration

SCORE = "def score(prompt, completion, example):\n    return completion.count('a') / 16\n"


def everything_a_client_reads(client: httpx.Client, job_id: str) -> list[str]:
    base = f"/v1/jobs/{job_id}"
    texts = [
        client.get(path).text
        for path in (
            base,
            "/v1/jobs",
            f"{base}/config",
            f"{base}/config/versions",
            f"{base}/checkpoints",
        )
    ]
    for path in ("steps", "events/history", "completions", "logs", "reward-errors"):
        texts.append(json.dumps(all_pages(client, f"{base}/{path}")))
    return texts


def test_events_and_responses_of_a_trained_job_name_no_server_folder(
    stack: LocalStack, client: httpx.Client
) -> None:
    dataset_id = upload_jsonl(client, [{"prompt": f"Say {w}:"} for w in "abcd"])
    job = create_job(
        client,
        {
            "dataset_id": dataset_id,
            "reward_functions": {"score": {"source": SCORE}},
            "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 2, "checkpoint_every": 1},
        },
    )
    assert wait_for(client, job["id"])["status"] == "succeeded"

    events = all_pages(client, f"/v1/jobs/{job['id']}/events/history")
    checkpoints = [e for e in events if e["kind"] == "checkpoint"]
    assert [e["data"] for e in checkpoints] == [
        {"download_path": f"/v1/jobs/{job['id']}/checkpoints/{step}/adapter.tar.gz"}
        for step in (1, 2)
    ]
    server_folder = str(stack.state_dir)
    with session_scope() as session:
        # The server did write its folder down (where the checkpoints are): just not for us.
        stored = session.scalars(select(Checkpoint.path).where(Checkpoint.job_id == job["id"]))
        assert all(path.startswith(server_folder) for path in stored)
    for text in everything_a_client_reads(client, job["id"]):
        assert server_folder not in text and json.dumps(server_folder)[1:-1] not in text


def test_an_open_event_stream_ends_when_its_key_is_revoked(stack: LocalStack) -> None:
    key = new_tenant_key(stack)
    with session_scope() as session:
        caller = authenticate(session, key)
    with tenant_client(stack, key) as client:
        dataset_id = upload_jsonl(client, [{"prompt": f"Say {w}:"} for w in "abcd"])
        job = create_job(
            client,
            {
                "dataset_id": dataset_id,
                "reward_functions": {"score": {"source": SCORE}},
                "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 1000},
            },
        )
        try:
            seen: list[Message] = []
            with client.stream("GET", f"/v1/jobs/{job['id']}/events", timeout=120) as response:
                assert response.status_code == 200
                for message in read_messages(response):
                    seen.append(message)
                    if len(seen) == 1:  # connected: now revoke the key it was opened with
                        with session_scope() as session:
                            revoke_api_key(session, caller.tenant_id, caller.key_id)
            # The server closed the stream itself: an error message, and no end.
            assert seen[-1].event == "error", [m.event for m in seen[-3:]]
            assert seen[-1].json == {"error": "Unauthorized", "detail": "the API key was revoked"}
            assert all(m.event != "end" for m in seen)
            assert client.get(f"/v1/jobs/{job['id']}/events").status_code == 401
        finally:
            with session_scope() as session:
                cancel_job(session, caller.tenant_id, job["id"])


def test_a_failure_reason_quoting_a_server_folder_names_it_by_role(
    stack: LocalStack, client: httpx.Client
) -> None:
    """Every status change with a reason goes through transition(), which the worker's
    failure reasons (exception messages) take: what it stores names no server folder."""
    dataset_id = upload_jsonl(client, [{"prompt": f"Say {w}:"} for w in "abcd"])
    job = create_job(
        client,
        {
            "dataset_id": dataset_id,
            "reward_functions": {"score": {"source": SCORE}},
            "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 1000},
        },
    )
    model_file = stack.state_dir / "models" / "rft-tiny" / "config.json"
    reason = f"OSError: [Errno 28] No space left on device: '{model_file}'"
    caller_key = client.headers["Authorization"].removeprefix("Bearer ")
    with session_scope() as session:
        row = get_job(
            session, authenticate(session, caller_key).tenant_id, job["id"], for_update=True
        )
        transition(session, row, JobStatus.CANCELLED, reason=reason)
    shown = wait_for(client, job["id"])["failure_reason"]
    assert shown == "OSError: [Errno 28] No space left on device: '<models>/rft-tiny/config.json'"
    events = all_pages(client, f"/v1/jobs/{job['id']}/events/history")
    assert any(e["message"] == f"job cancelled: {shown}" for e in events)
