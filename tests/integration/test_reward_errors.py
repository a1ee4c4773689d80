"""Reward functions that fail do not kill the run: typed errors and logs per step."""

from __future__ import annotations

import httpx
import pytest

from tests.integration.helpers import all_pages, create_job, upload_jsonl, wait_for
from tests.tiny import TINY_HYPERPARAMETERS

pytestmark = pytest.mark.integration

# Fails on about 10% of completions, decided by the text so the test can recompute it.
FLAKY = """
def flaky(prompt, completion, example):
    print("scored", repr(completion[:8]))
    if sum(map(ord, completion)) % 10 == 0:
        raise ValueError("flaky failure")
    return 1.0
"""
STEADY = "def steady(prompt, completion, example):\n    return 0.5\n"


def test_a_function_failing_on_some_samples_trains_to_the_end(client: httpx.Client) -> None:
    dataset_id = upload_jsonl(client, [{"prompt": f"Word {i}:"} for i in range(8)])
    steps = 6
    job = create_job(
        client,
        {
            "dataset_id": dataset_id,
            "reward_functions": {"flaky": {"source": FLAKY}, "steady": {"source": STEADY}},
            "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": steps, "num_generations": 8},
        },
    )
    job = wait_for(client, job["id"])
    assert job["status"] == "succeeded", job["failure_reason"]

    completions = all_pages(client, f"/v1/jobs/{job['id']}/completions")
    errors = all_pages(client, f"/v1/jobs/{job['id']}/reward-errors")
    step_rows = client.get(f"/v1/jobs/{job['id']}/steps").json()["data"]
    assert len(step_rows) == steps

    failing = [c for c in completions if sum(map(ord, c["completion"])) % 10 == 0]
    assert failing, "the workload should hit the failure at least once"
    # Stored texts may differ from generated ones only where NUL was replaced; skip those.
    failing = [c for c in failing if "\ufffd" not in c["completion"]]
    for row in failing:
        assert row["scores"]["flaky"] is None
        assert row["total"] == pytest.approx(0.5)  # steady still scores the sample
    assert len(errors) >= len(failing)
    assert {e["kind"] for e in errors} == {"exception"}
    assert all(e["function_name"] == "flaky" for e in errors)
    assert "ValueError: flaky failure" in errors[0]["traceback"]

    for step in step_rows:
        metrics = step["reward_functions"]["flaky"]
        step_errors = [e for e in errors if e["step"] == step["step"]]
        assert metrics["errors"] == len(step_errors)
        assert metrics["error_rate"] == pytest.approx(len(step_errors) / 16)
        assert step["reward_functions"]["steady"]["errors"] == 0

    logs = client.get(f"/v1/jobs/{job['id']}/logs", params={"function": "flaky", "step": 2})
    entries = logs.json()["data"]
    assert len(entries) == 1 and entries[0]["output"].count("scored") >= 14
    assert (
        client.get(f"/v1/jobs/{job['id']}/logs", params={"function": "steady"}).json()["data"] == []
    )


def test_circuit_breaker_fails_a_job_whose_function_always_fails(client: httpx.Client) -> None:
    dataset_id = upload_jsonl(client, [{"prompt": f"Word {i}:", "n": i} for i in range(8)])
    # Passes the pre-flight (rows 0-3) and fails on every other row.
    source = (
        "def picky(prompt, completion, example):\n"
        "    if example['n'] >= 4:\n"
        "        raise KeyError('no score for this row')\n"
        "    return 1.0\n"
    )
    job = create_job(
        client,
        {
            "dataset_id": dataset_id,
            "reward_functions": {"picky": {"source": source}},
            "hyperparameters": {
                **TINY_HYPERPARAMETERS,
                "train_steps": 200,
                "prompts_per_step": 1,
                "num_generations": 4,
                "reward_error_rate_limit": 0.5,
                "reward_error_patience": 2,
            },
        },
    )
    job = wait_for(client, job["id"])
    assert job["status"] == "failed"
    assert "reward function 'picky'" in job["failure_reason"]
    assert "2 consecutive steps" in job["failure_reason"]
    assert "no score for this row" in job["failure_reason"]
    assert job["steps_completed"] < 200
