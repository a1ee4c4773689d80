"""Webhook endpoints: registration, reads, deletion, a ping, the delivery log. No HTTP here,
and no commits: the caller's unit of work commits."""

from __future__ import annotations

import json

from sqlalchemy.orm import Session

from sandbox.egress import EgressPolicy
from service.errors import BadRequest, NotFound
from service.models import WebhookAttempt as WebhookAttemptRow
from service.models import WebhookDelivery as WebhookDeliveryRow
from service.models import WebhookEndpoint, new_id
from service.secrets import seal
from service.settings import Settings
from service.webhooks import outbox
from service.webhooks.delivery import refusal, url_problem
from service.webhooks.dispatcher import SECRET_KEY
from service.webhooks.events import EVENT_TYPES, unknown_event_types
from service.webhooks.repository import WebhookRepository
from service.webhooks.schemas import (
    Webhook,
    WebhookAttempt,
    WebhookCreate,
    WebhookCreated,
    WebhookDelivery,
)
from service.webhooks.signing import new_secret


def create_webhook(
    session: Session,
    tenant_id: str,
    payload: WebhookCreate,
    *,
    settings: Settings,
    policy: EgressPolicy,
) -> WebhookCreated:
    unknown = unknown_event_types(payload.event_types)
    if unknown:
        raise BadRequest(f"unknown event types {unknown}; the events are: {', '.join(EVENT_TYPES)}")
    problem = url_problem(payload.url)
    if problem is not None:
        raise BadRequest(problem)
    refused = refusal(payload.url, policy)
    if refused is not None:
        raise BadRequest(
            f"url {payload.url!r} is refused: {refused}. Webhooks go to public addresses; an "
            "operator can allow an internal host with RFT_SANDBOX_EGRESS_ALLOW"
        )
    secret = new_secret()
    endpoint = WebhookRepository(session).add_endpoint(
        WebhookEndpoint(
            id=new_id("wh"),
            tenant_id=tenant_id,
            url=payload.url,
            event_types=sorted(set(payload.event_types), key=EVENT_TYPES.index),
            description=payload.description,
            secret_sealed=seal({SECRET_KEY: secret}, settings),
        )
    )
    return WebhookCreated(**to_schema(endpoint).model_dump(), secret=secret)


def get_endpoint(session: Session, tenant_id: str, endpoint_id: str) -> WebhookEndpoint:
    endpoint = WebhookRepository(session).get_endpoint(tenant_id, endpoint_id)
    if endpoint is None:
        # Another tenant's endpoint is reported exactly like a missing one.
        raise NotFound(f"webhook {endpoint_id!r} not found")
    return endpoint


def list_webhooks(session: Session, tenant_id: str) -> list[Webhook]:
    return [
        to_schema(endpoint) for endpoint in WebhookRepository(session).list_endpoints(tenant_id)
    ]


def delete_webhook(session: Session, tenant_id: str, endpoint_id: str) -> None:
    """The endpoint, its pending deliveries (never sent now) and its delivery log go."""
    WebhookRepository(session).delete_endpoint(get_endpoint(session, tenant_id, endpoint_id))


def ping(session: Session, tenant_id: str, endpoint_id: str) -> WebhookDelivery:
    """Queue a ``webhook.test`` event for the endpoint: sent, retried and logged as any."""
    return delivery_schema(outbox.ping(session, get_endpoint(session, tenant_id, endpoint_id)), [])


def list_deliveries(
    session: Session,
    tenant_id: str,
    endpoint_id: str,
    *,
    limit: int,
    status: str | None = None,
) -> list[WebhookDelivery]:
    """The endpoint's deliveries, newest first, each with its tries."""
    endpoint = get_endpoint(session, tenant_id, endpoint_id)
    repository = WebhookRepository(session)
    deliveries = repository.list_deliveries(endpoint.id, limit=limit, status=status)
    attempts = repository.attempts_of([delivery.id for delivery in deliveries])
    return [delivery_schema(delivery, attempts[delivery.id]) for delivery in deliveries]


def delivery_schema(
    delivery: WebhookDeliveryRow, attempts: list[WebhookAttemptRow]
) -> WebhookDelivery:
    return WebhookDelivery(
        id=delivery.id,
        event_id=delivery.event_id,
        event_type=delivery.event_type,
        job_id=delivery.job_id,
        status=delivery.status,  # type: ignore[arg-type]
        next_attempt_at=delivery.next_attempt_at,
        created_at=delivery.created_at,
        delivered_at=delivery.delivered_at,
        payload=json.loads(delivery.body),
        attempts=[
            WebhookAttempt.model_validate(attempt, from_attributes=True) for attempt in attempts
        ],
    )


def to_schema(endpoint: WebhookEndpoint) -> Webhook:
    return Webhook(
        id=endpoint.id,
        url=endpoint.url,
        event_types=endpoint.event_types,
        description=endpoint.description,
        created_at=endpoint.created_at,
    )
