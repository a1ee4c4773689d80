"""An agent job whose tool is an HTTP endpoint, trained on a real worker: the tiny tool-calling
model calls ``lookup``, which the job's sandbox POSTs to an endpoint on the tests' public side
(tests/public_network.py) through an egress proxy narrowed to that host, and every call is in
the rollout's stored trajectory with the endpoint's answer.

And a user's own HTTP tool taught and trained with the unmodified openai client, as OpenAI's
agent RFT users would: a supervised job on transcripts of the tool (OpenAI's chat format with
tool calls), then a reinforcement job whose ``model`` is that job's ``fine_tuned_model``, with
the tool and a string_check grader; by the end most answers are the tool's results. (The same
path through the SDK, with a Python tool in the sandbox: tests/sdk/test_agent_example.py.)

The stack is this module's own: its operator allows the public side's plain-http port
(RFT_SANDBOX_EGRESS_ALLOW), as a deployment would for an internal tool service. The faults
(timeouts, retries, answers that are not JSON) are covered without training, in
tests/sandbox/test_http_tools.py."""

from __future__ import annotations

import json
import random
import re
import statistics
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from transformers.utils import get_json_schema

from sandbox.http_tools import HttpTool, http_tool_source
from service.stack import LocalStack
from tests.conftest import stack_of_its_own, tenant_client
from tests.integration.helpers import all_pages, create_job, lookup_job, wait_for
from tests.public_network import HTTP_PORT, REGISTER_WORDS, PublicHost

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def endpoint_stack(public_side: PublicHost, shared_model_cache: Path) -> Iterator[LocalStack]:
    env = {"RFT_SANDBOX_EGRESS_ALLOW": f"{public_side.address}:{HTTP_PORT}"}
    with stack_of_its_own("rft-http-tool-jobs-", env=env, model_cache=shared_model_cache) as stack:
        yield stack


def test_an_agent_job_calls_its_http_tool_and_records_each_call(
    endpoint_stack: LocalStack, public_side: PublicHost
) -> None:
    lookup = {
        "type": "http",
        "name": "lookup",
        # What the tiny model was warmed up on (service.base_models.built_in.tiny_tool_model).
        "description": "Look up the value stored under a key.",
        "parameters": {
            "type": "object",
            "properties": {"key": {"type": "string", "description": "The key to look up."}},
            "required": ["key"],
        },
        "url": f"{public_side.http_url}/endpoint/echo/{uuid.uuid4().hex[:8]}",
        "headers": {"Authorization": "Bearer {{secrets.TOOL_KEY}}"},
    }
    with tenant_client(endpoint_stack) as tenant:
        tenant.timeout = httpx.Timeout(120)
        body = lookup_job(
            tenant,
            rows=16,
            tools=[lookup],
            secrets={"TOOL_KEY": "k-123"},
            hyperparameters={"train_steps": 2, "prompts_per_step": 2},
        )
        job = create_job(tenant, body)
        assert job["egress_hosts"] == [f"{public_side.address}:{HTTP_PORT}"]
        finished = wait_for(tenant, job["id"], timeout_s=900)
        assert finished["status"] == "succeeded", finished.get("failure_reason")
        completions = all_pages(tenant, f"/v1/jobs/{job['id']}/completions")

    results: list[dict[str, Any]] = [
        message
        for completion in completions
        for message in completion["trajectory"] or []
        if message["role"] == "tool"
    ]
    assert results, "the model called no tool in two steps"
    answered = [m for m in results if m.get("error") is None]
    assert answered, [m.get("error") for m in results]
    # The endpoint's answer is what the model was shown: the arguments it sent, and the
    # job's secret in the header.
    for message in answered:
        shown = json.loads(message["content"])
        assert set(shown["arguments"]) <= {"key"}
        assert shown["authorization"] == "Bearer k-123"


GET_WORD = {  # OpenAI's function-tool form
    "type": "function",
    "function": {
        "name": "get_word",
        "description": "Read the word a register holds.",
        "parameters": {
            "type": "object",
            "properties": {"name": {"type": "string", "description": "The register to read."}},
            "required": ["name"],
        },
    },
}
QUESTIONS = ["What is the value of {name}?", "Look up {name}.", "Tell me the value of {name}."]


def jsonl(rows: list[dict[str, Any]]) -> tuple[str, bytes]:
    return ("rows.jsonl", "".join(json.dumps(row) + "\n" for row in rows).encode())


def transcript(rng: random.Random, index: int) -> dict[str, Any]:
    """A supervised row in OpenAI's chat format: the question, the call (arguments as JSON
    text, as OpenAI writes them), the tool's answer, an answer quoting it; and the tools."""
    name = rng.choice(sorted(REGISTER_WORDS))
    word = REGISTER_WORDS[name]
    call_id = f"call_{index}"
    call = {"name": "get_word", "arguments": json.dumps({"name": name})}
    return {
        "messages": [
            {"role": "user", "content": rng.choice(QUESTIONS).format(name=name)},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": call_id, "type": "function", "function": call}],
            },
            {"role": "tool", "tool_call_id": call_id, "content": word},
            {"role": "assistant", "content": f"The value of {name} is {word}."},
        ],
        "tools": [GET_WORD],
    }


def answered_from_the_tool(trajectory: list[dict[str, Any]]) -> bool:
    """Whether the rollout's final answer names what its last successful tool call returned."""
    results = [m["content"] for m in trajectory if m["role"] == "tool" and not m.get("error")]
    finals = [m.get("content") or "" for m in trajectory if m["role"] == "assistant"]
    if not results or not finals or not results[-1]:
        return False
    return re.search(r"\b" + re.escape(str(results[-1])) + r"\b", finals[-1]) is not None


def test_an_own_http_tool_taught_and_trained_through_the_openai_client(
    endpoint_stack: LocalStack, public_side: PublicHost
) -> None:
    url = f"{public_side.http_url}/endpoint/word/{uuid.uuid4().hex[:8]}"
    # The transcripts show the tool as the agent job's chat template will: the schema of the
    # Python function the HTTP tool becomes in the sandbox.
    declared = HttpTool(**GET_WORD["function"], url=url)
    made: dict[str, Any] = {}
    exec(http_tool_source(declared), made)
    assert get_json_schema(made["get_word"]) == GET_WORD

    rng = random.Random(1)
    transcripts = [transcript(rng, i) for i in range(64)]
    questions = []
    for _ in range(32):
        name = rng.choice(sorted(REGISTER_WORDS))
        content = rng.choice(QUESTIONS).format(name=name)
        questions.append(
            {"messages": [{"role": "user", "content": content}], "answer": REGISTER_WORDS[name]}
        )
    with tenant_client(endpoint_stack) as tenant:
        key = tenant.headers["Authorization"].removeprefix("Bearer ")
        client = openai.OpenAI(
            base_url=f"{endpoint_stack.base_url}/v1", api_key=key, max_retries=0, timeout=120
        )
        # 1. The warm-up: 64 transcripts, 8 a step, 4 epochs (32 steps); rft's own
        # learning_rate beside OpenAI's names (docs/openai-compat.md).
        sft = client.fine_tuning.jobs.create(
            model="rft-tiny-tools",
            training_file=client.files.create(file=jsonl(transcripts), purpose="fine-tune").id,
            method={
                "type": "supervised",
                "supervised": {
                    "hyperparameters": {"n_epochs": 4, "batch_size": 8, "learning_rate": 4e-3}  # type: ignore[typeddict-unknown-key]
                },
            },
            seed=0,
        )
        assert wait_for(tenant, sft.id, timeout_s=900)["status"] == "succeeded"
        sft = client.fine_tuning.jobs.retrieve(sft.id)
        assert sft.fine_tuned_model == f"ft:rft-tiny-tools:{sft.id}"

        # 2. The agent job continues the fine-tuned model: 32 questions, 4 a step, one epoch.
        job = client.fine_tuning.jobs.create(
            model=sft.fine_tuned_model,
            training_file=client.files.create(file=jsonl(questions), purpose="fine-tune").id,
            method={
                "type": "reinforcement",
                "reinforcement": {  # type: ignore[typeddict-item]
                    "grader": {
                        "type": "string_check",
                        "name": "correct_word",
                        "input": "{{sample.output_text}}",
                        "reference": "{{item.answer}}",
                        "operation": "ilike",
                    },
                    "tools": [{**GET_WORD, "url": url}],
                    "hyperparameters": {
                        "n_epochs": 1,
                        "batch_size": 4,
                        "max_turns": 2,
                        # rft's names for what OpenAI's API does not set, as the SDK example
                        # sets them (examples/agent_own_tool.py says why), at a third of its
                        # learning rate: the warm-up already answers ~0.9 from the tool here,
                        # and 3e-3 once took the answers to 0 from step 6 (measured).
                        "max_completion_length": 64,
                        "temperature": 0.7,
                        "learning_rate": 1e-3,
                        "lr_scheduler_type": "constant_with_warmup",
                        "warmup_ratio": 0.25,
                    },
                },
            },
            seed=0,
        )
        assert job.model == sft.fine_tuned_model
        ours = tenant.get(f"/v1/jobs/{job.id}").json()
        assert (ours["base_model"], ours["init_from"]) == ("rft-tiny-tools", sft.id)
        finished = wait_for(tenant, job.id, timeout_s=900)
        assert finished["status"] == "succeeded", finished.get("failure_reason")
        steps = all_pages(tenant, f"/v1/jobs/{job.id}/steps")
        from_tool = []
        for step in steps:
            completions = all_pages(tenant, f"/v1/jobs/{job.id}/completions", step=step["step"])
            shares = [answered_from_the_tool(c["trajectory"] or []) for c in completions]
            from_tool.append(statistics.mean(shares))
    assert len(steps) == 8
    rewards = [step["reward_mean"] or 0.0 for step in steps]
    print("answers from the tool by step:", [round(share, 2) for share in from_tool])
    print("reward by step:", [round(reward, 2) for reward in rewards])
    # A clear majority of the last steps' answers are the tool's results (measured: 0.88 to
    # 0.97 a step), and the grader paid for them. That GRPO raises the reward of a tool the
    # model half knows is shown where it starts lower: tests/sdk/test_agent_example.py.
    assert statistics.mean(from_tool[-2:]) >= 0.6
    assert statistics.mean(rewards[-2:]) >= 0.6
