"""Webhooks: registration (validated, tenant-scoped, the secret shown once) and delivery to a
real local HTTP receiver the test starts: signed so that the openai client verifies it, retried
with backoff past a receiver that is down and then failing, logged try by try.

On the session's idle stack: it has no worker, and every worker process runs a dispatcher
(the session stack's would race the test's for the deliveries). The test process sends them
by calling the dispatcher's one pass, with a clock it moves: no waiting, no wall-clock
margins. The receiver is registered by a name that resolves nowhere (accepted: the policy is
asked at each try); the test's dispatcher holds the deployment's egress policy with the name
resolving to the receiver's loopback address and allowed, as an operator allows an internal
host (RFT_SANDBOX_EGRESS_ALLOW): the policy is the part a test injects.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from openai import OpenAI
from openai.types.webhooks import FineTuningJobCancelledWebhookEvent
from sqlalchemy import create_engine, delete
from sqlalchemy.orm import Session, sessionmaker

from sandbox.egress import EgressPolicy
from service.db import to_sqlalchemy_url
from service.jobs import ownership
from service.leases import HeldBy
from service.models import WebhookDelivery
from service.settings import Settings
from service.stack import LocalStack
from service.webhooks.dispatcher import Dispatcher
from service.webhooks.repository import PENDING, WebhookRepository
from tests.conftest import new_tenant_key, tenant_client
from tests.held_jobs import STAND_IN_WORKER, held_job
from tests.tiny import TINY_HYPERPARAMETERS

LOCAL = "127.0.0.1"
# The receiver's name in its URLs: .invalid never resolves, except in the test's policy.
RECEIVER = "receiver.invalid"
SOURCE = "def f(prompt, completion, example):\n    return 1.0\n"


def receiver_resolver(host: str, port: int) -> list[str]:
    if host == RECEIVER:
        return [LOCAL]
    raise OSError(f"{host} resolves nowhere here")


@pytest.fixture(scope="module")
def sessions(idle_stack: LocalStack) -> Iterator[sessionmaker[Session]]:
    """Transactions on the idle stack's database. Deliveries other modules left pending there
    (the fuzzer registers webhooks too; no worker sends them on that stack) are dropped
    first: this module's dispatcher sends what is due, and counts what it sent."""
    engine = create_engine(to_sqlalchemy_url(idle_stack.database_url or ""))
    factory = sessionmaker(engine, expire_on_commit=False)
    with factory.begin() as session:
        session.execute(delete(WebhookDelivery).where(WebhookDelivery.status == PENDING))
    yield factory
    engine.dispose()


@pytest.fixture
def api_key(idle_stack: LocalStack) -> str:
    return new_tenant_key(idle_stack)


@pytest.fixture
def client(idle_stack: LocalStack, api_key: str) -> Iterator[httpx.Client]:
    with tenant_client(idle_stack, api_key) as http:
        yield http


@pytest.fixture
def other_client(idle_stack: LocalStack) -> Iterator[httpx.Client]:
    with tenant_client(idle_stack) as http:
        yield http


class Clock:
    """The dispatcher's time: moved by the test, never waited for."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


def dispatcher(
    stack: LocalStack,
    sessions: sessionmaker[Session],
    clock: Clock,
    *,
    allowed: bool = True,
    **settings: Any,
) -> Dispatcher:
    """The dispatcher a worker runs, with the stack's secrets key and ``clock``; the receiver
    is allowed unless ``allowed`` is False (then its loopback address is refused)."""
    return Dispatcher(
        sessions,
        Settings(secrets_key_file=stack.state_dir / "secrets.key", **settings),
        EgressPolicy(allowed_hosts=[RECEIVER] if allowed else [], resolver=receiver_resolver),
        clock=clock,
    )


class Receiver:
    """A local HTTP server that records what it is sent and answers each request with the
    next of ``answers`` (200 once they run out). It is bound from the start but refuses
    connections (nothing listens) until ``up()``: a receiver that is down."""

    def __init__(self, answers: list[int] | None = None) -> None:
        self.answers = list(answers or [])
        self.received: list[tuple[dict[str, str], str]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"])).decode()
                receiver.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(receiver.answers.pop(0) if receiver.answers else 200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((LOCAL, 0), Handler, bind_and_activate=False)
        self.server.server_bind()
        self.url = f"http://{RECEIVER}:{self.server.server_address[1]}/hooks/rft"
        self.thread: threading.Thread | None = None

    def up(self) -> None:
        self.server.server_activate()
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        if self.thread is not None:
            self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def receiver(answers: list[int] | None = None, *, up: bool = True) -> Iterator[Receiver]:
    running = Receiver(answers)
    if up:
        running.up()
    try:
        yield running
    finally:
        running.close()


def register(client: httpx.Client, url: str, *event_types: str) -> dict[str, Any]:
    response = client.post("/v1/webhooks", json={"url": url, "event_types": list(event_types)})
    assert response.status_code == 201, response.text
    return response.json()


def pinged(client: httpx.Client, url: str) -> dict[str, Any]:
    """A webhook registered for ``url`` with a ``webhook.test`` delivery queued."""
    hook = register(client, url, "job.failed")
    queued = client.post(f"/v1/webhooks/{hook['id']}/test")
    assert queued.status_code == 202 and queued.json()["event_type"] == "webhook.test"
    return hook


def deliveries(client: httpx.Client, webhook_id: str) -> list[dict[str, Any]]:
    response = client.get(f"/v1/webhooks/{webhook_id}/deliveries")
    assert response.status_code == 200, response.text
    return response.json()["data"]


def verified(secret: str, headers: dict[str, str], body: str) -> Any:
    """The event as the official openai client unwraps it (raises on a bad signature)."""
    return OpenAI(api_key="unused", webhook_secret=secret).webhooks.unwrap(body, headers)


# --- registration ---------------------------------------------------------------------------


def test_a_webhook_is_registered_listed_and_deleted_and_its_secret_shown_once(
    client: httpx.Client,
) -> None:
    created = register(client, "https://hooks.example.invalid/rft", "job.failed", "job.succeeded")
    assert created["secret"].startswith("whsec_")
    assert created["event_types"] == ["job.succeeded", "job.failed"]  # in the documented order
    listed = client.get("/v1/webhooks").json()["data"]
    assert [hook["id"] for hook in listed] == [created["id"]]
    fetched = client.get(f"/v1/webhooks/{created['id']}").json()
    assert "secret" not in fetched and "secret" not in listed[0]
    assert fetched["url"] == "https://hooks.example.invalid/rft"
    assert client.delete(f"/v1/webhooks/{created['id']}").status_code == 204
    assert client.get(f"/v1/webhooks/{created['id']}").status_code == 404


def test_unknown_event_types_are_a_400_naming_them(client: httpx.Client) -> None:
    response = client.post(
        "/v1/webhooks",
        json={
            "url": "https://hooks.example.invalid/rft",
            "event_types": ["job.succeeded", "job.exploded", "fine_tuning.job.paused"],
        },
    )
    assert response.status_code == 400
    detail = response.json()["detail"]
    assert "job.exploded" in detail and "fine_tuning.job.paused" in detail
    assert "job.succeeded'" not in detail.split(";")[0]  # only the unknown ones are named


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("ftp://hooks.example.invalid/rft", "http"),
        ("http://169.254.169.254/latest/meta-data", "link-local"),
        ("http://10.1.2.3:8080/hook", "private"),
        ("http://[::1]:8000/hook", "loopback"),
        ("http://127.0.0.1:8000/hook", "own hosts"),  # the API listens there
        ("https://user:pw@hooks.example.invalid/rft", "credentials"),
    ],
)
def test_urls_that_are_not_http_or_point_inside_are_refused(
    client: httpx.Client, url: str, named: str
) -> None:
    response = client.post("/v1/webhooks", json={"url": url, "event_types": ["job.failed"]})
    assert response.status_code == 400, response.text
    assert named in response.json()["detail"]


def test_another_tenants_webhook_is_a_404(client: httpx.Client, other_client: httpx.Client) -> None:
    hook = register(client, "https://hooks.example.invalid/rft", "job.failed")
    path = f"/v1/webhooks/{hook['id']}"
    assert other_client.get("/v1/webhooks").json()["data"] == []
    assert other_client.get(path).status_code == 404
    assert other_client.get(f"{path}/deliveries").status_code == 404
    assert other_client.post(f"{path}/test").status_code == 404
    assert other_client.delete(path).status_code == 404
    assert client.get(path).status_code == 200


# --- delivery -------------------------------------------------------------------------------


def test_a_cancelled_job_reaches_a_local_receiver_signed_as_openai_signs(
    idle_stack: LocalStack,
    sessions: sessionmaker[Session],
    client: httpx.Client,
    api_key: str,
) -> None:
    with receiver() as local:
        hook = register(client, local.url, "job.cancelled", "fine_tuning.job.cancelled")
        job_id = held_job(api_key, unit_of_work=sessions.begin)
        assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
        clock = Clock()  # from now on: the deliveries are due
        sent = dispatcher(idle_stack, sessions, clock).run_once()
        assert sent == 2
        assert dispatcher(idle_stack, sessions, clock).run_once() == 0  # nothing left
        events = {}
        for headers, body in local.received:
            event = verified(hook["secret"], headers, body)
            events[event.type] = (event, headers)
    ours, _ = events["job.cancelled"]
    theirs, headers = events["fine_tuning.job.cancelled"]
    assert isinstance(theirs, FineTuningJobCancelledWebhookEvent)
    assert theirs.data.id == job_id and theirs.object == "event"
    assert ours.data.id == job_id  # type: ignore[union-attr]
    log = {delivery["event_type"]: delivery for delivery in deliveries(client, hook["id"])}
    assert log["job.cancelled"]["payload"]["data"]["status"] == "cancelled"
    assert log["fine_tuning.job.cancelled"]["id"] == headers["webhook-id"]
    for delivery in log.values():
        assert delivery["status"] == "delivered"
        assert [attempt["status_code"] for attempt in delivery["attempts"]] == [200]
    with pytest.raises(Exception, match="signature"):
        verified(hook["secret"], headers, local.received[0][1].replace(job_id, "job_other"))


def test_a_created_job_writes_job_created_for_its_tenant_only(
    client: httpx.Client, other_client: httpx.Client
) -> None:
    hook = register(client, "https://hooks.example.invalid/rft", "job.created")
    rows = "\n".join(json.dumps({"prompt": f"p{i}"}) for i in range(4)).encode()
    jobs = {}
    for tenant in (client, other_client):
        dataset = tenant.post("/v1/datasets", files={"file": ("d.jsonl", rows)}).json()
        created = tenant.post(
            "/v1/jobs",
            json={
                "dataset_id": dataset["id"],
                "reward_functions": {"f": {"source": SOURCE}},
                "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 1},
            },
        )
        assert created.status_code == 201, created.text
        jobs[tenant] = created.json()["id"]
    [delivery] = deliveries(client, hook["id"])  # nothing of the other tenant's job
    assert delivery["event_type"] == "job.created" and delivery["status"] == "pending"
    assert delivery["payload"]["data"] == {"id": jobs[client], "status": "queued"}
    assert client.delete(f"/v1/webhooks/{hook['id']}").status_code == 204  # nothing to send


def test_a_receiver_that_is_down_then_failing_gets_the_event_on_a_later_retry(
    idle_stack: LocalStack,
    sessions: sessionmaker[Session],
    client: httpx.Client,
    api_key: str,
) -> None:
    with receiver([500], up=False) as local:
        hook = register(client, local.url, "job.paused")
        job_id = held_job(api_key, unit_of_work=sessions.begin)
        # A guard's pause, then the worker letting go: the moves a worker makes.
        with sessions.begin() as session:
            assert ownership.pause(session, job_id, HeldBy(STAND_IN_WORKER))
        with sessions.begin() as session:
            ownership.release(session, job_id, HeldBy(STAND_IN_WORKER))
        clock = Clock()
        send = dispatcher(idle_stack, sessions, clock, webhook_retry_base_s=60).run_once

        assert send() == 1  # down: nothing listens
        assert send() == 0  # the retry is not due yet
        local.up()
        clock.now += timedelta(seconds=59)
        assert send() == 0
        clock.now += timedelta(seconds=1)
        assert send() == 1  # up, but answers 500
        clock.now += timedelta(seconds=119)
        assert send() == 0  # the wait doubled
        clock.now += timedelta(seconds=1)
        assert send() == 1  # 200
        assert send() == 0

    [delivery] = deliveries(client, hook["id"])
    assert delivery["status"] == "delivered" and delivery["next_attempt_at"] is None
    attempts = delivery["attempts"]
    assert [attempt["number"] for attempt in attempts] == [1, 2, 3]
    assert [attempt["status_code"] for attempt in attempts] == [None, 500, 200]
    assert "cannot connect" in attempts[0]["error"]
    assert attempts[1]["error"].startswith("HTTP 500")
    # Both tries that reached it carried the same message, each signed afresh.
    (first_headers, first_body), (headers, body) = local.received
    assert first_headers["webhook-id"] == headers["webhook-id"] == delivery["id"]
    assert first_body == body
    event = verified(hook["secret"], headers, body)
    assert event.type == "job.paused" and event.data.id == job_id  # type: ignore[union-attr]


def test_a_delivery_is_failed_after_its_last_try_and_the_policy_is_asked_every_time(
    idle_stack: LocalStack,
    sessions: sessionmaker[Session],
    client: httpx.Client,
) -> None:
    with receiver() as local:
        hook = pinged(client, local.url)
        clock = Clock()
        # A deployment that does not allow the address (any more): each try is refused.
        send = dispatcher(
            idle_stack, sessions, clock, allowed=False, webhook_max_attempts=2
        ).run_once
        assert send() == 1
        clock.now += timedelta(days=1)
        assert send() == 1
        clock.now += timedelta(days=1)
        assert send() == 0
        assert local.received == []
    [delivery] = deliveries(client, hook["id"])
    assert delivery["status"] == "failed" and delivery["next_attempt_at"] is None
    assert len(delivery["attempts"]) == 2
    assert all("loopback" in attempt["error"] for attempt in delivery["attempts"])


def test_two_dispatchers_never_send_one_delivery_at_once(
    idle_stack: LocalStack,
    sessions: sessionmaker[Session],
    client: httpx.Client,
) -> None:
    with receiver() as local:
        pinged(client, local.url)
        clock = Clock()
        other = dispatcher(idle_stack, sessions, clock)
        with sessions() as session, session.begin():
            # A first dispatcher holds the delivery (mid-send)...
            held = WebhookRepository(session).next_due(clock())
            assert held is not None
            assert other.run_once() == 0  # ...so the second passes it over.
        assert local.received == []
        assert other.run_once() == 1
        assert len(local.received) == 1


def test_a_deleted_webhook_sends_nothing_more(
    idle_stack: LocalStack, sessions: sessionmaker[Session], client: httpx.Client
) -> None:
    with receiver() as local:
        hook = pinged(client, local.url)
        assert client.delete(f"/v1/webhooks/{hook['id']}").status_code == 204
        assert dispatcher(idle_stack, sessions, Clock()).run_once() == 0
        assert local.received == []
