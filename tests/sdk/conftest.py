"""Fixtures for the SDK tests: an ``rft.Client`` pointed at the session's real stack."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from typer.testing import CliRunner

import rft
from service.stack import LocalStack
from tests.conftest import new_tenant_key
from tests.sdk.job_inputs import CHAT_ROWS, QUICK_HYPERPARAMETERS, SHOUT_SOURCE
from tests.tiny import TINY_HYPERPARAMETERS


@pytest.fixture
def rft_client(stack: LocalStack, api_key: str) -> Iterator[rft.Client]:
    with rft.Client(api_key=api_key, base_url=stack.base_url, timeout=60) as client:
        yield client


@pytest.fixture
def cli(stack: LocalStack, api_key: str) -> CliRunner:
    """``rft`` run in-process (tests/sdk/test_cli.py ``invoke``) as the tenant of ``api_key``."""
    # Wide output: Rich would otherwise fold ids and tables at 80 columns.
    return CliRunner(env={"RFT_API_KEY": api_key, "RFT_BASE_URL": stack.base_url, "COLUMNS": "200"})


@pytest.fixture
def dataset(rft_client: rft.Client) -> rft.Dataset:
    rows = [{"prompt": f"Write about {topic}:", "topic": topic} for topic in "abcdefgh"]
    return rft_client.datasets.upload(rows, name="sdk-test")


@pytest.fixture
def idle_job(rft_client: rft.Client, dataset: rft.Dataset) -> Iterator[rft.Job]:
    """A job that must not occupy the single test worker: cancelled at once and at the end."""
    job = rft_client.jobs.create(
        dataset=dataset,
        reward_functions={"shout": SHOUT_SOURCE},
        hyperparameters=TINY_HYPERPARAMETERS,
    )
    rft_client.jobs.cancel(job.id)
    yield rft_client.jobs.get(job.id)


@dataclass(frozen=True)
class FinishedJob:
    """A job that trained to the end, and the key of the tenant that owns it."""

    api_key: str
    job: rft.Job


@pytest.fixture(scope="session")
def finished_job(stack: LocalStack) -> FinishedJob:
    """One short job trained once for the SDK and CLI sessions that read a finished job:
    2 steps on chat prompts, a checkpoint at each, and its final adapter."""
    key = new_tenant_key(stack)
    with rft.Client(api_key=key, base_url=stack.base_url, timeout=60) as client:
        dataset = client.datasets.upload(CHAT_ROWS, name="chat")
        job = client.jobs.create(
            dataset=dataset,
            reward_functions={"one": "def one(prompt, completion, example):\n    return 1.0\n"},
            hyperparameters={**QUICK_HYPERPARAMETERS, "train_steps": 2, "checkpoint_every": 1},
        )
        finished = client.jobs.wait(job.id, timeout=600, poll_interval=0.5)
    assert finished.status == rft.JobStatus.SUCCEEDED, finished.failure_reason
    return FinishedJob(key, finished)


@pytest.fixture
def finished_client(stack: LocalStack, finished_job: FinishedJob) -> Iterator[rft.Client]:
    """A client of the tenant that owns ``finished_job``."""
    with rft.Client(api_key=finished_job.api_key, base_url=stack.base_url, timeout=60) as client:
        yield client
