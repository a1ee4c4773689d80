"""Cost from the SDK and the CLI: a dry-run estimate, a job's cost fields, the tenant's usage."""

from __future__ import annotations

import dataclasses

import pytest
from typer.testing import CliRunner

import rft
from rft.cli.app import app
from service.stack import LocalStack
from tests.held_jobs import held_job
from tests.recording.steps import step_record
from tests.sdk.job_inputs import SHOUT_SOURCE
from tests.tiny import TINY_HYPERPARAMETERS
from tests.worker_adverts import wait_for_advert
from workers.step_store import store_step


@pytest.fixture
def cli(stack: LocalStack, api_key: str) -> CliRunner:
    return CliRunner(env={"RFT_API_KEY": api_key, "RFT_BASE_URL": stack.base_url, "COLUMNS": "200"})


def invoke(cli: CliRunner, *args: str) -> str:
    result = cli.invoke(app, list(args))
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output


def test_estimate_is_a_dry_run_of_create(
    stack: LocalStack, rft_client: rft.Client, dataset: rft.Dataset
) -> None:
    wait_for_advert(stack)
    estimate = rft_client.jobs.estimate(
        dataset=dataset,
        reward_functions={"shout": SHOUT_SOURCE},
        hyperparameters=TINY_HYPERPARAMETERS,
    )
    hp = TINY_HYPERPARAMETERS
    completions = hp["prompts_per_step"] * hp["num_generations"]
    assert isinstance(estimate, rft.CostEstimate)
    assert estimate.max_tokens == completions * hp["max_completion_length"] * estimate.train_steps
    assert [entry.device_kind for entry in estimate.workers] == ["cpu"]
    assert list(rft_client.jobs.list()) == []
    with pytest.raises(TypeError, match="colour"):
        rft_client.jobs.estimate(dataset=dataset, colour="red")


def test_cost_and_usage_in_the_sdk_and_cli(
    rft_client: rft.Client, idle_job: rft.Job, cli: CliRunner, api_key: str
) -> None:
    assert (
        idle_job.cost_estimate is not None and idle_job.cost_estimate.model_key == "model:rft-tiny"
    )
    expected = invoke(cli, "jobs", "get", idle_job.id, "--cost")
    assert "expected:" in expected and "model:rft-tiny" in expected
    assert "GPU-seconds used" in expected

    running = held_job(api_key, steps_completed=0, train_steps=5)
    for step in (1, 2):
        store_step(running, dataclasses.replace(step_record(step), duration_s=2.0))
    job = rft_client.jobs.get(running)
    assert job.eta_seconds == pytest.approx(3 * 2.0)
    assert "time left: ~6.0 s" in invoke(cli, "jobs", "get", running, "--cost")

    usage = rft_client.usage.retrieve(group_by="job")
    assert isinstance(usage, rft.Usage) and usage.group_by == "job"
    assert {row.job_id: row.tokens for row in usage.rows}[running] == 2 * 20
    table = invoke(cli, "usage", "--group-by", "job")
    assert running in table and "total" in table
    rft_client.jobs.cancel(running)
