"""A job scored by a reward model alone, through the API: it learns what the model prefers,
and a live update swaps the model and its weight from the step it promises."""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.base_models.built_in.tiny_reward_model import (
    TINY_REWARD_MODEL_NAME,
    tiny_reward_model_dir,
)
from service.demo import demo_dataset
from service.stack import LocalStack
from tests.conftest import tenant_client
from tests.integration.helpers import all_pages, create_job, upload_jsonl, wait_for, wait_until
from tests.tiny import TINY_HYPERPARAMETERS

pytestmark = pytest.mark.integration

TRAIN_STEPS = 20


@pytest.fixture(scope="module")
def model_cache(stack: LocalStack) -> Path:
    """The session stack's model cache, where its worker builds the built-in models: also a
    model root, so the built reward model's directory can be named as a model path."""
    return stack.state_dir / "models"


@pytest.fixture
def client(stack: LocalStack) -> Iterator[httpx.Client]:
    with tenant_client(stack) as http:
        http.timeout = httpx.Timeout(300)
        yield http


def test_a_job_learns_from_a_reward_model_and_swaps_it_live(
    client: httpx.Client, model_cache: Path
) -> None:
    dataset_id = upload_jsonl(client, demo_dataset())
    job = create_job(
        client,
        {
            "dataset_id": dataset_id,
            "reward_functions": {"judge": {"model": TINY_REWARD_MODEL_NAME, "batch_size": 8}},
            "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": TRAIN_STEPS, "seed": 0},
        },
    )
    job_id = job["id"]
    wait_until(client, job_id, lambda j: j["steps_completed"] >= 3)

    # Preview a new weight: the model that scored the step keeps its recorded scores.
    preview = client.put(
        f"/v1/jobs/{job_id}/config",
        params={"dry_run": "true"},
        json={"reward_functions": {"judge": {"model": TINY_REWARD_MODEL_NAME, "weight": 2.0}}},
    )
    assert preview.status_code == 200, preview.text
    assert preview.json()["not_scored"] == []
    for row in preview.json()["completions"]:
        assert row["new_scores"]["judge"] == row["old_scores"]["judge"]
        assert row["new_total"] == pytest.approx(2 * row["old_total"])

    # The swap: the same model by its path (the worker built it there), at weight 2.
    path = str(tiny_reward_model_dir(model_cache))
    swapped = client.put(
        f"/v1/jobs/{job_id}/config",
        json={"reward_functions": {"judge": {"model": path, "weight": 2.0}}},
        headers={"If-Match": '"1"'},
    )
    assert swapped.status_code == 200, swapped.text
    assert swapped.json()["changed_functions"] == ["judge"]
    switch_step = swapped.json()["applies_from_step"]
    assert swapped.json()["config"]["reward_functions"]["judge"]["label"] == "judge_v2"

    assert wait_for(client, job_id)["status"] == "succeeded"
    versions = client.get(f"/v1/jobs/{job_id}/config/versions").json()
    assert versions[1]["applied_at_step"] == switch_step
    steps = client.get(f"/v1/jobs/{job_id}/steps").json()["data"]
    assert [step["step"] for step in steps] == list(range(1, TRAIN_STEPS + 1))
    for step in steps:
        judge = step["reward_functions"]["judge"]
        swapped_in = step["step"] >= switch_step
        assert (step["config_version"], judge["version"]) == ((2, 2) if swapped_in else (1, 1))
        assert judge["weight"] == (2.0 if swapped_in else 1.0)
        assert judge["errors"] == 0
        assert step["reward_mean"] == pytest.approx(judge["weight"] * judge["mean"], rel=1e-4)
    completions = all_pages(client, f"/v1/jobs/{job_id}/completions", step=TRAIN_STEPS)
    assert all(isinstance(c["scores"]["judge"], float) for c in completions)

    # The model's score (before weighting) rose: the policy writes more "a"s per token.
    means: list[Any] = [step["reward_functions"]["judge"]["mean"] for step in steps]
    first, last = statistics.fmean(means[:5]), statistics.fmean(means[-5:])
    assert last > first + 0.1, means
