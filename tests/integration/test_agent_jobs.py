"""An agent job through the API, on a real worker: the tiny tool-calling model calls ``lookup``
(its code in the job's sandbox), every rollout is stored turn by turn, a pause and resume
records no trajectory twice, and the tool is replaced mid-run from the step promised.

That the reward rises with this model, tool and reward is shown once, without a stack, in
tests/training/test_agent_training.py::test_grpo_raises_a_tool_using_reward."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from service.base_models.built_in.tiny_tool_model import (
    LOOKUP_TABLE,
    LOOKUP_TOOL_SOURCE,
)
from tests.integration.helpers import all_pages, create_job, lookup_job, wait_for, wait_until

pytestmark = pytest.mark.integration

TRAIN_STEPS = 8
PROMPTS_PER_STEP, NUM_GENERATIONS = 2, 8
# The lookup tool of the second config version: the same name and schema (what the model was
# warmed up on), its answers end with "!". From the step it applies, every answered call says so.
EXCLAIMING_LOOKUP_SOURCE = LOOKUP_TOOL_SOURCE.replace(
    'return table.get(key, "no value is stored under " + repr(key))',
    'return table.get(key, "no value is stored under " + repr(key)) + "!"',
)
assert EXCLAIMING_LOOKUP_SOURCE != LOOKUP_TOOL_SOURCE


def agent_job(client: httpx.Client, **hyperparameters: Any) -> dict[str, Any]:
    body = lookup_job(
        client,
        hyperparameters={
            "train_steps": TRAIN_STEPS,
            "prompts_per_step": PROMPTS_PER_STEP,
            "num_generations": NUM_GENERATIONS,
            **hyperparameters,
        },
    )
    return create_job(client, body)


def test_an_agent_job_uses_its_tool_and_is_recorded_turn_by_turn(
    tenant: httpx.Client,
) -> None:
    job = agent_job(tenant, checkpoint_every=4)
    job_id = job["id"]

    # Pause after step 5 (checkpoint 4): steps 5 on run again after the resume.
    wait_until(tenant, job_id, lambda j: j["steps_completed"] >= 5, timeout_s=600)
    assert tenant.post(f"/v1/jobs/{job_id}/pause").status_code == 200
    wait_until(tenant, job_id, lambda j: j["status"] == "paused", timeout_s=300)
    # A new tool version, from the next step the worker begins.
    config = tenant.get(f"/v1/jobs/{job_id}/config").json()
    assert config["tools"]["lookup"]["version"] == 1
    # The config is one document: GET, edit, PUT back.
    config["tools"]["lookup"]["source"] = EXCLAIMING_LOOKUP_SOURCE
    update = tenant.put(
        f"/v1/jobs/{job_id}/config", json=config, headers={"If-Match": str(config["version"])}
    )
    assert update.status_code == 200, update.text
    assert update.json()["changed_tools"] == ["lookup"]
    applies_from = update.json()["applies_from_step"]
    assert tenant.post(f"/v1/jobs/{job_id}/resume").status_code == 200
    finished = wait_for(tenant, job_id, timeout_s=900)
    assert finished["status"] == "succeeded", finished

    steps = all_pages(tenant, f"/v1/jobs/{job_id}/steps")
    assert [s["step"] for s in steps] == list(range(1, TRAIN_STEPS + 1))
    for step in steps:
        metrics = step["agent_metrics"]
        assert metrics is not None and set(metrics) >= {
            "tool_calls_per_rollout",
            "turns_per_rollout",
            "truncated_share",
            "tools",
        }

    completions = all_pages(tenant, f"/v1/jobs/{job_id}/completions")
    # Each step's rollouts once: the steps re-run after the resume replaced, not added to.
    per_step: dict[int, int] = {}
    for completion in completions:
        per_step[completion["step"]] = per_step.get(completion["step"], 0) + 1
    rollouts = PROMPTS_PER_STEP * NUM_GENERATIONS
    assert per_step == dict.fromkeys(range(1, TRAIN_STEPS + 1), rollouts), per_step

    exclaimed = plain = 0
    for completion in completions:
        trajectory = completion["trajectory"]
        assert trajectory and trajectory[0]["role"] == "assistant"
        finals = [m for m in trajectory if m["role"] == "assistant"]
        assert completion["completion"] == finals[-1]["content"]
        for message in trajectory:
            if message["role"] != "tool" or message["error"] is not None:
                continue
            value = message["content"]
            if value.endswith("!"):
                exclaimed += 1
                assert completion["step"] >= applies_from, completion
            elif value in LOOKUP_TABLE.values():
                plain += 1
                assert completion["step"] < applies_from, completion
    assert exclaimed > 0 and plain > 0, (exclaimed, plain)
