"""A job's guards at creation: absurd thresholds and unknown guards are refused with a 422
that names the field; a supervised job has no guards."""

from __future__ import annotations

import httpx
import pytest

from tests.integration.helpers import upload_jsonl
from tests.tiny import TINY_HYPERPARAMETERS

SOURCE = "def f(prompt, completion, example):\n    return 1.0\n"


@pytest.mark.parametrize(
    ("guards", "named"),
    [
        ({"pause_on": ["lenght_drift"]}, "pause_on"),
        ({"pause_on": "length_drift"}, "pause_on"),
        ({"patience": 0}, "patience"),
        ({"repetition_share": 2}, "repetition_share"),
        ({"length_limit_share": 0}, "length_limit_share"),
        ({"kl_factor": 0.5}, "kl_factor"),
        ({"dominance_share": 0.3}, "dominance_share"),
        ({"divergence_evals": 1}, "divergence_evals"),
        ({"no_such_threshold": 1}, "no_such_threshold"),
    ],
)
def test_bad_guard_settings_are_refused(
    client: httpx.Client, guards: dict[str, object], named: str
) -> None:
    dataset_id = upload_jsonl(client, [{"prompt": "p"}, {"prompt": "q"}])
    response = client.post(
        "/v1/jobs",
        json={
            "dataset_id": dataset_id,
            "reward_functions": {"f": {"source": SOURCE}},
            "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 1},
            "guards": guards,
        },
    )
    assert response.status_code == 422, response.text
    assert named in response.text


def test_a_supervised_job_takes_no_guards(client: httpx.Client) -> None:
    dataset_id = upload_jsonl(client, [{"prompt": "p", "completion": "c"}])
    response = client.post(
        "/v1/jobs",
        json={"dataset_id": dataset_id, "method": "sft", "guards": {"patience": 2}},
    )
    assert response.status_code == 422, response.text
    assert "guards" in response.text
