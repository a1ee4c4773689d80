"""GRPO jobs through the API with vLLM generating (colocate, LoRA weights synced every step).

The worker is told RFT_GENERATION_BACKEND=vllm, so a job that cannot start vLLM fails instead
of falling back to transformers; each job's `generation` event says what generated, and the
worker's log holds vLLM's own engine start-up lines.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from service.stack import LocalStack
from tests.integration.helpers import all_pages, create_job, upload_jsonl, wait_for, wait_until
from tests.tiny import TINY_HYPERPARAMETERS

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

LETTER_A = (
    "def letter_a(prompt, completion, example):\n"
    "    return completion.count('a') / max(1, len(completion))\n"
)
# What vLLM itself logs when an engine starts (vllm/v1/engine/core.py); transformers never does.
VLLM_ENGINE_LINE = "Initializing a V1 LLM engine"
PROMPTS_PER_STEP = TINY_HYPERPARAMETERS["prompts_per_step"]
GENERATIONS = TINY_HYPERPARAMETERS["num_generations"]


def constant(name: str, value: float) -> str:
    return f"def {name}(prompt, completion, example):\n    return {value}\n"


def job_body(
    client: httpx.Client, functions: dict[str, Any], **hyperparameters: Any
) -> dict[str, Any]:
    dataset_id = upload_jsonl(client, [{"prompt": f"Say {w}:"} for w in "abcdefgh"])
    return {
        "dataset_id": dataset_id,
        "reward_functions": functions,
        "hyperparameters": {**TINY_HYPERPARAMETERS, **hyperparameters},
    }


def generation_events(client: httpx.Client, job_id: str) -> list[dict[str, Any]]:
    events = all_pages(client, f"/v1/jobs/{job_id}/events/history")
    return [e for e in events if e["kind"] == "generation"]


def assert_generated_by_vllm(client: httpx.Client, job_id: str, stack: LocalStack) -> None:
    events = generation_events(client, job_id)
    assert events, "the worker recorded no generation event"
    for event in events:
        assert event["message"].startswith("generation: vllm (colocate, "), event
        assert event["data"]["backend"] == "vllm" and event["data"]["mode"] == "colocate"
    worker_logs = "".join(
        path.read_text(errors="replace") for path in stack.log_dir.glob("worker*.log")
    )
    assert VLLM_ENGINE_LINE in worker_logs


def test_a_job_trains_end_to_end_with_vllm_generating(
    vllm_stack: LocalStack, vllm_client: httpx.Client
) -> None:
    train_steps = 4
    job = create_job(
        vllm_client,
        job_body(vllm_client, {"letter_a": {"source": LETTER_A}}, train_steps=train_steps),
    )
    job = wait_for(vllm_client, job["id"], timeout_s=600)
    assert job["status"] == "succeeded", job["failure_reason"]
    assert job["steps_completed"] == train_steps
    assert_generated_by_vllm(vllm_client, job["id"], vllm_stack)

    steps = vllm_client.get(f"/v1/jobs/{job['id']}/steps").json()["data"]
    assert [s["step"] for s in steps] == list(range(1, train_steps + 1))
    assert all(s["loss"] is not None for s in steps)
    completions = all_pages(vllm_client, f"/v1/jobs/{job['id']}/completions")
    assert len(completions) == train_steps * PROMPTS_PER_STEP * GENERATIONS
    for row in completions:
        text = row["completion"]
        assert row["scores"]["letter_a"] == pytest.approx(text.count("a") / max(1, len(text)))
    # Sampled, not one fixed string: rewards differ within steps, so advantages are not all 0.
    assert len({row["total"] for row in completions}) > 1
    assert any(row["advantage"] not in (None, 0.0) for row in completions)
    archive = vllm_client.get(f"/v1/jobs/{job['id']}/adapter.tar.gz")
    assert archive.status_code == 200 and len(archive.content) > 1000


def test_a_config_update_applies_at_the_next_step(vllm_client: httpx.Client) -> None:
    job = create_job(
        vllm_client,
        job_body(vllm_client, {"score": {"source": constant("score", 1.0)}}, train_steps=400),
    )
    job_id = job["id"]
    wait_until(vllm_client, job_id, lambda j: j["steps_completed"] >= 2, timeout_s=600)
    updated = vllm_client.put(
        f"/v1/jobs/{job_id}/config",
        json={"reward_functions": {"score": {"source": constant("score", 5.0)}}},
        headers={"If-Match": '"1"'},
    )
    assert updated.status_code == 200, updated.text
    applied = wait_until(vllm_client, job_id, lambda j: j["applied_config_version"] == 2)
    applied_at = applied["steps_completed"]
    wait_until(vllm_client, job_id, lambda j: j["steps_completed"] >= applied_at + 2)
    assert vllm_client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    assert wait_for(vllm_client, job_id)["status"] == "cancelled"

    switch_step = vllm_client.get(f"/v1/jobs/{job_id}/config/versions").json()[1]["applied_at_step"]
    assert switch_step is not None and switch_step > 2
    steps = vllm_client.get(f"/v1/jobs/{job_id}/steps").json()["data"]
    assert steps[-1]["step"] > switch_step
    for step in steps:
        before = step["step"] < switch_step
        assert step["config_version"] == (1 if before else 2), step
        assert step["reward_mean"] == pytest.approx(1.0 if before else 5.0), step


def test_cancel_stops_the_job_and_frees_the_worker_for_the_next(
    vllm_stack: LocalStack, vllm_client: httpx.Client
) -> None:
    job = create_job(
        vllm_client,
        job_body(vllm_client, {"letter_a": {"source": LETTER_A}}, train_steps=400),
    )
    wait_until(vllm_client, job["id"], lambda j: j["steps_completed"] >= 2, timeout_s=600)
    assert vllm_client.post(f"/v1/jobs/{job['id']}/cancel").status_code == 200
    job = wait_for(vllm_client, job["id"])
    assert job["status"] == "cancelled" and job["steps_completed"] < 400
    assert_generated_by_vllm(vllm_client, job["id"], vllm_stack)

    # The worker goes on to the next job: on the engine the cancelled job's process kept
    # (kept_engine), which serves it as a fresh one would.
    follow_up = create_job(
        vllm_client,
        job_body(vllm_client, {"letter_a": {"source": LETTER_A}}, train_steps=2),
    )
    follow_up = wait_for(vllm_client, follow_up["id"], timeout_s=600)
    assert follow_up["status"] == "succeeded", follow_up["failure_reason"]
    assert_generated_by_vllm(vllm_client, follow_up["id"], vllm_stack)


def test_validation_generates_with_vllm_too(
    vllm_stack: LocalStack, vllm_client: httpx.Client
) -> None:
    """A job with a validation share: its eval records are there, and the worker's log says
    each was generated by the colocated vLLM engine (workers.training.evaluation)."""
    rows = [{"prompt": f"Say {w}:"} for w in "abcdefgh"]
    job = create_job(
        vllm_client,
        {
            "dataset_id": upload_jsonl(vllm_client, rows),
            "validation_split": 0.25,
            "reward_functions": {"letter_a": {"source": LETTER_A}},
            "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 3, "eval_every": 2},
        },
    )
    job = wait_for(vllm_client, job["id"], timeout_s=600)
    assert job["status"] == "succeeded", job["failure_reason"]
    assert_generated_by_vllm(vllm_client, job["id"], vllm_stack)
    evals = vllm_client.get(f"/v1/jobs/{job['id']}/evals").json()["data"]
    assert [(e["step"], e["prompts"], e["samples"]) for e in evals] == [(2, 2, 2), (3, 2, 2)]
    worker_logs = "".join(
        path.read_text(errors="replace") for path in vllm_stack.log_dir.glob("worker*.log")
    )
    generated_by = {
        step: by
        for step, by in re.findall(
            r"step (\d+): validation reward .* generated by (.+) \(", worker_logs
        )
    }
    assert generated_by == {"2": "vllm (colocate)", "3": "vllm (colocate)"}, generated_by
