"""How ``rft webhooks`` shows webhooks and their delivery log."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Column, Table
from rich.text import Text

from rft.models import Webhook, WebhookDelivery

TIME = "%Y-%m-%d %H:%M:%S"


def webhook_table(webhooks: Sequence[Webhook]) -> Table:
    table = Table(Column("id", no_wrap=True), "url", "events", "description", "created")
    for webhook in webhooks:
        table.add_row(
            webhook.id,
            Text(webhook.url),
            ", ".join(webhook.event_types),
            Text(webhook.description or ""),
            webhook.created_at.strftime(TIME),
        )
    return table


def delivery_table(deliveries: Sequence[WebhookDelivery]) -> Table:
    """One row per try (the delivery's first row names it), so failed tries are seen."""
    table = Table(Column("delivery", no_wrap=True), "event", "status", "try", "answer", "at")
    for delivery in deliveries:
        first = [delivery.id, delivery.event_type, delivery.status]
        if not delivery.attempts:
            next_at = delivery.next_attempt_at
            table.add_row(*first, "-", "not tried yet", next_at.strftime(TIME) if next_at else "")
        for attempt in delivery.attempts:
            answer = str(attempt.status_code) if attempt.status_code is not None else "-"
            if attempt.error:
                answer = f"{answer} {attempt.error}"
            table.add_row(
                *first,
                str(attempt.number),
                Text(answer),
                attempt.attempted_at.strftime(TIME),
            )
            first = ["", "", ""]
    return table
