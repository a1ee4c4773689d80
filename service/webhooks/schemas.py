from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from service.webhooks.events import EVENT_TYPES

DeliveryStatus = Literal["pending", "delivered", "failed"]
MAX_URL_CHARS = 2000


class WebhookCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(
        min_length=1,
        max_length=MAX_URL_CHARS,
        description="The http(s) URL that receives the events (POST, a JSON body). Private, "
        "loopback and link-local addresses and this deployment's own hosts are refused unless "
        "the operator allows them (RFT_SANDBOX_EGRESS_ALLOW).",
    )
    event_types: list[str] = Field(
        min_length=1,
        max_length=len(EVENT_TYPES),
        description="The events to send: " + ", ".join(EVENT_TYPES) + ".",
    )
    description: str | None = Field(None, max_length=200)


class Webhook(BaseModel):
    """A registered endpoint. Its signing secret is shown once, when it is created."""

    id: str
    object: Literal["webhook"] = "webhook"
    url: str
    event_types: list[str]
    description: str | None = None
    created_at: datetime


class WebhookCreated(Webhook):
    secret: str = Field(
        description="The signing secret (whsec_...), shown only now: verify each delivery's "
        "webhook-signature with it (docs/webhooks.md)."
    )


class WebhookList(BaseModel):
    data: list[Webhook]


class WebhookAttempt(BaseModel):
    number: int = Field(description="1 for the first try.")
    attempted_at: datetime
    status_code: int | None = Field(
        None, description="The receiver's HTTP status; null when nothing answered."
    )
    error: str | None = Field(
        None, description="Why the try failed (refused, unreachable, timed out, a non-2xx)."
    )
    duration_ms: float


class WebhookDelivery(BaseModel):
    """One event sent (or being sent) to the endpoint, with every try."""

    id: str = Field(description="The webhook-id header: the same on every retry.")
    event_id: str
    event_type: str
    job_id: str | None = None
    status: DeliveryStatus
    next_attempt_at: datetime | None = Field(
        None, description="When the next try is due (pending deliveries only)."
    )
    created_at: datetime
    delivered_at: datetime | None = None
    payload: dict[str, Any] = Field(description="The body as sent.")
    attempts: list[WebhookAttempt]


class WebhookDeliveryList(BaseModel):
    data: list[WebhookDelivery]
