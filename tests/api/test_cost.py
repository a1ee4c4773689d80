"""Cost through the API: the estimate of a dry run and of a created job, a running job's ETA,
and a tenant's usage by day and by job (rows seeded at the database; no training)."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from statistics import fmean

import httpx
import pytest

from service.db import session_scope
from service.events.schemas import StreamCursor
from service.events.service import read_snapshot
from service.models import GpuUsage, Job, Step
from service.stack import LocalStack
from service.usage.schemas import NO_MEASUREMENT
from tests.held_jobs import held_job
from tests.recording.steps import step_record
from tests.tiny import TINY_HYPERPARAMETERS
from tests.worker_adverts import wait_for_advert
from workers.step_store import store_step

SOURCE = "def shout(prompt, completion, example):\n    return float(completion.isupper())\n"


@pytest.fixture
def job_request(stack: LocalStack, client: httpx.Client) -> dict:
    wait_for_advert(stack)
    rows = "\n".join(json.dumps({"prompt": f"p{i}"}) for i in range(8)).encode()
    dataset_id = client.post("/v1/datasets", files={"file": ("d.jsonl", rows)}).json()["id"]
    return {
        "dataset_id": dataset_id,
        "reward_functions": {"shout": {"source": SOURCE, "weight": 1.0}},
        "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 3},
    }


def check_estimate(estimate: dict, request: dict) -> None:
    hp = request["hyperparameters"]
    completions = hp["prompts_per_step"] * hp["num_generations"]
    assert estimate["model_key"] == "model:rft-tiny" and estimate["devices"] == 1
    assert estimate["completions_per_step"] == completions
    assert estimate["max_tokens"] == completions * hp["max_completion_length"] * 3
    # The session's worker trains on CPU with transformers: one kind of worker.
    assert len(estimate["workers"]) == 1, estimate
    [entry] = estimate["workers"]
    assert (entry["device_kind"], entry["generation_backend"]) == ("cpu", "transformers")
    if entry["basis"] == "none":  # nothing of rft-tiny trained yet in this session
        assert entry["message"] == NO_MEASUREMENT and entry["gpu_hours"] is None
    else:
        assert entry["steps_measured"] > 0
        assert entry["tokens_per_step"] <= completions * hp["max_completion_length"]
        assert entry["total_seconds"] == pytest.approx(entry["step_seconds"] * 3)
        assert entry["gpu_hours"] == pytest.approx(entry["total_seconds"] / 3600)


def test_a_dry_run_estimates_and_creates_nothing(client: httpx.Client, job_request: dict) -> None:
    response = client.post("/v1/jobs/estimate", json=job_request)
    assert response.status_code == 200, response.text
    check_estimate(response.json(), job_request)
    assert client.get("/v1/jobs").json()["data"] == []

    unknown = client.post("/v1/jobs/estimate", json={**job_request, "dataset_id": "ds_missing"})
    assert unknown.status_code == 404 and "ds_missing" in unknown.text


def test_a_created_job_states_its_estimate(client: httpx.Client, job_request: dict) -> None:
    created = client.post("/v1/jobs", json=job_request)
    assert created.status_code == 201, created.text
    job = created.json()
    client.post(f"/v1/jobs/{job['id']}/cancel")
    check_estimate(job["cost_estimate"], job_request)
    assert job["eta_seconds"] is None


def test_a_running_job_states_its_eta(client: httpx.Client, api_key: str) -> None:
    job_id = held_job(api_key, steps_completed=0, train_steps=10)
    durations = [0.4, 0.6, 0.5]
    for step, duration in enumerate(durations, start=1):
        store_step(job_id, dataclasses.replace(step_record(step), duration_s=duration))
    job = client.get(f"/v1/jobs/{job_id}").json()
    assert job["steps_completed"] == 3
    assert job["eta_seconds"] == pytest.approx(7 * fmean(durations))
    # The event stream's job messages carry it too.
    snapshot = read_snapshot(tenant_of(job_id), job_id, StreamCursor(0, 0))
    assert snapshot.job.eta_seconds == pytest.approx(7 * fmean(durations))
    # Lists leave it out (one query per job); the job page and the event stream carry it.
    [listed] = client.get("/v1/jobs").json()["data"]
    assert listed["eta_seconds"] is None
    client.post(f"/v1/jobs/{job_id}/cancel")
    assert client.get(f"/v1/jobs/{job_id}").json()["eta_seconds"] is None


def tenant_of(job_id: str) -> str:
    with session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        return job.tenant_id


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_usage_by_day_and_by_job_is_the_tenants_own(
    client: httpx.Client, other_client: httpx.Client, api_key: str
) -> None:
    first, second = held_job(api_key), held_job(api_key)
    with session_scope() as session:
        tenant_id = tenant_of(first)
        for job_id, devices, start, end in [
            (first, 2, "2026-01-01T23:00", "2026-01-02T01:00"),  # over midnight: 1 h each day
            (second, 1, "2026-01-02T10:00", "2026-01-02T10:30"),
            (second, 1, "2026-01-05T10:00", "2026-01-05T11:00"),  # after the period asked for
        ]:
            session.add(
                GpuUsage(tenant_id=tenant_id, job_id=job_id, devices=devices,
                         started_at=at(start), ended_at=at(end))
            )  # fmt: skip
        for job_id, step, tokens, when in [
            (first, 1, 100, "2026-01-01T23:30"),
            (first, 2, 50, "2026-01-02T00:30"),
            (second, 1, 7, "2026-01-02T10:10"),
        ]:
            session.add(
                Step(
                    job_id=job_id,
                    step=step,
                    config_version=1,
                    duration_s=1.0,
                    reward_functions={},
                    completion_tokens=tokens,
                    created_at=at(when),
                )
            )
    period = {"from": "2026-01-01T00:00:00Z", "to": "2026-01-03T00:00:00Z"}

    by_day = client.get("/v1/usage", params={**period, "group_by": "day"})
    assert by_day.status_code == 200, by_day.text
    report = by_day.json()
    assert [(r["day"], r["gpu_seconds"], r["tokens"], r["jobs"]) for r in report["rows"]] == [
        ("2026-01-01", 7200.0, 100, 1),
        ("2026-01-02", 7200.0 + 1800.0, 57, 2),
    ]
    assert (report["gpu_seconds"], report["tokens"], report["jobs"]) == (16200.0, 157, 2)

    by_job = client.get("/v1/usage", params={**period, "group_by": "job"}).json()
    assert {r["job_id"]: (r["gpu_seconds"], r["tokens"]) for r in by_job["rows"]} == {
        first: (14400.0, 150),
        second: (1800.0, 7),
    }

    others = other_client.get("/v1/usage", params=period).json()
    assert (others["rows"], others["gpu_seconds"], others["jobs"]) == ([], 0.0, 0)


def test_bad_usage_periods_are_refused(client: httpx.Client) -> None:
    backwards = client.get("/v1/usage", params={"from": "2026-01-02", "to": "2026-01-01"})
    assert backwards.status_code == 400 and "before" in backwards.text
    too_long = client.get("/v1/usage", params={"from": "2020-01-01", "to": "2026-01-01"})
    assert too_long.status_code == 400 and "366 days" in too_long.text
    edge = client.get("/v1/usage", params={"to": "0001-01-02T00:00:00Z"})
    assert edge.status_code == 400 and "year 1" in edge.text
    weekly = client.get("/v1/usage", params={"group_by": "week"})
    assert weekly.status_code == 422 and "group_by" in weekly.text
