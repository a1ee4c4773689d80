"""Webhooks and their deliveries."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel


class Webhook(BaseModel):
    """A URL registered for job events (``client.webhooks.create``)."""

    id: str
    url: str
    event_types: list[str]
    description: str | None = None
    created_at: datetime


class WebhookCreated(Webhook):
    """A new webhook, with its signing secret: shown only this once, keep it."""

    secret: str


class WebhookAttempt(BaseModel):
    number: int
    attempted_at: datetime
    status_code: int | None = None  # None: nothing answered (``error`` says why)
    error: str | None = None
    duration_ms: float


class WebhookDelivery(BaseModel):
    """One event sent to a webhook: pending (retrying), delivered or failed, with every try."""

    id: str  # the webhook-id header, the same on every retry
    event_id: str
    event_type: str
    job_id: str | None = None
    status: Literal["pending", "delivered", "failed"]
    next_attempt_at: datetime | None = None
    created_at: datetime
    delivered_at: datetime | None = None
    payload: dict[str, Any]
    attempts: list[WebhookAttempt]
