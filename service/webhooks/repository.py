"""Every SQL statement on webhooks (``webhook_endpoints``, ``webhook_deliveries``,
``webhook_attempts``)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, select

from service.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint
from service.repository import Repository

PENDING = "pending"
DELIVERED = "delivered"
FAILED = "failed"


class WebhookRepository(Repository):
    def add_endpoint(self, endpoint: WebhookEndpoint) -> WebhookEndpoint:
        return self.insert(endpoint)

    def get_endpoint(self, tenant_id: str, endpoint_id: str) -> WebhookEndpoint | None:
        return self.session.scalar(
            select(WebhookEndpoint).where(
                WebhookEndpoint.id == endpoint_id, WebhookEndpoint.tenant_id == tenant_id
            )
        )

    def get_endpoint_any_tenant(self, endpoint_id: str) -> WebhookEndpoint | None:
        """For the dispatcher, which has the delivery and no tenant."""
        return self.session.get(WebhookEndpoint, endpoint_id)

    def list_endpoints(self, tenant_id: str) -> list[WebhookEndpoint]:
        return list(
            self.session.scalars(
                select(WebhookEndpoint)
                .where(WebhookEndpoint.tenant_id == tenant_id)
                .order_by(WebhookEndpoint.created_at.desc(), WebhookEndpoint.id)
            )
        )

    def delete_endpoint(self, endpoint: WebhookEndpoint) -> None:
        self.session.execute(delete(WebhookEndpoint).where(WebhookEndpoint.id == endpoint.id))

    def add_delivery(self, delivery: WebhookDelivery) -> None:
        self.session.add(delivery)

    def next_due(self, now: datetime) -> WebhookDelivery | None:
        """The pending delivery due longest, locked for this transaction. SKIP LOCKED: a
        delivery another dispatcher is sending is passed over, never sent twice at once."""
        return self.session.scalar(
            select(WebhookDelivery)
            .where(WebhookDelivery.status == PENDING, WebhookDelivery.next_attempt_at <= now)
            .order_by(WebhookDelivery.next_attempt_at, WebhookDelivery.id)
            .limit(1)
            .with_for_update(skip_locked=True)
        )

    def add_attempt(self, attempt: WebhookAttempt) -> None:
        self.session.add(attempt)

    def list_deliveries(
        self, endpoint_id: str, *, limit: int, status: str | None = None
    ) -> list[WebhookDelivery]:
        """The endpoint's deliveries, newest first."""
        query = select(WebhookDelivery).where(WebhookDelivery.endpoint_id == endpoint_id)
        if status is not None:
            query = query.where(WebhookDelivery.status == status)
        return list(
            self.session.scalars(
                query.order_by(WebhookDelivery.created_at.desc(), WebhookDelivery.id).limit(limit)
            )
        )

    def attempts_of(self, delivery_ids: list[str]) -> dict[str, list[WebhookAttempt]]:
        found: dict[str, list[WebhookAttempt]] = {delivery_id: [] for delivery_id in delivery_ids}
        if not delivery_ids:
            return found
        for attempt in self.session.scalars(
            select(WebhookAttempt)
            .where(WebhookAttempt.delivery_id.in_(delivery_ids))
            .order_by(WebhookAttempt.delivery_id, WebhookAttempt.number)
        ):
            found[attempt.delivery_id].append(attempt)
        return found
