"""``rft webhooks``: send job events to your URLs, signed; see what was delivered (and how
the webhooks and their delivery log are shown)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import typer
from rich.table import Column, Table
from rich.text import Text

from rft.cli.context import client_for, console, reports_errors
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


webhooks_app = typer.Typer(
    help="Send job events to your URLs, signed; see what was delivered.", no_args_is_help=True
)


@webhooks_app.command("create")
@reports_errors
def create_webhook(
    context: typer.Context,
    url: str,
    event: Annotated[
        list[str],
        typer.Option("--event", "-e", help="An event to send (repeat): job.succeeded, ..."),
    ],
    description: Annotated[str | None, typer.Option(help="A note for you.")] = None,
) -> None:
    """Register URL for job events; prints the signing secret, shown only this once."""
    created = client_for(context).webhooks.create(
        url=url, event_types=event, description=description
    )
    console.print(f"created [bold]{created.id}[/bold] for {', '.join(created.event_types)}")
    console.print(f"signing secret (shown once): {created.secret}", markup=False)


@webhooks_app.command("list")
@reports_errors
def list_webhooks(context: typer.Context) -> None:
    """Webhooks, newest first."""
    console.print(webhook_table(client_for(context).webhooks.list()))


@webhooks_app.command("delete")
@reports_errors
def delete_webhook(context: typer.Context, webhook_id: str) -> None:
    """Stop sending to a webhook; its pending deliveries are dropped."""
    client_for(context).webhooks.delete(webhook_id)
    console.print(f"deleted {webhook_id}")


@webhooks_app.command("test")
@reports_errors
def test_webhook(context: typer.Context, webhook_id: str) -> None:
    """Send a webhook.test event to the webhook's URL."""
    delivery = client_for(context).webhooks.test(webhook_id)
    console.print(f"queued {delivery.id}: see `rft webhooks deliveries {webhook_id}`")


@webhooks_app.command("deliveries")
@reports_errors
def list_deliveries(
    context: typer.Context,
    webhook_id: str,
    limit: Annotated[int, typer.Option(help="Deliveries to show, newest first.")] = 20,
) -> None:
    """The delivery log: each event sent, and every try with the receiver's answer."""
    console.print(delivery_table(client_for(context).webhooks.deliveries(webhook_id, limit=limit)))
