"""An agent job whose tool is an HTTP endpoint, trained on a real worker: the tiny tool-calling
model calls ``lookup``, which the job's sandbox POSTs to an endpoint on the tests' public side
(tests/public_network.py) through an egress proxy narrowed to that host, and every call is in
the rollout's stored trajectory with the endpoint's answer.

The stack is this module's own: its operator allows the public side's plain-http port
(RFT_SANDBOX_EGRESS_ALLOW), as a deployment would for an internal tool service. The faults
(timeouts, retries, answers that are not JSON) are covered without training, in
tests/sandbox/test_http_tools.py."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.stack import LocalStack
from tests.conftest import stack_of_its_own, tenant_client
from tests.integration.helpers import all_pages, create_job, lookup_job, wait_for
from tests.public_network import HTTP_PORT, PublicHost

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
