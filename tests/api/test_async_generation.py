"""hyperparameters.async_generation at job creation: stored as sent, its bound checked, and
every combination the async rollout engine cannot run refused with a 400 naming it. The
workers are adverts in Redis (the idle stack runs none), written as a worker writes them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from service.db import to_sqlalchemy_url
from service.stack import LocalStack
from service.work_queue.queue import advertise_capacity, withdraw_capacity
from tests.tiny import TINY_HYPERPARAMETERS
from workers.step_store import record_step
from workers.training.async_generation import StepRollouts
from workers.training.step_records import FunctionStepMetrics, StepRecord

REWARD = "def score(prompt, completion, example):\n    return float(len(completion))\n"
ADD = "def add(a: int, b: int) -> int:\n    return a + b\n"
ASYNC = {"async_generation": {"max_staleness": 2}}


@pytest.fixture
def client(idle_api: tuple[LocalStack, httpx.Client]) -> httpx.Client:
    return idle_api[1]


@pytest.fixture
def dataset_id(client: httpx.Client) -> str:
    rows = "\n".join(json.dumps({"prompt": f"p{i}"}) for i in range(4)).encode()
    return str(client.post("/v1/datasets", files={"file": ("d.jsonl", rows)}).json()["id"])


@pytest.fixture
def advertise(idle_api: tuple[LocalStack, httpx.Client]) -> Iterator[Any]:
    stack, _ = idle_api
    assert stack.redis_url
    names: list[str] = []

    def advertise(name: str, generation_backend: str) -> None:
        advertise_capacity(
            stack.redis_url or "", name, 1, 60, "cpu", generation_backend=generation_backend
        )
        names.append(name)

    yield advertise
    for name in names:
        withdraw_capacity(stack.redis_url, name)


def create(client: httpx.Client, dataset_id: str, hyperparameters: dict, **job: Any) -> Any:
    return client.post(
        "/v1/jobs",
        json={
            "dataset_id": dataset_id,
            "reward_functions": {"score": {"source": REWARD}},
            "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 2, **hyperparameters},
            **job,
        },
    )


def test_the_option_is_stored_and_defaults_to_one_step_off_policy(
    client: httpx.Client, dataset_id: str
) -> None:
    response = create(client, dataset_id, {"async_generation": {}})
    assert response.status_code == 201, response.text
    assert response.json()["hyperparameters"]["async_generation"] == {"max_staleness": 1}
    plain = create(client, dataset_id, {})
    assert plain.json()["hyperparameters"]["async_generation"] is None


@pytest.mark.parametrize("staleness", [0, 5, -1, "x"])
def test_a_staleness_outside_one_to_four_is_422_naming_it(
    client: httpx.Client, dataset_id: str, staleness: Any
) -> None:
    response = create(client, dataset_id, {"async_generation": {"max_staleness": staleness}})
    assert response.status_code == 422
    assert "max_staleness" in response.text


@pytest.mark.parametrize(
    ("hyperparameters", "job", "named"),
    [
        ({"reproducible_sampling": True}, {}, "reproducible_sampling"),
        ({"vllm_sleep_mode": True}, {}, "vllm_sleep_mode"),
        ({}, {"tools": [{"name": "add", "source": ADD}]}, "tools/environments"),
        ({}, {"num_devices": 2}, "num_devices 2"),
        ({}, {"validation_split": 0.25}, "a validation set"),
    ],
)
def test_combinations_the_rollout_engine_cannot_run_are_400_naming_them(
    client: httpx.Client, dataset_id: str, hyperparameters: dict, job: dict, named: str
) -> None:
    response = create(client, dataset_id, {**ASYNC, **hyperparameters}, **job)
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "AsyncGenerationRefused"
    assert "async_generation" in response.json()["detail"]
    assert named in response.json()["detail"]


def test_two_conflicts_are_named_together(client: httpx.Client, dataset_id: str) -> None:
    response = create(
        client, dataset_id, {**ASYNC, "reproducible_sampling": True, "vllm_sleep_mode": True}
    )
    assert response.status_code == 400
    detail = response.json()["detail"]
    assert "reproducible_sampling" in detail and "vllm_sleep_mode" in detail


def test_a_supervised_job_cannot_ask_for_it(client: httpx.Client, dataset_id: str) -> None:
    response = client.post(
        "/v1/jobs",
        json={"dataset_id": dataset_id, "method": "sft", "hyperparameters": ASYNC},
    )
    assert response.status_code == 422
    assert "async_generation" in response.text


def test_workers_that_generate_with_transformers_only_are_400(
    client: httpx.Client, dataset_id: str, advertise: Any
) -> None:
    advertise("async-test-transformers", "transformers")
    response = create(client, dataset_id, ASYNC)
    assert response.status_code == 400, response.text
    assert "needs vLLM generation" in response.json()["detail"]
    # The same deployment takes a synchronous job, and an async one once a vLLM worker runs.
    assert create(client, dataset_id, {}).status_code == 201
    advertise("async-test-vllm", "vllm")
    assert create(client, dataset_id, ASYNC).status_code == 201


def test_a_steps_staleness_and_importance_ratios_come_back_on_the_steps_api(
    idle_api: tuple[LocalStack, httpx.Client], dataset_id: str
) -> None:
    """Step 5 trained by policy version 4 on rollouts the engine sampled with version 2,
    under config version 1, scored under version 2 (a live update between the two)."""
    stack, client = idle_api
    job = create(client, dataset_id, ASYNC).json()
    rollouts = StepRollouts(
        policy_version=4, rollout_version=2, sampling_config_version=1, groups=2
    )
    logs = {
        "sampling/importance_sampling_ratio/min": 0.25,
        "sampling/importance_sampling_ratio/mean": 1.0,
        "sampling/importance_sampling_ratio/max": 3.0,
    }
    record = StepRecord(
        step=5,
        config_version=2,
        reward_mean=0.5,
        reward_std=0.1,
        loss=0.0,
        kl=None,
        learning_rate=2e-2,
        duration_s=0.1,
        functions={"score": FunctionStepMetrics("score", 2, 1.0, 0.5, 0.1, 16, 0)},
        completions=[],
        async_generation=rollouts.record(2, logs),
    )
    engine = create_engine(to_sqlalchemy_url(stack.database_url or ""))
    try:  # stored as the worker stores a step (workers.step_store)
        with Session(engine) as session, session.begin():
            record_step(session, job["id"], record)
    finally:
        engine.dispose()
    [step] = client.get(f"/v1/jobs/{job['id']}/steps").json()["data"]
    assert step["config_version"] == 2
    assert step["async_generation"] == {
        "max_staleness": 2,
        "policy_version": 4,
        "rollout_policy_versions": [2, 2],
        "staleness_max": 2,
        "staleness_mean": 2.0,
        "sampling_config_versions": [1],
        "importance_sampling_ratio": {"min": 0.25, "mean": 1.0, "max": 3.0},
    }
    # A synchronous job's steps have none.
    plain = create(client, dataset_id, {}).json()
    record.async_generation = None
    engine = create_engine(to_sqlalchemy_url(stack.database_url or ""))
    try:
        with Session(engine) as session, session.begin():
            record_step(session, plain["id"], record)
    finally:
        engine.dispose()
    [step] = client.get(f"/v1/jobs/{plain['id']}/steps").json()["data"]
    assert step["async_generation"] is None
