"""Small HTTP helpers shared by the integration tests."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import httpx

from service.base_models.built_in.tiny_tool_model import (
    LOOKUP_REWARD_SOURCE,
    LOOKUP_TABLE,
    LOOKUP_TOOL_SOURCE,
    TINY_TOOL_MODEL_NAME,
    lookup_dataset,
)
from tests.tiny import TINY_HYPERPARAMETERS

FINAL = {"succeeded", "failed", "cancelled"}


def upload_jsonl(client: httpx.Client, rows: list[dict[str, Any]]) -> str:
    content = "\n".join(json.dumps(r) for r in rows).encode()
    response = client.post("/v1/datasets", files={"file": ("rows.jsonl", content)})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def wait_for(client: httpx.Client, job_id: str, timeout_s: float = 600) -> dict[str, Any]:
    return wait_until(client, job_id, lambda job: job["status"] in FINAL, timeout_s=timeout_s)


def wait_until(
    client: httpx.Client,
    job_id: str,
    condition: Callable[[dict[str, Any]], bool],
    *,
    timeout_s: float = 600,
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if condition(job):
            return job
        if job["status"] in FINAL:
            raise AssertionError(f"job {job_id} ended before the condition held: {job}")
        time.sleep(0.2)
    raise AssertionError(f"job {job_id}: condition not met within {timeout_s} s: {job}")


def all_pages(client: httpx.Client, path: str, **params: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    cursor: str | int = 0
    while True:
        page = client.get(path, params={"after": cursor, "limit": 500, **params}).json()
        rows.extend(page["data"])
        if not page["has_more"]:
            return rows
        cursor = page["next_cursor"]


def create_job(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 201, response.text
    return dict(response.json())


# A job trained towards the letter 'a' answers differently from its base model: the chat tests
# (transformers and vLLM serving) train one and talk to both.
A_SHARE = (
    "def a_share(prompt, completion, example):\n"
    "    text = completion if isinstance(completion, str) else completion[-1]['content']\n"
    "    return text.count('a') / max(len(text), 1)\n"
)
PROMPT = "Write about cats:"


def train_a_share_job(
    client: httpx.Client,
    *,
    train_steps: int,
    checkpoint_every: int | None = None,
    secrets: dict[str, str] | None = None,
    **hyperparameters: Any,
) -> dict[str, Any]:
    """A chat job trained towards 'a' (learning rate high enough to change answers), finished;
    ``hyperparameters`` override the job's."""
    topics = ["cats", "dogs", "the sea", "apples", "rain", "music", "bread", "snow"]
    rows = [{"prompt": [{"role": "user", "content": f"Write about {t}:"}]} for t in topics]
    extra = {} if checkpoint_every is None else {"checkpoint_every": checkpoint_every}
    job = create_job(
        client,
        {
            "dataset_id": upload_jsonl(client, rows),
            "reward_functions": {"a_share": {"source": A_SHARE}},
            "hyperparameters": {
                **TINY_HYPERPARAMETERS,
                "learning_rate": 5e-2,
                "train_steps": train_steps,
                **extra,
                **hyperparameters,
            },
            "secrets": secrets or {},
        },
    )
    finished = wait_for(client, job["id"], timeout_s=900)
    assert finished["status"] == "succeeded", finished["failure_reason"]
    return finished


def assert_the_adapter_answers_differently(answer: Callable[[str], str], job_id: str) -> None:
    """The trained adapter's greedy answer differs from its base model's, and each stays the
    same when base and adapter alternate on one engine."""
    base = answer("rft-tiny")
    tuned = answer(job_id)
    assert tuned != base, base
    assert answer("rft-tiny") == base
    assert answer(job_id) == tuned


def chat(client: httpx.Client, model: str, **overrides: Any) -> httpx.Response:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "temperature": 0,
        "max_tokens": 16,
        **overrides,
    }
    return client.post("/v1/chat/completions", json=body)


def slow_reward(step_s: float) -> str:
    """A reward function that sleeps ``step_s`` per call: steps long enough for a request or
    a fault to land in the middle of one."""
    return (
        "import time\n"
        "def slow(prompts, completions, **kwargs):\n"
        f"    time.sleep({step_s})\n"
        "    return [c.count('a') / max(1, len(c)) for c in completions]\n"
    )


def slow_job(
    client: httpx.Client, *, train_steps: int, step_s: float, checkpoint_every: int = 5
) -> dict[str, Any]:
    """A tiny-model job whose every step waits ``step_s`` on its reward function."""
    dataset_id = upload_jsonl(client, [{"prompt": f"Say {w}:"} for w in "abcdefgh"])
    return create_job(
        client,
        {
            "dataset_id": dataset_id,
            "reward_functions": {"slow": {"source": slow_reward(step_s)}},
            "hyperparameters": {
                **TINY_HYPERPARAMETERS,
                "train_steps": train_steps,
                "num_generations": 4,
                "checkpoint_every": checkpoint_every,
            },
        },
    )


def lookup_job(client: httpx.Client, *, rows: int = 64, **fields: Any) -> dict[str, Any]:
    """The body of an agent job: the tool-calling tiny model learns to call ``lookup`` (its
    reward pays for the value only the tool knows: ~0.45 at the start, 0.85-0.95 within ~6
    steps at this learning rate). ``fields`` override the body's (hyperparameters merged)."""
    hyperparameters = {
        **TINY_HYPERPARAMETERS,
        "max_completion_length": 64,  # a call, the tool's answer and the final answer
        "max_turns": 2,
        "num_generations": 8,
        "prompts_per_step": 4,
        "learning_rate": 3e-3,
        "seed": 0,
        **fields.pop("hyperparameters", {}),
    }
    return {
        "dataset_id": upload_jsonl(client, lookup_dataset(rows, seed=1)),
        "base_model": TINY_TOOL_MODEL_NAME,
        "reward_functions": {"correct_value": {"source": LOOKUP_REWARD_SOURCE}},
        "tools": [{"name": "lookup", "source": LOOKUP_TOOL_SOURCE}],
        "hyperparameters": hyperparameters,
        **fields,
    }


def assert_lookup_results_match_the_table(trajectory: list[dict[str, Any]]) -> None:
    """Each answered ``lookup`` call returned what the table stores under the key it was
    called with: a rank whose stand-ins answered another rollout's call (or none) would not."""
    calls: list[dict[str, Any]] = []
    for message in trajectory:
        if message["role"] == "assistant":
            calls.extend(message.get("tool_calls") or [])
        elif message["role"] == "tool":
            call = calls.pop(0)
            assert message["name"] == call["name"], trajectory
            if call["name"] != "lookup":
                # The tool model was warmed up on several tools' names: one this job does not
                # offer is answered with an error, and the rollout goes on.
                assert message["error"]["kind"] == "unknown_tool", trajectory
                continue
            if message["error"] is not None:
                continue  # arguments the model did not write as an object: TRL answers those
            key = call["arguments"]["key"]
            expected = LOOKUP_TABLE.get(key, "no value is stored under " + repr(key))
            assert message["content"] == expected, trajectory
