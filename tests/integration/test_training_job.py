"""A real GRPO job through the HTTP API: Postgres, Redis, a Celery worker process, TRL."""

from __future__ import annotations

import json
import math
import time
from typing import Any

import httpx
import pytest

from service.db import session_scope
from service.demo.follow import DEMO_DIR, demo_job_request
from service.models import Job, Throughput
from tests.integration.helpers import all_pages, upload_jsonl, wait_for
from tests.tiny import TINY_HYPERPARAMETERS
from tests.ui.event_stream import messages_until

pytestmark = pytest.mark.integration


SAMPLE_FORM = """
def vowels(prompt, completion, example):
    print("scoring", len(completion))
    return sum(ch in "aeiou" for ch in completion) / max(1, len(completion))
"""
BATCH_FORM = """
def length_bonus(prompts, completions, **kwargs):
    return [min(len(c), 10) / 10 + len(kwargs["topic"][i]) * 0.0 for i, c in enumerate(completions)]
"""


def run_source(source: str, name: str) -> Any:
    namespace: dict[str, Any] = {}
    exec(compile(source, name, "exec"), namespace)
    return namespace[name]


def test_job_records_every_step_and_completion(client: httpx.Client) -> None:
    topics = ["cats", "dogs", "the sea", "apples", "rain", "music"]
    dataset_id = upload_jsonl(client, [{"prompt": f"Write about {t}:", "topic": t} for t in topics])
    steps, prompts_per_step, generations = 4, 2, 4
    response = client.post(
        "/v1/jobs",
        json={
            "dataset_id": dataset_id,
            "reward_functions": {
                "vowels": {"source": SAMPLE_FORM, "weight": 1.0},
                "length_bonus": {"source": BATCH_FORM, "weight": 0.5},
            },
            "hyperparameters": {
                **TINY_HYPERPARAMETERS,
                "train_steps": steps,
                "prompts_per_step": prompts_per_step,
                "num_generations": generations,
                "max_completion_length": 12,
            },
        },
    )
    assert response.status_code == 201, response.text
    job = wait_for(client, response.json()["id"])
    assert job["status"] == "succeeded", job["failure_reason"]
    assert job["steps_completed"] == steps
    # Its cost: device time held, no time left, and its steps measured for the next estimates.
    assert job["gpu_seconds"] > 0 and job["eta_seconds"] is None
    with session_scope() as session:
        row = session.get(Job, job["id"])
        assert row is not None and row.model_key is not None and row.device_kind is not None
        key = (row.device_kind, row.model_key, row.generation_backend)
        measured = session.get(Throughput, key)
        assert measured is not None and measured.steps >= steps - 1

    step_rows = client.get(f"/v1/jobs/{job['id']}/steps").json()["data"]
    assert [s["step"] for s in step_rows] == list(range(1, steps + 1))
    for step in step_rows:
        assert set(step["reward_functions"]) == {"vowels", "length_bonus"}
        assert step["reward_functions"]["vowels"]["scored"] == prompts_per_step * generations
        assert step["loss"] is not None and step["learning_rate"] is not None
        assert step["duration_s"] > 0

    completions = all_pages(client, f"/v1/jobs/{job['id']}/completions")
    assert len(completions) == steps * prompts_per_step * generations
    vowels = run_source(SAMPLE_FORM, "vowels")
    length_bonus = run_source(BATCH_FORM, "length_bonus")
    for row in completions:
        expected_vowels = vowels(row["prompt"], row["completion"], {})
        expected_length = length_bonus([row["prompt"]], [row["completion"]], topic=["x"])[0]
        assert row["scores"]["vowels"] == pytest.approx(expected_vowels)
        assert row["scores"]["length_bonus"] == pytest.approx(expected_length)
        assert row["total"] == pytest.approx(expected_vowels + 0.5 * expected_length)
        assert row["advantage"] is not None and math.isfinite(row["advantage"])
        assert row["token_count"] >= 0

    # Each step's mean equals the mean of its stored completions' totals.
    for step in step_rows:
        totals = [c["total"] for c in completions if c["step"] == step["step"]]
        assert step["reward_mean"] == pytest.approx(sum(totals) / len(totals), rel=1e-4)

    # Small pages walk the same rows in (step, id) order, without overlap or gaps.
    paged: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 5}
    while True:
        page = client.get(f"/v1/jobs/{job['id']}/completions", params=params).json()
        paged.extend(page["data"])
        if not page["has_more"]:
            break
        params["after"] = page["next_cursor"]
    in_order = sorted(completions, key=lambda c: (c["step"], c["id"]))
    assert [c["id"] for c in paged] == [c["id"] for c in in_order]
    bad = client.get(f"/v1/jobs/{job['id']}/completions", params={"after": "x"})
    # The cursor's shape is part of the OpenAPI document: a 422 naming the parameter.
    assert bad.status_code == 422 and "after" in bad.text

    # Completions filter by step, and pages do not overlap.
    step_two = all_pages(client, f"/v1/jobs/{job['id']}/completions", step=2)
    assert {c["step"] for c in step_two} == {2}
    assert len({c["id"] for c in completions}) == len(completions)


def test_demo_job_learns(client: httpx.Client) -> None:
    with open(DEMO_DIR / "dataset.jsonl", "rb") as handle:
        dataset = client.post("/v1/datasets", files={"file": ("demo.jsonl", handle)}).json()
    response = client.post("/v1/jobs", json=demo_job_request(dataset["id"], train_steps=20))
    job = wait_for(client, response.json()["id"])
    assert job["status"] == "succeeded", job["failure_reason"]
    rewards = [s["reward_mean"] for s in client.get(f"/v1/jobs/{job['id']}/steps").json()["data"]]
    assert len(rewards) == 20
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    assert last > first + 0.05, rewards


def test_cancel_stops_a_running_job(client: httpx.Client) -> None:
    dataset_id = upload_jsonl(client, [{"prompt": f"p{i}"} for i in range(4)])
    source = "def slow(prompt, completion, example):\n    return 1.0\n"
    job = client.post(
        "/v1/jobs",
        json={
            "dataset_id": dataset_id,
            "reward_functions": {"slow": {"source": source}},
            "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 500},
        },
    ).json()
    deadline = time.monotonic() + 300
    while client.get(f"/v1/jobs/{job['id']}").json()["steps_completed"] < 2:
        assert time.monotonic() < deadline
        time.sleep(0.3)
    assert client.post(f"/v1/jobs/{job['id']}/cancel").json()["status"] == "cancelled"
    # The event stream ends once the worker has let go of the job: nothing is recorded after.
    with client.stream(
        "GET", f"/v1/jobs/{job['id']}/events", timeout=httpx.Timeout(60, read=30)
    ) as response:
        end = messages_until(response, lambda m: m.event == "end")[-1]
    assert end.event == "end" and end.json["status"] == "cancelled"
    stopped_at = end.json["steps_completed"]
    assert 2 <= stopped_at < 500
    time.sleep(1)
    final = client.get(f"/v1/jobs/{job['id']}").json()
    assert final["status"] == "cancelled" and final["steps_completed"] == stopped_at
    assert len(client.get(f"/v1/jobs/{job['id']}/steps").json()["data"]) == stopped_at


def test_reward_functions_use_the_jobs_secrets_in_training(client: httpx.Client) -> None:
    secret = "sk-training-5e8d1f0b"
    dataset_id = upload_jsonl(client, [{"prompt": f"p{i}"} for i in range(4)])
    source = (
        "import os\n"
        "def keyed(prompt, completion, example):\n"
        "    print('key', os.environ.get('JUDGE_KEY'))\n"
        f"    return float(os.environ.get('JUDGE_KEY') == {secret!r})\n"
    )
    response = client.post(
        "/v1/jobs",
        json={
            "dataset_id": dataset_id,
            "reward_functions": {"keyed": {"source": source}},
            "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 2, "num_generations": 2},
            "secrets": {"JUDGE_KEY": secret},
        },
    )
    assert response.status_code == 201, response.text
    job = wait_for(client, response.json()["id"])
    assert job["status"] == "succeeded", job["failure_reason"]
    steps = client.get(f"/v1/jobs/{job['id']}/steps").json()["data"]
    assert [step["reward_mean"] for step in steps] == [1.0, 1.0]  # the worker's sandbox had it
    logs = client.get(f"/v1/jobs/{job['id']}/logs").json()["data"]
    assert logs and all("key [secret JUDGE_KEY]" in log["output"] for log in logs)
    assert secret not in json.dumps(logs)
