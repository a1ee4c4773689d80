"""A worker's moves write their webhook events in the outbox, in the move's transaction: a
guard that trips (and the pause it asks for) and the job going paused as the worker lets go.
Sending them is tests/api/test_webhooks.py's part."""

from __future__ import annotations

import json

from sqlalchemy import select

from service.db import session_scope
from service.jobs import ownership
from service.jobs.guard_settings import GUARD_NAMES
from service.jobs.status import JobStatus
from service.jobs.transitions import transition
from service.leases import HeldBy
from service.models import Job, WebhookDelivery, WebhookEndpoint, new_id
from service.webhooks.repository import WebhookRepository
from workers.database_observer import store_guard_trip
from workers.guards import GuardTrip

WORKER = "recording-worker"


def test_a_guard_trip_and_the_pause_it_asks_for_write_their_events(job_id: str) -> None:
    with session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        job.worker_id = WORKER
        endpoint = WebhookRepository(session).add_endpoint(
            WebhookEndpoint(
                id=new_id("wh"),
                tenant_id=job.tenant_id,
                # Never answers; the session worker's dispatcher may try it meanwhile.
                url="https://hooks.example.invalid/rft",
                event_types=["job.guard_tripped", "job.paused", "fine_tuning.job.cancelled"],
                secret_sealed="not sealed: never sent",
            )
        )
        endpoint_id = endpoint.id
    trip = GuardTrip(
        kind=GUARD_NAMES[0], step=3, message="tripped", numbers={}, examples=[], pauses_job=True
    )
    store_guard_trip(job_id, trip, WORKER)
    with session_scope() as session:
        ownership.release(session, job_id, HeldBy(WORKER))
    with session_scope() as session:
        paused = session.get(Job, job_id, with_for_update=True)
        assert paused is not None and paused.status == JobStatus.PAUSED.value
        transition(session, paused, JobStatus.CANCELLED)
    with session_scope() as session:
        rows = session.scalars(
            select(WebhookDelivery)
            .where(WebhookDelivery.endpoint_id == endpoint_id)
            .order_by(WebhookDelivery.created_at)
        ).all()
        bodies = [json.loads(row.body) for row in rows]
        session.delete(session.get(WebhookEndpoint, endpoint_id))
    # job.running and job.cancelled were not asked for: only what the endpoint subscribed to.
    assert [body["type"] for body in bodies] == [
        "job.guard_tripped",
        "job.paused",
        "fine_tuning.job.cancelled",
    ]
    guard = bodies[0]["data"]["guard"]
    assert bodies[0]["data"]["id"] == job_id
    assert (guard["kind"], guard["step"], guard["paused_job"]) == (GUARD_NAMES[0], 3, True)
    assert bodies[1]["data"] == {"id": job_id, "status": "paused"}
    assert bodies[2]["data"] == {"id": job_id}  # OpenAI's shape: the job's id alone
