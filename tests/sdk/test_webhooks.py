"""client.webhooks (sync and async) and ``rft webhooks`` against the real server: register,
read, ping, read the delivery log, delete. Delivery itself: tests/api/test_webhooks.py."""

from __future__ import annotations

import asyncio

import pytest
from typer.testing import CliRunner

import rft
from service.stack import LocalStack
from tests.sdk.test_cli import invoke

# .invalid never resolves: the session worker's dispatcher may try the ping, and reaches
# nobody.
URL = "https://hooks.example.invalid/rft"


def test_a_webhook_is_registered_pinged_and_deleted(rft_client: rft.Client) -> None:
    created = rft_client.webhooks.create(
        url=URL, event_types=["job.succeeded", "fine_tuning.job.succeeded"]
    )
    assert created.secret.startswith("whsec_")
    assert [hook.id for hook in rft_client.webhooks.list()] == [created.id]
    assert rft_client.webhooks.get(created.id).event_types == created.event_types
    ping = rft_client.webhooks.test(created.id)
    assert ping.event_type == "webhook.test" and ping.payload["data"] == {"id": created.id}
    assert [d.id for d in rft_client.webhooks.deliveries(created.id)] == [ping.id]
    rft_client.webhooks.delete(created.id)
    with pytest.raises(rft.NotFoundError):
        rft_client.webhooks.get(created.id)


def test_an_unknown_event_type_is_a_bad_request(rft_client: rft.Client) -> None:
    with pytest.raises(rft.BadRequestError, match=r"job\.exploded"):
        rft_client.webhooks.create(url=URL, event_types=["job.exploded"])


def test_the_async_client_registers_and_deletes(stack: LocalStack, api_key: str) -> None:
    async def run() -> None:
        async with rft.AsyncClient(api_key=api_key, base_url=stack.base_url) as client:
            created = await client.webhooks.create(url=URL, event_types=["job.failed"])
            assert [hook.id for hook in await client.webhooks.list()] == [created.id]
            await client.webhooks.delete(created.id)
            assert await client.webhooks.list() == []

    asyncio.run(run())


def test_the_cli_registers_lists_and_shows_the_delivery_log(
    cli: CliRunner, rft_client: rft.Client
) -> None:
    created = invoke(cli, "webhooks", "create", URL, "-e", "job.failed", "-e", "job.paused")
    assert "whsec_" in created
    [hook] = rft_client.webhooks.list()
    assert hook.event_types == ["job.paused", "job.failed"]
    assert hook.id in invoke(cli, "webhooks", "list")
    assert "queued" in invoke(cli, "webhooks", "test", hook.id)
    assert "webhook.test" in invoke(cli, "webhooks", "deliveries", hook.id)
    invoke(cli, "webhooks", "delete", hook.id)
    assert rft_client.webhooks.list() == []
    refused = invoke(cli, "webhooks", "create", URL, "-e", "job.exploded", expect_exit=1)
    assert "job.exploded" in refused
