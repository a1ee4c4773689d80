"""A job's extra pip packages: installed for that job only, read-only in its sandbox."""

from __future__ import annotations

import httpx
import pytest

from tests.integration.helpers import create_job, upload_jsonl, wait_for
from tests.tiny import TINY_HYPERPARAMETERS

pytestmark = [pytest.mark.integration, pytest.mark.slow]

USES_PACKAGE = (
    "import six\n"
    "def uses_six(prompt, completion, example):\n"
    "    return float(isinstance(completion, six.string_types))\n"
)


def test_functions_use_the_jobs_runtime_packages(client: httpx.Client) -> None:
    dataset_id = upload_jsonl(client, [{"prompt": f"p{i}"} for i in range(4)])
    job = create_job(
        client,
        {
            "dataset_id": dataset_id,
            "reward_functions": {"uses_six": {"source": USES_PACKAGE}},
            "runtime_packages": ["six>=1.15"],
            "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 2, "num_generations": 4},
        },
    )
    job = wait_for(client, job["id"])
    assert job["status"] == "succeeded", job["failure_reason"]
    assert job["runtime_packages"] == ["six>=1.15"]
    steps = client.get(f"/v1/jobs/{job['id']}/steps").json()["data"]
    assert [s["reward_mean"] for s in steps] == [1.0, 1.0]


def test_a_package_that_cannot_install_fails_the_job_with_pips_error(
    client: httpx.Client,
) -> None:
    dataset_id = upload_jsonl(client, [{"prompt": f"p{i}"} for i in range(4)])
    job = create_job(
        client,
        {
            "dataset_id": dataset_id,
            "reward_functions": {"uses_six": {"source": USES_PACKAGE}},
            "runtime_packages": ["rft-no-such-package-anywhere==0.0.1"],
            "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 2},
        },
    )
    job = wait_for(client, job["id"])
    assert job["status"] == "failed"
    assert "pip could not install runtime packages" in job["failure_reason"]
    assert "rft-no-such-package-anywhere" in job["failure_reason"]
    assert job["steps_completed"] == 0
