"""A user's own tool at an HTTP endpoint, taught and trained with the unmodified openai client,
as OpenAI's agent RFT users would: a supervised job on transcripts of the tool (OpenAI's chat
format with tool calls), then a reinforcement job whose ``model`` is that job's
``fine_tuned_model``, with the tool (its token in the headers) and an endpoint grader, both on
the tests' public side (tests/public_network.py). The job's sandbox POSTs each call through an
egress proxy narrowed to that host, every call is in its rollout's stored trajectory with the
endpoint's answer, and by the end most answers are the tool's results. (The same path through
the SDK, with a Python tool in the sandbox: tests/sdk/test_agent_example.py.)

It runs on the session's stack, whose operator allows the public side's plain-http port
(RFT_SANDBOX_EGRESS_ALLOW, tests/conftest.py). The faults (timeouts, retries, answers that are
not JSON) are covered without training, in
tests/sandbox/test_http_tools.py."""

from __future__ import annotations

import json
import random
import re
import statistics
import uuid
from typing import Any

import openai
import pytest
from transformers.utils import get_json_schema

from sandbox.http_tools import HttpTool, http_tool_source
from service.stack import LocalStack
from tests.conftest import tenant_client
from tests.integration.helpers import all_pages, wait_for
from tests.public_network import HTTP_PORT, REGISTER_WORDS, PublicHost

pytestmark = pytest.mark.integration


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
    stack: LocalStack, public_side: PublicHost
) -> None:
    # The endpoint answers only with its token in the header: OpenAI's form writes the token
    # into the tool's headers, the job keeps it as a sealed secret, and the sandbox sends it.
    token = uuid.uuid4().hex[:12]
    url = f"{public_side.http_url}/endpoint/word/{token}"
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
    with tenant_client(stack) as tenant:
        key = tenant.headers["Authorization"].removeprefix("Bearer ")
        client = openai.OpenAI(
            base_url=f"{stack.base_url}/v1", api_key=key, max_retries=0, timeout=120
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
                    "grader": {  # the user's own endpoint grades each rollout
                        "type": "endpoint",
                        "name": "correct_word",
                        "url": f"{public_side.http_url}/endpoint/answer/{uuid.uuid4().hex[:8]}",
                    },
                    "tools": [
                        {**GET_WORD, "url": url, "headers": {"Authorization": f"Bearer {token}"}}
                    ],
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
        # Its sandboxes may reach the tool's and the grader's host, nothing else.
        assert ours["egress_hosts"] == [f"{public_side.address}:{HTTP_PORT}"]
        finished = wait_for(tenant, job.id, timeout_s=900)
        assert finished["status"] == "succeeded", finished.get("failure_reason")
        steps = all_pages(tenant, f"/v1/jobs/{job.id}/steps")
        from_tool: list[float] = []
        calls: list[dict[str, Any]] = []
        for step in steps:
            completions = all_pages(tenant, f"/v1/jobs/{job.id}/completions", step=step["step"])
            shares = [answered_from_the_tool(c["trajectory"] or []) for c in completions]
            from_tool.append(statistics.mean(shares))
            calls.extend(
                message
                for completion in completions
                for message in completion["trajectory"] or []
                if message["role"] == "tool"
            )
    assert len(steps) == 8
    # Every call is in its rollout's trajectory; those the endpoint answered show its word.
    answered = [call for call in calls if call.get("error") is None]
    assert answered and {call["content"] for call in answered} <= set(REGISTER_WORDS.values())
    rewards = [step["reward_mean"] or 0.0 for step in steps]
    print("answers from the tool by step:", [round(share, 2) for share in from_tool])
    print("reward by step:", [round(reward, 2) for reward in rewards])
    # A clear majority of the last steps' answers are the tool's results (measured: 0.88 to
    # 0.97 a step), and the grader paid for them. That GRPO raises the reward of a tool the
    # model half knows is shown where it starts lower: tests/sdk/test_agent_example.py.
    assert statistics.mean(from_tool[-2:]) >= 0.6
    assert statistics.mean(rewards[-2:]) >= 0.6
