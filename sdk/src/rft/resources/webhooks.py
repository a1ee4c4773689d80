"""Webhooks: URLs that receive job events (created, running, paused, succeeded, failed,
cancelled, guard tripped, and OpenAI's ``fine_tuning.job.*``), signed as OpenAI signs its
webhooks, retried with backoff, with a delivery log.

Verify a delivery with the secret ``create`` returned, e.g. with the ``openai`` package:
``OpenAI(webhook_secret=secret).webhooks.unwrap(body, headers)``.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

from rft.models import Webhook, WebhookCreated, WebhookDelivery
from rft.transport import AsyncTransport, RequestOptions, SyncTransport

PATH = "/v1/webhooks"


def _create_request(
    url: str, event_types: Sequence[str], description: str | None
) -> RequestOptions:
    body: dict[str, Any] = {"url": url, "event_types": list(event_types)}
    if description is not None:
        body["description"] = description
    return RequestOptions("POST", PATH, json=body)


def _deliveries_request(webhook_id: str, limit: int, status: str | None) -> RequestOptions:
    params: dict[str, Any] = {"limit": limit}
    if status is not None:
        params["status"] = status
    return RequestOptions("GET", f"{PATH}/{webhook_id}/deliveries", params=params)


class Webhooks:
    """``client.webhooks``: the tenant's webhook endpoints."""

    def __init__(self, transport: SyncTransport) -> None:
        self._transport = transport

    def create(
        self, *, url: str, event_types: Sequence[str], description: str | None = None
    ) -> WebhookCreated:
        """Register ``url`` for ``event_types``; the answer's ``secret`` is shown only now."""
        response = self._transport.request(_create_request(url, event_types, description))
        return WebhookCreated.model_validate(response.json())

    def list(self) -> builtins.list[Webhook]:
        data = self._transport.request(RequestOptions("GET", PATH)).json()["data"]
        return [Webhook.model_validate(item) for item in data]

    def get(self, webhook_id: str, /) -> Webhook:
        response = self._transport.request(RequestOptions("GET", f"{PATH}/{webhook_id}"))
        return Webhook.model_validate(response.json())

    def delete(self, webhook_id: str, /) -> None:
        self._transport.request(RequestOptions("DELETE", f"{PATH}/{webhook_id}"))

    def test(self, webhook_id: str, /) -> WebhookDelivery:
        """Queue a ``webhook.test`` event for the URL; follow it in ``deliveries``."""
        response = self._transport.request(RequestOptions("POST", f"{PATH}/{webhook_id}/test"))
        return WebhookDelivery.model_validate(response.json())

    def deliveries(
        self, webhook_id: str, /, *, limit: int = 50, status: str | None = None
    ) -> builtins.list[WebhookDelivery]:
        """The delivery log, newest first, each delivery with every try."""
        data = self._transport.request(_deliveries_request(webhook_id, limit, status)).json()
        return [WebhookDelivery.model_validate(item) for item in data["data"]]


class AsyncWebhooks:
    """See :class:`Webhooks`."""

    def __init__(self, transport: AsyncTransport) -> None:
        self._transport = transport

    async def create(
        self, *, url: str, event_types: Sequence[str], description: str | None = None
    ) -> WebhookCreated:
        response = await self._transport.request(_create_request(url, event_types, description))
        return WebhookCreated.model_validate(response.json())

    async def list(self) -> builtins.list[Webhook]:
        data = (await self._transport.request(RequestOptions("GET", PATH))).json()["data"]
        return [Webhook.model_validate(item) for item in data]

    async def get(self, webhook_id: str, /) -> Webhook:
        response = await self._transport.request(RequestOptions("GET", f"{PATH}/{webhook_id}"))
        return Webhook.model_validate(response.json())

    async def delete(self, webhook_id: str, /) -> None:
        await self._transport.request(RequestOptions("DELETE", f"{PATH}/{webhook_id}"))

    async def test(self, webhook_id: str, /) -> WebhookDelivery:
        path = f"{PATH}/{webhook_id}/test"
        response = await self._transport.request(RequestOptions("POST", path))
        return WebhookDelivery.model_validate(response.json())

    async def deliveries(
        self, webhook_id: str, /, *, limit: int = 50, status: str | None = None
    ) -> builtins.list[WebhookDelivery]:
        response = await self._transport.request(_deliveries_request(webhook_id, limit, status))
        return [WebhookDelivery.model_validate(item) for item in response.json()["data"]]
