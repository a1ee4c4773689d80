"""Talking to trained models: /v1/chat/completions and /v1/completions through the real stack
(API -> inference server -> the job's adapter from the artifact store).

One job is trained for the whole module, with a high learning rate and a reward that pushes
hard toward the letter 'a', so its adapter answers differently from the base model even under
greedy decoding.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

import rft
from rft.cli.app import app as cli_app
from service.base_models.built_in.tiny_model import ensure_tiny_model
from service.stack import LocalStack
from tests.conftest import tenant_client
from tests.integration.helpers import (
    PROMPT,
    assert_the_adapter_answers_differently,
    chat,
    train_a_share_job,
)
from tests.layers import needs_module

TRAIN_STEPS = 8
CHECKPOINT_EVERY = 4


def answer(client: httpx.Client, model: str, **overrides: Any) -> str:
    response = chat(client, model, **overrides)
    assert response.status_code == 200, response.text
    return str(response.json()["choices"][0]["message"]["content"])


@pytest.fixture(scope="module")
def trained_job(stack: LocalStack, tenant: httpx.Client) -> dict[str, Any]:
    finished = train_a_share_job(tenant, train_steps=TRAIN_STEPS, checkpoint_every=CHECKPOINT_EVERY)
    stack.start_inference()
    return finished


def test_the_adapter_answers_differently_from_its_base_model(
    tenant: httpx.Client, trained_job: dict[str, Any]
) -> None:
    assert_the_adapter_answers_differently(lambda model: answer(tenant, model), trained_job["id"])

    body = chat(tenant, trained_job["id"]).json()
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    assert body["model"] == trained_job["id"]
    assert isinstance(body["created"], int)
    (choice,) = body["choices"]
    assert choice["index"] == 0 and choice["message"]["role"] == "assistant"
    assert choice["finish_reason"] in ("stop", "length")
    usage = body["usage"]
    assert usage["prompt_tokens"] > 0 and 0 < usage["completion_tokens"] <= 16
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def peft_answer(base_model: Path, adapter: Path) -> str:
    """PROMPT's greedy answer from ``adapter`` loaded straight onto the base model with PEFT,
    generated as the inference server does (chat template, 16 new tokens, cut at EOS/pad)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base_model, padding_side="left")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token is not None else tokenizer.eos_token_id
    model = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(base_model, dtype=torch.float32), str(adapter)
    ).eval()
    inputs = tokenizer.apply_chat_template(
        [{"role": "user", "content": PROMPT}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    with torch.inference_mode():
        output = model.generate(**inputs, max_new_tokens=16, do_sample=False, pad_token_id=pad_id)
    written = output[0, inputs["input_ids"].shape[1] :].tolist()
    ends = {tokenizer.eos_token_id, pad_id}
    kept = list(itertools.takewhile(lambda token: token not in ends, written))
    return str(tokenizer.decode(kept, skip_special_tokens=True))


def test_a_checkpoint_is_a_model_too(
    stack: LocalStack,
    tenant: httpx.Client,
    trained_job: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    job_id = trained_job["id"]
    steps = [c["step"] for c in tenant.get(f"/v1/jobs/{job_id}/checkpoints").json()["data"]]
    assert CHECKPOINT_EVERY in steps
    name = f"{job_id}:checkpoint-{CHECKPOINT_EVERY}"
    response = chat(tenant, name)
    assert response.status_code == 200, response.text
    assert response.json()["model"] == name

    # The checkpoint's own weights answer: its greedy answer is what its adapter, loaded
    # straight from the artifact store with PEFT, writes; not the base model's, and not the
    # job's final adapter's (which the same check shows the job's name serves).
    served = answer(tenant, name)
    artifacts = stack.state_dir / "artifacts"
    (checkpoint,) = artifacts.glob(f"**/{job_id}/**/checkpoint-{CHECKPOINT_EVERY}")
    (final,) = artifacts.glob(f"**/{job_id}/adapter")
    base_model = ensure_tiny_model(tmp_path_factory.mktemp("models"))
    from_checkpoint = peft_answer(base_model, checkpoint)
    from_final = peft_answer(base_model, final)
    assert from_checkpoint != from_final, "pick a checkpoint that answers unlike the end"
    assert served == from_checkpoint, (served, from_checkpoint, from_final)
    assert answer(tenant, job_id) == from_final
    assert served != answer(tenant, "rft-tiny")

    missing = chat(tenant, f"{job_id}:checkpoint-999")
    assert missing.status_code == 404 and "999" in missing.json()["detail"]
    malformed = chat(tenant, f"{job_id}:step-4")
    assert malformed.status_code == 404 and "checkpoint-<step>" in malformed.json()["detail"]


def test_sampling_honours_n_seed_and_stop(
    tenant: httpx.Client, trained_job: dict[str, Any]
) -> None:
    sampled = chat(tenant, trained_job["id"], temperature=1.0, n=3, seed=11).json()
    again = chat(tenant, trained_job["id"], temperature=1.0, n=3, seed=11).json()
    texts = [c["message"]["content"] for c in sampled["choices"]]
    assert len(texts) == 3 and [c["index"] for c in sampled["choices"]] == [0, 1, 2]
    assert texts == [c["message"]["content"] for c in again["choices"]]

    # A stop string taken from the middle of the greedy answer cuts it there.
    full = answer(tenant, "rft-tiny")
    stop = full[len(full) // 2 :][:2]
    stopped = chat(tenant, "rft-tiny", stop=[stop, "never"]).json()["choices"][0]
    assert stopped["message"]["content"] == full[: full.find(stop)]
    assert stopped["finish_reason"] == "stop"


def server_sent_events(client: httpx.Client, path: str, body: dict[str, Any]) -> list[Any]:
    with client.stream("POST", path, json=body) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        data = [line[len("data: ") :] for line in response.iter_lines() if line]
    assert data[-1] == "[DONE]"
    return [json.loads(item) for item in data[:-1]]


def test_streaming_gives_the_same_text_in_pieces(
    tenant: httpx.Client, trained_job: dict[str, Any]
) -> None:
    for model in ("rft-tiny", trained_job["id"]):
        whole = answer(tenant, model, max_tokens=24)
        chunks = server_sent_events(
            tenant,
            "/v1/chat/completions",
            {
                "model": model,
                "messages": [{"role": "user", "content": PROMPT}],
                "temperature": 0,
                "max_tokens": 24,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        )
        assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
        assert len({chunk["id"] for chunk in chunks}) == 1
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
        assert text == whole
        assert chunks[-2]["choices"][0]["finish_reason"] in ("stop", "length")
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0

    # A stop string cuts the stream where it cuts the whole answer.
    full = answer(tenant, "rft-tiny", max_tokens=24)
    stop = full[len(full) // 2 :][:2]
    chunks = server_sent_events(
        tenant,
        "/v1/chat/completions",
        {
            "model": "rft-tiny",
            "messages": [{"role": "user", "content": PROMPT}],
            "temperature": 0,
            "max_tokens": 24,
            "stop": [stop],
            "stream": True,
        },
    )
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == full[: full.find(stop)] and chunks[-1]["choices"][0]["finish_reason"] == "stop"

    body = {"model": trained_job["id"], "prompt": "the cat", "temperature": 0}
    whole_text = tenant.post("/v1/completions", json=body).json()["choices"][0]["text"]
    chunks = server_sent_events(tenant, "/v1/completions", {**body, "stream": True})
    assert {chunk["object"] for chunk in chunks} == {"text_completion"}
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole_text


def test_text_completions(tenant: httpx.Client, trained_job: dict[str, Any]) -> None:
    response = tenant.post(
        "/v1/completions",
        json={"model": trained_job["id"], "prompt": "the cat", "temperature": 0},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-")
    assert body["usage"]["completion_tokens"] <= 16  # OpenAI's default max_tokens
    assert isinstance(body["choices"][0]["text"], str)


def test_another_tenants_job_is_not_found(stack: LocalStack, trained_job: dict[str, Any]) -> None:
    with tenant_client(stack) as stranger:
        for model in (trained_job["id"], f"{trained_job['id']}:checkpoint-{CHECKPOINT_EVERY}"):
            response = chat(stranger, model)
            assert response.status_code == 404, response.text
            assert trained_job["id"] in response.json()["detail"]


def test_unknown_models_and_absurd_parameters_are_4xx(
    tenant: httpx.Client, trained_job: dict[str, Any]
) -> None:
    unknown = chat(tenant, "no such model")
    assert unknown.status_code == 404 and "'no such model'" in unknown.json()["detail"]
    # A hub id no job of this tenant trains on is not downloaded on request.
    unused = chat(tenant, "Qwen/Qwen2.5-0.5B-Instruct")
    assert unused.status_code == 404 and "base model of one of your jobs" in unused.text
    missing_job = chat(tenant, "job_0123456789abcdef")
    assert missing_job.status_code == 404 and "job_0123456789abcdef" in missing_job.text

    too_long = chat(tenant, trained_job["id"], max_tokens=10**9)
    assert too_long.status_code == 400 and "RFT_INFERENCE_MAX_TOKENS" in too_long.text
    stream = chat(tenant, trained_job["id"], stream=True, n=2)
    assert stream.status_code == 400 and "n=1" in stream.json()["detail"]
    for field, value in [
        ("n", 1000),
        ("n", 0),
        ("temperature", 50),
        ("temperature", -1),
        ("top_p", 0),
        ("max_tokens", 0),
        ("messages", []),
        ("stop", ["a", "b", "c", "d", "e"]),
    ]:
        response = chat(tenant, trained_job["id"], **{field: value})
        assert response.status_code == 422, (field, value, response.text)
        assert field in response.text
    no_model = tenant.post("/v1/chat/completions", json={"messages": [{"role": "user"}]})
    assert no_model.status_code == 422


def test_sdk_and_cli(stack: LocalStack, tenant_key: str, trained_job: dict[str, Any]) -> None:
    with rft.Client(api_key=tenant_key, base_url=stack.base_url, timeout=300) as client:
        reply = client.chat.completions.create(
            model=trained_job["id"],
            messages=[{"role": "user", "content": PROMPT}],
            temperature=0,
            max_tokens=16,
        )
        assert isinstance(reply, rft.ChatCompletion)
        tuned = reply.choices[0].message.content
        text = client.completions.create(model="rft-tiny", prompt="the cat", temperature=0)
        assert isinstance(text, rft.TextCompletion) and text.model == "rft-tiny"
        with pytest.raises(rft.NotFoundError):
            client.chat.completions.create(
                model="job_missing", messages=[{"role": "user", "content": "hi"}]
            )
        chunks = list(
            client.chat.completions.create(
                model=trained_job["id"],
                messages=[{"role": "user", "content": PROMPT}],
                temperature=0,
                max_tokens=16,
                stream=True,
            )
        )
        assert all(isinstance(chunk, rft.ChatCompletionChunk) for chunk in chunks)
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == tuned
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
        with pytest.raises(rft.BadRequestError, match="n=1"):  # refused by create itself
            client.completions.create(model="rft-tiny", prompt="x", n=2, stream=True)

    async def async_stream() -> tuple[str, str]:
        async with rft.AsyncClient(api_key=tenant_key, base_url=stack.base_url) as client:
            whole = await client.completions.create(
                model=trained_job["id"], prompt="the cat", temperature=0
            )
            pieces = await client.completions.create(
                model=trained_job["id"], prompt="the cat", temperature=0, stream=True
            )
            streamed = "".join([c.choices[0].text async for c in pieces if c.choices])
            return whole.choices[0].text, streamed

    whole, streamed = asyncio.run(async_stream())
    assert streamed == whole

    cli = CliRunner(env={"RFT_API_KEY": tenant_key, "RFT_BASE_URL": stack.base_url})
    result = cli.invoke(
        cli_app,
        ["chat", trained_job["id"], PROMPT, "--temperature", "0", "--max-tokens", "16"],
    )
    assert result.exit_code == 0, result.output
    assert result.output == tuned + "\n"
    missing = cli.invoke(cli_app, ["chat", "job_missing", "hi"])
    assert missing.exit_code == 1 and "job_missing" in missing.output


@needs_module("openai", "the dev extra")
def test_the_official_openai_client(
    stack: LocalStack, tenant_key: str, trained_job: dict[str, Any]
) -> None:
    import openai

    client = openai.OpenAI(base_url=f"{stack.base_url}/v1", api_key=tenant_key, max_retries=0)
    reply = client.chat.completions.create(
        model=trained_job["id"],
        messages=[{"role": "user", "content": PROMPT}],
        temperature=0,
        max_tokens=16,
    )
    with rft.Client(api_key=tenant_key, base_url=stack.base_url, timeout=300) as ours:
        expected = ours.chat.completions.create(
            model=trained_job["id"],
            messages=[{"role": "user", "content": PROMPT}],
            temperature=0,
            max_tokens=16,
        )
    assert reply.choices[0].message.content == expected.choices[0].message.content
    assert reply.model == trained_job["id"] and reply.usage is not None
    streamed = client.chat.completions.create(
        model=trained_job["id"],
        messages=[{"role": "user", "content": PROMPT}],
        temperature=0,
        max_tokens=16,
        stream=True,
    )
    pieces = [chunk.choices[0].delta.content or "" for chunk in streamed if chunk.choices]
    assert "".join(pieces) == reply.choices[0].message.content
    completion = client.completions.create(model="rft-tiny", prompt="the cat", max_tokens=4)
    assert completion.choices[0].finish_reason in ("stop", "length")
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(
            model="job_missing", messages=[{"role": "user", "content": "hi"}]
        )
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model=trained_job["id"],
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=10**9,
        )


def test_a_checkpoint_gone_from_the_store_is_a_400_without_server_paths(
    stack: LocalStack, tenant: httpx.Client, trained_job: dict[str, Any]
) -> None:
    job_id = trained_job["id"]
    (folder,) = (stack.state_dir / "artifacts").glob(f"**/{job_id}/**/checkpoint-{TRAIN_STEPS}")
    shutil.rmtree(folder)
    response = chat(tenant, f"{job_id}:checkpoint-{TRAIN_STEPS}")
    assert response.status_code == 400, response.text
    detail = response.json()["detail"]
    assert "no longer in the artifact store" in detail
    assert str(stack.state_dir) not in detail


def test_the_inference_server_answers_only_the_api(
    stack: LocalStack, trained_job: dict[str, Any]
) -> None:
    """It has no tenants: a request without the API's token (RFT_INFERENCE_TOKEN) gets
    nothing, however it reached the server."""
    request = {"base_model": "rft-tiny", "prompt": "hi", "max_tokens": 4, "temperature": 1.0,
               "top_p": 1.0, "n": 1}  # fmt: skip
    for headers in ({}, {"Authorization": "Bearer not-the-token"}):
        refused = httpx.post(
            f"{stack.inference_url}/v1/generate", json=request, headers=headers, timeout=60
        )
        assert refused.status_code == 401, refused.text
    answered = httpx.post(
        f"{stack.inference_url}/v1/generate",
        json=request,
        headers={"Authorization": f"Bearer {stack.inference_token}"},
        timeout=120,
    )
    assert answered.status_code == 200, answered.text
