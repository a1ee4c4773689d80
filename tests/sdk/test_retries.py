"""Retries and idempotency with faults injected between the client and the real server."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

import rft
from service.stack import LocalStack
from tests.sdk.fault_proxy import Fault, FaultPlan, fault_proxy
from tests.sdk.job_inputs import SHOUT_SOURCE
from tests.tiny import TINY_HYPERPARAMETERS


@pytest.fixture
def proxied(stack: LocalStack, api_key: str) -> Iterator[tuple[rft.Client, FaultPlan]]:
    with (
        fault_proxy(stack.base_url) as (proxy_url, plan),
        rft.Client(api_key=api_key, base_url=proxy_url, max_retries=2) as client,
    ):
        yield client, plan


def create_and_cancel(client: rft.Client, dataset: rft.Dataset) -> rft.Job:
    job = client.jobs.create(
        dataset=dataset,
        reward_functions={"shout": SHOUT_SOURCE},
        hyperparameters=TINY_HYPERPARAMETERS,
    )
    # Cancelled so that it does not keep the session's worker from the next test's job. On a
    # fast host the worker may already have trained the tiny job to the end: a 409 then.
    try:
        client.jobs.cancel(job.id)
    except rft.ConflictError:
        assert client.jobs.get(job.id).status.is_terminal
    return job


def job_creations(plan: FaultPlan) -> list[str]:
    return [
        seen.headers.get("Idempotency-Key", "")
        for seen in plan.seen
        if seen.method == "POST" and seen.path == "/v1/jobs"
    ]


@pytest.mark.parametrize(
    "faults",
    [
        # The server creates the job, but the responses are lost on the way back.
        ("forward-then-drop", "forward-then-drop"),
        # Refused before reaching the application, then a connection dropped.
        ("503", "drop"),
        ("forward-then-drop", "503"),
    ],
)
def test_create_is_retried_into_exactly_one_job(
    proxied: tuple[rft.Client, FaultPlan],
    rft_client: rft.Client,
    dataset: rft.Dataset,
    faults: tuple[Fault, ...],
) -> None:
    client, plan = proxied
    plan.fail_next(*faults)
    job = create_and_cancel(client, dataset)
    keys = job_creations(plan)
    # Three sends of one create, all with one key: one job on the server.
    assert len(keys) == 3 and len(set(keys)) == 1 and keys[0]
    assert [j.id for j in rft_client.jobs.list()] == [job.id]


def test_each_create_call_gets_its_own_key(
    proxied: tuple[rft.Client, FaultPlan], rft_client: rft.Client, dataset: rft.Dataset
) -> None:
    client, _ = proxied
    first, second = create_and_cancel(client, dataset), create_and_cancel(client, dataset)
    assert first.id != second.id
    same = client.jobs.create(
        dataset=dataset,
        reward_functions={"shout": SHOUT_SOURCE},
        hyperparameters=TINY_HYPERPARAMETERS,
        idempotency_key="mine",
    )
    again = client.jobs.create(
        dataset=dataset,
        reward_functions={"shout": SHOUT_SOURCE},
        hyperparameters=TINY_HYPERPARAMETERS,
        idempotency_key="mine",
    )
    client.jobs.cancel(same.id)
    assert same.id == again.id
    assert len(list(rft_client.jobs.list())) == 3


def test_reads_are_retried_after_a_dropped_connection(
    proxied: tuple[rft.Client, FaultPlan],
) -> None:
    client, plan = proxied
    plan.fail_next("drop", "503")
    assert list(client.jobs.list()) == []
    assert [seen.fault for seen in plan.seen] == ["drop", "503", None]


def test_gives_up_after_max_retries(proxied: tuple[rft.Client, FaultPlan]) -> None:
    client, plan = proxied
    plan.fail_next("503", "503", "503")
    with pytest.raises(rft.InternalServerError) as caught:
        client.jobs.get("job_x")
    assert caught.value.status_code == 503 and caught.value.detail == "injected fault"
    assert len(plan.seen) == 3
    plan.fail_next("drop", "drop", "drop")
    with pytest.raises(rft.APIConnectionError):
        client.jobs.get("job_x")


def test_a_post_without_idempotency_key_is_not_replayed(
    proxied: tuple[rft.Client, FaultPlan], idle_job: rft.Job
) -> None:
    # A cancel whose response was lost may have been carried out: sending it again could act
    # twice, so the error reaches the caller instead.
    client, plan = proxied
    plan.fail_next("503")
    with pytest.raises(rft.InternalServerError):
        client.jobs.cancel(idle_job.id)
    assert len(plan.seen) == 1


def test_async_client_retries_the_same_way(
    stack: LocalStack, api_key: str, rft_client: rft.Client, dataset: rft.Dataset
) -> None:
    async def create_through_faults(proxy_url: str) -> rft.Job:
        async with rft.AsyncClient(api_key=api_key, base_url=proxy_url) as client:
            job = await client.jobs.create(
                dataset=dataset,
                reward_functions={"s": SHOUT_SOURCE},
                hyperparameters=TINY_HYPERPARAMETERS,
            )
            await client.jobs.cancel(job.id)
            return job

    with fault_proxy(stack.base_url) as (proxy_url, plan):
        plan.fail_next("forward-then-drop", "503")
        job = asyncio.run(create_through_faults(proxy_url))
    assert len(set(job_creations(plan))) == 1 and len(job_creations(plan)) == 3
    assert [j.id for j in rft_client.jobs.list()] == [job.id]
