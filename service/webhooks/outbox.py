"""The outbox: a job event a tenant's endpoints subscribed to becomes one delivery row per
endpoint, in the transaction of the change it reports. A change that rolls back sends
nothing, and one that commits is sent by the dispatcher (service.webhooks.dispatcher) even if
the process that made it dies right after: rows, not memory.

The job's moves all go through service.jobs.service (``transition``, ``create_job``), made by
the API and the workers alike; guard trips are recorded by workers.database_observer.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from service.jobs.status import JobStatus
from service.models import Job, WebhookDelivery, WebhookEndpoint, new_id
from service.webhooks.events import (
    JOB_CREATED,
    JOB_GUARD_TRIPPED,
    STATUS_EVENTS,
    WEBHOOK_TEST,
    event_body,
)
from service.webhooks.repository import PENDING, WebhookRepository


def job_created(session: Session, job: Job) -> None:
    _record(session, job.tenant_id, (JOB_CREATED,), {"id": job.id, "status": job.status})


def job_status_changed(session: Session, job: Job, status: JobStatus) -> None:
    event_types = STATUS_EVENTS.get(status)
    if not event_types:
        return
    data: dict[str, Any] = {"id": job.id, "status": status.value}
    if status in (JobStatus.FAILED, JobStatus.CANCELLED) and job.failure_reason:
        data["reason"] = job.failure_reason
    _record(session, job.tenant_id, event_types, data)


def guard_tripped(session: Session, job_id: str, trip: dict[str, Any]) -> None:
    """``trip``: the guard's stored trip (kind, step, message, evidence, paused_job)."""
    job = session.get(Job, job_id)
    if job is not None:
        _record(session, job.tenant_id, (JOB_GUARD_TRIPPED,), {"id": job.id, "guard": trip})


def ping(session: Session, endpoint: WebhookEndpoint) -> WebhookDelivery:
    """A ping for one endpoint (POST /v1/webhooks/{id}/test), sent as any delivery is."""
    now = datetime.now(UTC)
    event_id, body = event_body(WEBHOOK_TEST, now, {"id": endpoint.id})
    delivery = _delivery(endpoint.id, WEBHOOK_TEST, event_id, body, None, now)
    WebhookRepository(session).add_delivery(delivery)
    session.flush()
    return delivery


def _record(
    session: Session, tenant_id: str, event_types: tuple[str, ...], data: dict[str, Any]
) -> None:
    repository = WebhookRepository(session)
    endpoints = repository.list_endpoints(tenant_id)
    if not endpoints:
        return  # the common case: one indexed read per job move
    now = datetime.now(UTC)
    for event_type in event_types:
        subscribed = [endpoint for endpoint in endpoints if event_type in endpoint.event_types]
        if not subscribed:
            continue
        # One event, one id: each endpoint's delivery carries the same body.
        event_id, body = event_body(event_type, now, data)
        for endpoint in subscribed:
            repository.add_delivery(
                _delivery(endpoint.id, event_type, event_id, body, data.get("id"), now)
            )


def _delivery(
    endpoint_id: str,
    event_type: str,
    event_id: str,
    body: str,
    job_id: str | None,
    now: datetime,
) -> WebhookDelivery:
    return WebhookDelivery(
        id=new_id("msg"),
        endpoint_id=endpoint_id,
        event_id=event_id,
        event_type=event_type,
        job_id=job_id,
        body=body,
        status=PENDING,
        attempts=0,
        next_attempt_at=now,
        created_at=now,
    )
