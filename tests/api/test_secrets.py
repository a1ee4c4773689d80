"""Job secrets: usable by the job's functions, encrypted at rest, never shown, masked in output."""

from __future__ import annotations

import json

import httpx
import pytest
from sqlalchemy import select

from service.db import session_scope
from service.models import Job
from service.stack import LocalStack
from tests.tiny import TINY_HYPERPARAMETERS

SECRET = "sk-judge-7f3a9c2e41"
USES_SECRET = (
    "import os\n"
    "def judge(prompt, completion, example):\n"
    "    print('calling the judge with', os.environ['JUDGE_KEY'])\n"
    "    return float(os.environ['JUDGE_KEY'] == example['expected'])\n"
)


def judge_job(dataset_id: str, **fields: object) -> dict[str, object]:
    return {
        "dataset_id": dataset_id,
        "reward_functions": {"judge": {"source": USES_SECRET}},
        "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 1},
        **fields,
    }


@pytest.fixture
def dataset_id(client: httpx.Client) -> str:
    rows = "\n".join(json.dumps({"prompt": f"p{i}", "expected": SECRET}) for i in range(8))
    return client.post("/v1/datasets", files={"file": ("d.jsonl", rows.encode())}).json()["id"]


def test_functions_see_their_secrets_and_nobody_sees_the_values(
    stack: LocalStack, client: httpx.Client, dataset_id: str
) -> None:
    response = client.post("/v1/jobs", json=judge_job(dataset_id, secrets={"JUDGE_KEY": SECRET}))
    # Pre-flight ran the function with the secret: without it, it would fail on every sample.
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["secret_names"] == ["JUDGE_KEY"]
    client.post(f"/v1/jobs/{job['id']}/cancel")
    for path in (f"/v1/jobs/{job['id']}", "/v1/jobs", f"/v1/jobs/{job['id']}/config"):
        shown = client.get(path)
        assert shown.status_code == 200 and SECRET not in shown.text
    assert client.get(f"/v1/jobs/{job['id']}/config").json()["secret_names"] == ["JUDGE_KEY"]
    with session_scope() as session:
        row = session.scalars(select(Job).where(Job.id == job["id"])).one()
        assert row.secrets_sealed is not None and SECRET not in row.secrets_sealed


def test_a_function_that_needs_a_missing_secret_is_refused(
    client: httpx.Client, dataset_id: str
) -> None:
    response = client.post("/v1/jobs", json=judge_job(dataset_id))
    assert response.status_code == 400 and "JUDGE_KEY" in response.json()["detail"]


@pytest.mark.parametrize(
    ("secrets", "complaint"),
    [
        ({"1BAD": "x"}, "not an environment variable name"),
        ({"PATH": "/evil"}, "reserved"),
        ({"LD_PRELOAD": "/tmp/x.so"}, "reserved"),
        ({"BIG": "x" * 20_000}, "at most"),
    ],
)
def test_bad_secrets_are_422_naming_them(
    client: httpx.Client, dataset_id: str, secrets: dict[str, str], complaint: str
) -> None:
    response = client.post("/v1/jobs", json=judge_job(dataset_id, secrets=secrets))
    assert response.status_code == 422 and complaint in response.text


def test_the_test_endpoint_takes_secrets_and_masks_them(client: httpx.Client) -> None:
    response = client.post(
        "/v1/reward-functions/test",
        json={
            "reward_functions": {
                "judge": {"source": USES_SECRET},
                "leaky": {
                    "source": "import os\ndef leaky(p, c, e):\n"
                    "    raise RuntimeError('bad key ' + os.environ['JUDGE_KEY'])\n"
                },
            },
            "samples": [{"prompt": "p", "completion": "c", "example": {"expected": SECRET}}],
            "secrets": {"JUDGE_KEY": SECRET},
        },
    )
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert results["judge"]["scores"] == [1.0]
    assert "calling the judge with [secret JUDGE_KEY]" in results["judge"]["logs"]
    assert "bad key [secret JUDGE_KEY]" in results["leaky"]["errors"][0]["message"]
    assert SECRET not in json.dumps(results)  # (the samples echoed back hold it: ours)
