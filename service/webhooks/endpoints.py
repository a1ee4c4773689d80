from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response, status

from service.auth.dependencies import CurrentTenant
from service.db import SessionDep
from service.errors import error_responses
from service.pagination import DEFAULT_PAGE_SIZE, PageLimit
from service.settings import get_settings
from service.webhooks import service
from service.webhooks.delivery import egress_policy
from service.webhooks.schemas import (
    DeliveryStatus,
    Webhook,
    WebhookCreate,
    WebhookCreated,
    WebhookDelivery,
    WebhookDeliveryList,
    WebhookList,
)

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])

WebhookId = Annotated[str, Path(max_length=64, description="The webhook's id (wh_...).")]


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=WebhookCreated,
    responses=error_responses(400),
)
def create_webhook(
    session: SessionDep, tenant_id: CurrentTenant, payload: WebhookCreate
) -> WebhookCreated:
    """Register a URL for job events. The answer carries the signing secret, shown only now:
    every delivery is signed with it (Standard Webhooks, as OpenAI signs its own; the openai
    client's ``webhooks.unwrap`` verifies them). 400: an unknown event type, a URL that is not
    http(s), or one the egress policy refuses (private, loopback, this deployment's hosts)."""
    settings = get_settings()
    return service.create_webhook(
        session, tenant_id, payload, settings=settings, policy=egress_policy(settings)
    )


@router.get("", response_model=WebhookList)
def list_webhooks(session: SessionDep, tenant_id: CurrentTenant) -> WebhookList:
    """The tenant's webhooks, newest first."""
    return WebhookList(data=service.list_webhooks(session, tenant_id))


@router.get("/{webhook_id}", response_model=Webhook, responses=error_responses(404))
def get_webhook(session: SessionDep, tenant_id: CurrentTenant, webhook_id: WebhookId) -> Webhook:
    return service.to_schema(service.get_endpoint(session, tenant_id, webhook_id))


@router.delete(
    "/{webhook_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses=error_responses(404),
)
def delete_webhook(
    session: SessionDep, tenant_id: CurrentTenant, webhook_id: WebhookId
) -> Response:
    """Stop sending to the URL: its pending deliveries are dropped with its delivery log."""
    service.delete_webhook(session, tenant_id, webhook_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/{webhook_id}/test",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=WebhookDelivery,
    responses=error_responses(404),
)
def test_webhook(
    session: SessionDep, tenant_id: CurrentTenant, webhook_id: WebhookId
) -> WebhookDelivery:
    """Send a ``webhook.test`` event to the URL, signed, retried and logged as every event
    is: follow it in ``GET .../deliveries``."""
    return service.ping(session, tenant_id, webhook_id)


@router.get(
    "/{webhook_id}/deliveries",
    response_model=WebhookDeliveryList,
    responses=error_responses(404),
)
def list_deliveries(
    session: SessionDep,
    tenant_id: CurrentTenant,
    webhook_id: WebhookId,
    limit: PageLimit = DEFAULT_PAGE_SIZE,
    status: Annotated[
        DeliveryStatus | None, Query(description="Only deliveries in this state.")
    ] = None,
) -> WebhookDeliveryList:
    """The delivery log: the events sent to the URL, newest first, each with every try (the
    receiver's status code, or why nothing answered, and how long it took)."""
    return WebhookDeliveryList(
        data=service.list_deliveries(session, tenant_id, webhook_id, limit=limit, status=status)
    )
