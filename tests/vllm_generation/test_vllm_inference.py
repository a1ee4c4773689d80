"""/v1/chat/completions served by vLLM: one engine for the base model, the job's LoRA adapter
passed per request (multi-LoRA), through the real stack (API -> inference server -> adapter
from the artifact store).

The stack's processes run with RFT_GENERATION_BACKEND=vllm, so an inference server that could
not start vLLM would not start at all rather than quietly use transformers; its /healthz and
its log (vLLM's own engine start-up line) both say vLLM generated.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from service.stack import LocalStack
from tests.conftest import tenant_client
from tests.integration.helpers import (
    PROMPT,
    assert_the_adapter_answers_differently,
    chat,
    train_a_share_job,
)

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

VLLM_ENGINE_LINE = "Initializing a V1 LLM engine"


def answers(client: httpx.Client, model: str, **overrides: Any) -> list[str]:
    response = chat(client, model, **overrides)
    assert response.status_code == 200, response.text
    return [str(choice["message"]["content"]) for choice in response.json()["choices"]]


def answer(client: httpx.Client, model: str, **overrides: Any) -> str:
    (text,) = answers(client, model, **overrides)
    return text


@pytest.fixture(scope="module")
def tenant(vllm_stack: LocalStack) -> Iterator[httpx.Client]:
    with tenant_client(vllm_stack) as http:
        http.timeout = httpx.Timeout(300)
        yield http


@pytest.fixture(scope="module")
def trained_job(vllm_stack: LocalStack, tenant: httpx.Client) -> dict[str, Any]:
    finished = train_a_share_job(tenant, train_steps=8)
    vllm_stack.start_inference(timeout_s=300)
    return finished


def test_the_inference_server_generates_with_vllm(
    vllm_stack: LocalStack, tenant: httpx.Client, trained_job: dict[str, Any]
) -> None:
    health = httpx.get(f"{vllm_stack.inference_url}/healthz", timeout=10).json()
    assert health["backend"].startswith("vllm"), health
    answer(tenant, "rft-tiny")  # the engine starts with the first request
    log = (vllm_stack.log_dir / "inference.log").read_text(errors="replace")
    assert VLLM_ENGINE_LINE in log


def test_the_adapter_answers_differently_from_its_base_model(
    tenant: httpx.Client, trained_job: dict[str, Any]
) -> None:
    assert_the_adapter_answers_differently(lambda model: answer(tenant, model), trained_job["id"])

    body = chat(tenant, trained_job["id"]).json()
    assert body["object"] == "chat.completion" and body["model"] == trained_job["id"]
    (choice,) = body["choices"]
    assert choice["message"]["role"] == "assistant"
    assert choice["finish_reason"] in ("stop", "length")
    usage = body["usage"]
    assert usage["prompt_tokens"] > 0 and 0 < usage["completion_tokens"] <= 16
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_sampling_honours_n_seed_and_stop(
    tenant: httpx.Client, trained_job: dict[str, Any]
) -> None:
    model = trained_job["id"]
    sampled = answers(tenant, model, temperature=1.0, n=3, seed=7, max_tokens=12)
    assert len(sampled) == 3
    assert answers(tenant, model, temperature=1.0, n=3, seed=7, max_tokens=12) == sampled
    assert answers(tenant, model, n=2) == [answer(tenant, model)] * 2

    full = answer(tenant, "rft-tiny", max_tokens=24)
    stop = full[len(full) // 2 :][:2]
    response = chat(tenant, "rft-tiny", max_tokens=24, stop=[stop])
    assert response.status_code == 200, response.text
    (choice,) = response.json()["choices"]
    assert choice["message"]["content"] == full[: full.find(stop)]
    assert choice["finish_reason"] == "stop"


def test_streaming_gives_the_whole_answer(
    tenant: httpx.Client, trained_job: dict[str, Any]
) -> None:
    whole = answer(tenant, trained_job["id"], max_tokens=24)
    body = {
        "model": trained_job["id"],
        "messages": [{"role": "user", "content": PROMPT}],
        "temperature": 0,
        "max_tokens": 24,
        "stream": True,
    }
    with tenant.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200, response.read()
        data = [line[len("data: ") :] for line in response.iter_lines() if line]
    assert data[-1] == "[DONE]"
    chunks = [json.loads(item) for item in data[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == whole
