"""Jobs through the SDK on the real stack: create, list, cancel, errors, training results,
live config updates, logs and the reward-function test endpoint."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

import rft
from service.stack import LocalStack
from tests.code_rewards import PASSES_TESTS, RIGHT, TESTS, WRONG
from tests.sdk.job_inputs import QUICK_HYPERPARAMETERS, SHOUT_SOURCE
from tests.tiny import TINY_HYPERPARAMETERS


def vowel_share(prompt, completion, example):  # type: ignore[no-untyped-def]
    print("scored", len(completion))
    return sum(ch in "aeiou" for ch in completion) / max(1, len(completion))


def always_one(prompt: str, completion: str, example: dict) -> float:
    return 1.0


def always_two(prompt: str, completion: str, example: dict) -> float:
    return 2.0


@pytest.fixture(scope="module")
def trained_job(stack: LocalStack) -> Iterator[tuple[rft.Client, rft.Job]]:
    """One short real training run, shared by the tests that read its results."""
    from tests.conftest import new_tenant_key

    with rft.Client(api_key=new_tenant_key(stack), base_url=stack.base_url) as client:
        dataset = client.datasets.upload(
            [{"prompt": f"Write about {topic}:"} for topic in "abcdef"], name="trained"
        )
        job = client.jobs.create(
            dataset=dataset,
            reward_functions={
                # The key differs from the function's name: the single def is used.
                "vowels": vowel_share,
                "shout": rft.RewardFunction(SHOUT_SOURCE, weight=0.5),
            },
            hyperparameters=rft.Hyperparameters(**QUICK_HYPERPARAMETERS),
            name="sdk trained",
        )
        finished = client.jobs.wait(job.id, timeout=300, poll_interval=0.5)
        yield client, finished


def test_create_get_list_cancel(rft_client: rft.Client, dataset: rft.Dataset) -> None:
    job = rft_client.jobs.create(
        dataset=dataset.id,
        reward_functions={"shout": SHOUT_SOURCE},
        hyperparameters={**TINY_HYPERPARAMETERS, "train_steps": 3},
        name="to cancel",
    )
    assert job.status in (rft.JobStatus.QUEUED, rft.JobStatus.RUNNING)
    assert job.name == "to cancel" and job.train_steps == 3 and job.base_model == "rft-tiny"
    assert rft_client.jobs.get(job.id).id == job.id
    cancelled = rft_client.jobs.cancel(job.id)
    assert cancelled.status == rft.JobStatus.CANCELLED and cancelled.status.is_terminal
    assert job.id in [listed.id for listed in rft_client.jobs.list()]
    assert [j.id for j in rft_client.jobs.list(status="cancelled")] == [job.id]


def test_list_pages_through_every_job(rft_client: rft.Client, dataset: rft.Dataset) -> None:
    created = []
    for _ in range(3):
        job = rft_client.jobs.create(
            dataset=dataset,
            reward_functions={"shout": SHOUT_SOURCE},
            hyperparameters=TINY_HYPERPARAMETERS,
        )
        rft_client.jobs.cancel(job.id)
        created.append(job.id)
    assert [job.id for job in rft_client.jobs.list(limit=2)] == created[::-1]


def test_not_found_carries_the_server_detail(rft_client: rft.Client) -> None:
    with pytest.raises(rft.NotFoundError) as caught:
        rft_client.jobs.get("job_missing")
    error = caught.value
    assert error.status_code == 404 and error.error == "NotFound"
    assert "job_missing" in error.detail and "job_missing" in str(error)
    with pytest.raises(rft.NotFoundError, match="ds_nope"):
        rft_client.jobs.create(dataset="ds_nope", reward_functions={"shout": SHOUT_SOURCE})


def test_broken_reward_code_is_a_bad_request_naming_the_function(
    rft_client: rft.Client, dataset: rft.Dataset
) -> None:
    with pytest.raises(rft.BadRequestError) as caught:
        rft_client.jobs.create(
            dataset=dataset, reward_functions={"fmt": "def fmt(prompt, completion:\n  x"}
        )
    assert caught.value.error == "InvalidRewardFunction"
    assert "'fmt'" in caught.value.detail


def test_invalid_hyperparameters_are_422_naming_the_field(
    rft_client: rft.Client, dataset: rft.Dataset
) -> None:
    with pytest.raises(rft.UnprocessableEntityError) as caught:
        rft_client.jobs.create(
            dataset=dataset, reward_functions={"shout": SHOUT_SOURCE}, hyperparameters={"nope": 1}
        )
    assert caught.value.status_code == 422
    assert "nope" in caught.value.detail and caught.value.errors


def test_typed_hyperparameters_are_checked_locally() -> None:
    with pytest.raises(ValueError, match="train_steps"):
        rft.Hyperparameters(train_steps=0)


def test_wrong_api_key_is_an_authentication_error(stack: LocalStack) -> None:
    with (
        rft.Client(api_key="rft_wrong", base_url=stack.base_url) as client,
        pytest.raises(rft.AuthenticationError) as caught,
    ):
        list(client.jobs.list())
    assert caught.value.status_code == 401 and caught.value.detail


def test_missing_api_key_is_refused_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RFT_API_KEY", raising=False)
    with pytest.raises(rft.RFTError, match="RFT_API_KEY"):
        rft.Client()


def test_environment_gives_key_and_url(
    monkeypatch: pytest.MonkeyPatch, stack: LocalStack, api_key: str
) -> None:
    monkeypatch.setenv("RFT_API_KEY", api_key)
    monkeypatch.setenv("RFT_BASE_URL", stack.base_url + "/")
    with rft.Client() as client:
        assert client.base_url == stack.base_url
        assert list(client.jobs.list()) == []


def test_unreachable_server_is_a_connection_error() -> None:
    with (
        rft.Client(api_key="k", base_url="http://127.0.0.1:9", max_retries=0) as client,
        pytest.raises(rft.APIConnectionError),
    ):
        client.jobs.get("job_x")


def test_cancelling_twice_is_a_conflict(rft_client: rft.Client, idle_job: rft.Job) -> None:
    with pytest.raises(rft.ConflictError) as caught:
        rft_client.jobs.cancel(idle_job.id)
    assert caught.value.error == "IllegalTransition"


def test_training_results_are_typed(trained_job: tuple[rft.Client, rft.Job]) -> None:
    client, job = trained_job
    assert job.status == rft.JobStatus.SUCCEEDED, job.failure_reason
    steps = client.jobs.steps(job.id)
    assert [step.step for step in steps] == [1, 2]
    assert set(steps[0].reward_functions) == {"vowels", "shout"}
    assert steps[0].reward_functions["shout"].weight == 0.5
    assert client.jobs.steps(job.id, after_step=1)[0].step == 2


def test_completions_page_through_the_keyset_cursor(
    trained_job: tuple[rft.Client, rft.Job],
) -> None:
    client, job = trained_job
    per_step = QUICK_HYPERPARAMETERS["num_generations"] * QUICK_HYPERPARAMETERS["prompts_per_step"]
    everything = list(client.jobs.completions(job.id, limit=5))
    assert len(everything) == 2 * per_step
    assert len({c.id for c in everything}) == len(everything)
    pages = list(client.jobs.completions(job.id, limit=5).pages())
    assert [len(page.data) for page in pages] == [5, 5, 5, 1]
    step_two = list(client.jobs.completions(job.id, step=2, limit=3))
    assert len(step_two) == per_step and {c.step for c in step_two} == {2}
    for completion in everything:
        expected = vowel_share(None, completion.completion, None)
        assert completion.scores["vowels"] == pytest.approx(expected)


def test_stream_yields_every_step_and_event_then_stops(
    trained_job: tuple[rft.Client, rft.Job],
) -> None:
    client, job = trained_job
    items = list(client.jobs.stream(job.id))
    assert [item.step for item in items if isinstance(item, rft.Step)] == [1, 2]
    events = [item for item in items if isinstance(item, rft.JobEvent)]
    assert events and len({event.id for event in events}) == len(events)


def test_logs_hold_what_functions_printed(trained_job: tuple[rft.Client, rft.Job]) -> None:
    client, job = trained_job
    logs = list(client.jobs.logs(job.id, function="vowels"))
    assert logs and all(entry.function_name == "vowels" for entry in logs)
    assert "scored" in logs[0].output
    assert {entry.step for entry in client.jobs.logs(job.id, step=2)} == {2}


def test_async_client_reads_the_same_job(
    stack: LocalStack, trained_job: tuple[rft.Client, rft.Job]
) -> None:
    client, job = trained_job

    async def read() -> tuple[rft.Job, list[rft.Step], int, int]:
        async with rft.AsyncClient(api_key=client.api_key, base_url=stack.base_url) as aclient:
            fetched = await aclient.jobs.wait(job.id)
            steps = await aclient.jobs.steps(job.id)
            completions = await aclient.jobs.completions(job.id, limit=7).to_list()
            streamed = [item async for item in aclient.jobs.stream(job.id)]
            return fetched, steps, len(completions), len(streamed)

    fetched, steps, completion_count, streamed = asyncio.run(read())
    assert fetched.id == job.id and len(steps) == 2
    assert completion_count == len(list(client.jobs.completions(job.id)))
    assert streamed >= 2


def test_config_update_mid_run(rft_client: rft.Client, dataset: rft.Dataset) -> None:
    job = rft_client.jobs.create(
        dataset=dataset,
        reward_functions={"score": always_one},
        hyperparameters={
            **TINY_HYPERPARAMETERS,
            "train_steps": 400,
            "num_generations": 4,
            "max_completion_length": 8,
        },
    )
    try:
        rft_client.jobs.wait(job.id, until_step=1, timeout=300, poll_interval=0.3)
        config = rft_client.jobs.get_config(job.id)
        assert config.version == 1 and config.etag == '"1"'
        assert config.reward_functions["score"].version == 1

        config.reward_functions["score"] = always_two
        config.reward_functions["bonus"] = rft.RewardFunction(always_one, weight=0.5)
        preview = rft_client.jobs.update_config(job.id, config, dry_run=True)
        assert isinstance(preview, rft.DryRunResult) and preview.dry_run
        assert rft_client.jobs.get_config(job.id).version == 1  # a dry run stores nothing

        update = rft_client.jobs.update_config(job.id, config)
        assert update.version == 2 and update.changed_functions == ["score"]
        assert update.added_functions == ["bonus"]
        assert update.config.reward_functions["bonus"].weight == 0.5

        # The same (now stale) config again: the If-Match check refuses it.
        with pytest.raises(rft.PreconditionFailedError):
            rft_client.jobs.update_config(job.id, config)
        broken = rft_client.jobs.get_config(job.id)
        broken.reward_functions["score"] = "def score(prompt, completion, example):\n  return (\n"
        with pytest.raises(rft.BadRequestError, match="'score'"):
            rft_client.jobs.update_config(job.id, broken)

        versions = rft_client.jobs.config_versions(job.id)
        assert [version.version for version in versions] == [1, 2]
    finally:
        rft_client.jobs.cancel(job.id)
    ended = rft_client.jobs.get_config(job.id)
    with pytest.raises(rft.ConflictError):
        rft_client.jobs.update_config(job.id, ended)


def test_reward_functions_run_in_the_sandbox_without_a_job(rft_client: rft.Client) -> None:
    result = rft_client.reward_functions.test(
        reward_functions={"vowels": vowel_share, "shout": SHOUT_SOURCE},
        samples=[
            {"prompt": "p", "completion": "aaaa", "example": {}},
            {"prompt": "p", "completion": "LOUD"},
        ],
    )
    assert result.results["vowels"].scores == [1.0, 0.0]
    assert result.results["shout"].scores == [0.0, 1.0]
    assert "scored 4" in result.results["vowels"].logs
    failing = rft_client.reward_functions.test(
        reward_functions={"boom": "def boom(prompt, completion, example):\n    return 1 / 0\n"},
        samples=[{"prompt": "p", "completion": "c"}],
    )
    errors = failing.results["boom"].errors
    assert errors and "ZeroDivisionError" in (errors[0].message + (errors[0].traceback or ""))


def test_a_code_running_reward_is_tried_with_its_runtime_packages(rft_client: rft.Client) -> None:
    samples = [
        {"prompt": "p", "completion": answer, "example": {"tests": TESTS}}
        for answer in (RIGHT, WRONG)
    ]
    result = rft_client.reward_functions.test(
        reward_functions={"passes_tests": PASSES_TESTS},
        samples=samples,
        runtime_packages=["pytest"],
    )
    assert result.results["passes_tests"].scores == [1.0, 0.0]


def test_secrets_reach_the_functions_and_come_back_only_as_names(
    rft_client: rft.Client, dataset: rft.Dataset
) -> None:
    source = (
        "import os\ndef keyed(prompt, completion, example):\n"
        "    return float(os.environ['JUDGE_KEY'] == 'sk-sdk-0a1b2c3d')\n"
    )
    tried = rft_client.reward_functions.test(
        reward_functions={"keyed": source},
        samples=[{"prompt": "p", "completion": "c"}],
        secrets={"JUDGE_KEY": "sk-sdk-0a1b2c3d"},
    )
    assert tried.results["keyed"].scores == [1.0]
    job = rft_client.jobs.create(
        dataset=dataset,
        reward_functions={"keyed": source},
        hyperparameters={**TINY_HYPERPARAMETERS, "train_steps": 1},
        secrets={"JUDGE_KEY": "sk-sdk-0a1b2c3d"},
    )
    rft_client.jobs.cancel(job.id)
    assert job.secret_names == ["JUDGE_KEY"]
    assert rft_client.jobs.get_config(job.id).secret_names == ["JUDGE_KEY"]
