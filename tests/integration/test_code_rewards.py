"""A reward that runs code in a real job: pytest, from the job's runtime packages, runs the
dataset's tests in the sandbox at every step, and a config dry run does the same on the API."""

from __future__ import annotations

import httpx
import pytest

from tests.code_rewards import FIXED_CANDIDATE, RIGHT, TESTS, WRONG
from tests.integration.helpers import all_pages, create_job, upload_jsonl, wait_for
from tests.tiny import TINY_HYPERPARAMETERS

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REWARD = {"source": FIXED_CANDIDATE, "max_concurrency": 4, "sample_timeout_s": 20}


def test_a_job_scores_its_completions_by_running_pytest(client: httpx.Client) -> None:
    # Row 0's solution passes its tests, row 1's fails them: whatever the model writes.
    rows = [
        {"prompt": "Write add(a, b).", "tests": TESTS, "solution": RIGHT},
        {"prompt": "Write add(a, b) again.", "tests": TESTS, "solution": WRONG},
    ]
    job = create_job(
        client,
        {
            "dataset_id": upload_jsonl(client, rows),
            "reward_functions": {"passes_tests": REWARD},
            "runtime_packages": ["pytest"],
            "hyperparameters": {
                **TINY_HYPERPARAMETERS,
                "train_steps": 2,
                "prompts_per_step": 2,
                "num_generations": 4,
            },
        },
    )
    job = wait_for(client, job["id"])
    assert job["status"] == "succeeded", job["failure_reason"]
    completions = all_pages(client, f"/v1/jobs/{job['id']}/completions")
    assert len(completions) == 2 * 2 * 4
    for completion in completions:
        expected = 1.0 if completion["dataset_index"] == 0 else 0.0
        assert completion["scores"] == {"passes_tests": expected}, completion

    # The dry run installs the job's runtime packages on the API and scores the same way.
    response = client.put(
        f"/v1/jobs/{job['id']}/config",
        params={"dry_run": "true"},
        json={"reward_functions": {"passes_tests": REWARD}},
    )
    assert response.status_code == 200, response.text
    dry_run = response.json()
    assert dry_run["errors"] == {}
    assert dry_run["step"] == 2 and len(dry_run["completions"]) == 8
    for rescored in dry_run["completions"]:
        assert rescored["new_scores"] == rescored["old_scores"]
