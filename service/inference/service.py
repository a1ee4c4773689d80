"""Chat and text completions: resolve the model name, forward to the inference server.

Model names are resolved here and only here (issue 15's ``fine_tuned_model`` names are meant
to be added to ``resolve_model``):
- ``<job id>``: the job's final adapter on its base model;
- ``<job id>:checkpoint-<step>``: that checkpoint's adapter;
- ``ft:<base model>:<job id>`` and ``ft:<base model>:<job id>:ckpt-step-<step>``: the same,
  named as OpenAI names fine-tuned models (the fine_tuned_model of service.openai_compat);
- anything else: a base model, served when it is the built-in one or one of the tenant's jobs
  trains on it. Not any hub id: that would let any caller make the inference server download
  and hold any model; the workers already load a job's base model, so serving it costs nothing
  new, and it needs no hub round trip per request.
A job of another tenant is a 404, exactly like a missing one.

The API has no torch: generation happens in the inference server (workers.inference), which
gets a base model and an artifact URI, never a tenant or a job id.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
from sqlalchemy.orm import Session

from service.artifacts.service import checkpoint_uri, final_adapter_uri
from service.base_models.service import BUILT_IN_MODELS
from service.errors import BadRequest, NotFound, ServiceUnavailable
from service.inference.protocol import (
    AdapterRef,
    GenerationRequest,
    GenerationResult,
    StreamLine,
)
from service.inference.repository import InferenceRepository
from service.inference.schemas import (
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionCreate,
    Completion,
    CompletionChoice,
    CompletionCreate,
    SamplingParameters,
    Usage,
)
from service.jobs.service import get_job
from service.models import Job
from service.server_paths import hide_server_paths
from service.settings import Settings

JOB_ID_PREFIX = "job_"
CHECKPOINT_SUFFIX = re.compile(r"^checkpoint-(\d{1,9})$")
FINE_TUNED_PREFIX = "ft:"
FINE_TUNED_STEP_SUFFIX = re.compile(r":ckpt-step-(\d{1,9})$")
DEFAULT_CHAT_MAX_TOKENS = 256
DEFAULT_COMPLETION_MAX_TOKENS = 16  # OpenAI's default for /v1/completions


class UnknownModel(NotFound):
    pass


class InferenceUnavailable(ServiceUnavailable):
    pass


@dataclass(frozen=True)
class ServedModel:
    """What a model name means: a base model, with or without one adapter on top."""

    name: str
    base_model: str
    adapter_uri: str | None
    # The job trained every weight: adapter_uri is a whole model (served instead of the base).
    full_model: bool = False


def _trains_every_weight(job: Job) -> bool:
    return bool((job.hyperparameters or {}).get("adapter") == "full")


def fine_tuned_model_name(base_model: str, job_id: str, step: int | None = None) -> str:
    """OpenAI's form of a job's model name (``ft:<base>:<job id>``), which resolve_model reads."""
    name = f"{FINE_TUNED_PREFIX}{base_model}:{job_id}"
    return name if step is None else f"{name}:ckpt-step-{step}"


@dataclass(frozen=True)
class FineTunedName:
    """The parts of ``ft:<base model>:<job id>[:ckpt-step-<step>]``."""

    base_model: str
    job_id: str
    step: int | None


def is_fine_tuned_name(name: str) -> bool:
    return name.startswith(FINE_TUNED_PREFIX)


def parse_fine_tuned_name(name: str) -> FineTunedName:
    """UnknownModel for a name that has the ``ft:`` prefix and not the rest of the form."""
    rest = name.removeprefix(FINE_TUNED_PREFIX)
    step_match = FINE_TUNED_STEP_SUFFIX.search(rest)
    if step_match is not None:
        rest = rest[: step_match.start()]
    base_model, _, job_id = rest.rpartition(":")
    if not base_model or not job_id.startswith(JOB_ID_PREFIX):
        raise UnknownModel(
            f"model {name!r}: a fine-tuned model is named 'ft:<base model>:<job id>', "
            "optionally followed by ':ckpt-step-<step>'"
        )
    step = int(step_match.group(1)) if step_match is not None else None
    return FineTunedName(base_model=base_model, job_id=job_id, step=step)


def _resolve_fine_tuned(session: Session, tenant_id: str, name: str) -> ServedModel:
    parts = parse_fine_tuned_name(name)
    job = get_job(session, tenant_id, parts.job_id)
    if job.base_model != parts.base_model:
        raise UnknownModel(f"model {name!r}: job {job.id} trains {job.base_model!r}")
    if parts.step is not None:
        uri = checkpoint_uri(session, tenant_id, job.id, parts.step)
    else:
        uri = final_adapter_uri(session, tenant_id, job.id)
    return ServedModel(
        name=name, base_model=job.base_model, adapter_uri=uri, full_model=_trains_every_weight(job)
    )


def resolve_model(session: Session, tenant_id: str, name: str) -> ServedModel:
    if is_fine_tuned_name(name):
        return _resolve_fine_tuned(session, tenant_id, name)
    job_id, colon, suffix = name.partition(":")
    if colon:
        match = CHECKPOINT_SUFFIX.match(suffix)
        if match is None:
            raise UnknownModel(
                f"model {name!r}: after ':' give 'checkpoint-<step>', as in "
                f"'{job_id}:checkpoint-10'"
            )
        job = get_job(session, tenant_id, job_id)
        uri = checkpoint_uri(session, tenant_id, job.id, int(match.group(1)))
        return ServedModel(
            name=name,
            base_model=job.base_model,
            adapter_uri=uri,
            full_model=_trains_every_weight(job),
        )
    if name.startswith(JOB_ID_PREFIX):
        job = get_job(session, tenant_id, name)
        return ServedModel(
            name=name,
            base_model=job.base_model,
            adapter_uri=final_adapter_uri(session, tenant_id, job.id),
            full_model=_trains_every_weight(job),
        )
    if name in BUILT_IN_MODELS or InferenceRepository(session).tenant_trains_on(tenant_id, name):
        return ServedModel(name=name, base_model=name, adapter_uri=None)
    raise UnknownModel(
        f"model {name!r} is neither a job id, '<job id>:checkpoint-<step>', a built-in model "
        f"({', '.join(sorted(BUILT_IN_MODELS))}), "
        "nor the base model of one of your jobs"
    )


def chat_max_tokens(body: ChatCompletionCreate) -> int:
    return body.max_completion_tokens or body.max_tokens or DEFAULT_CHAT_MAX_TOKENS


def completion_max_tokens(body: CompletionCreate) -> int:
    return body.max_tokens or DEFAULT_COMPLETION_MAX_TOKENS


def check_request(body: SamplingParameters, max_tokens: int, settings: Settings) -> None:
    """Refuse what the inference server should never be asked (before any model is resolved)."""
    if body.stream and body.n > 1:
        raise BadRequest("stream=true streams one choice: send n=1, or stream=false")
    if max_tokens > settings.inference_max_tokens:
        raise BadRequest(
            f"max_tokens {max_tokens} is above this server's limit of "
            f"{settings.inference_max_tokens} (RFT_INFERENCE_MAX_TOKENS)"
        )


def create_chat_completion(
    served: ServedModel, body: ChatCompletionCreate, settings: Settings
) -> ChatCompletion:
    max_tokens = chat_max_tokens(body)
    result = _generate(
        served,
        body,
        max_tokens,
        settings,
        messages=[{"role": m.role, "content": m.text()} for m in body.messages],
    )
    return ChatCompletion(
        id=f"chatcmpl-{uuid.uuid4().hex}",
        created=int(time.time()),
        model=served.name,
        choices=[
            ChatChoice(
                index=index,
                message=AssistantMessage(content=choice.text),
                finish_reason=choice.finish_reason,
            )
            for index, choice in enumerate(result.choices)
        ],
        usage=_usage(result),
    )


def create_completion(
    served: ServedModel, body: CompletionCreate, settings: Settings
) -> Completion:
    max_tokens = completion_max_tokens(body)
    result = _generate(served, body, max_tokens, settings, prompt=body.prompt_text())
    return Completion(
        id=f"cmpl-{uuid.uuid4().hex}",
        created=int(time.time()),
        model=served.name,
        choices=[
            CompletionChoice(index=index, text=choice.text, finish_reason=choice.finish_reason)
            for index, choice in enumerate(result.choices)
        ],
        usage=_usage(result),
    )


def _generation_request(
    served: ServedModel,
    body: SamplingParameters,
    max_tokens: int,
    *,
    messages: list[dict[str, str]] | None = None,
    prompt: str | None = None,
) -> GenerationRequest:
    return GenerationRequest(
        base_model=served.base_model,
        adapter=(
            AdapterRef(uri=served.adapter_uri, full_model=served.full_model)
            if served.adapter_uri
            else None
        ),
        messages=messages,
        prompt=prompt,
        max_tokens=max_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        n=body.n,
        seed=body.seed,
        stop=body.stop_list(),
        stream=body.stream,
    )


def _generate(
    served: ServedModel,
    body: SamplingParameters,
    max_tokens: int,
    settings: Settings,
    *,
    messages: list[dict[str, str]] | None = None,
    prompt: str | None = None,
) -> GenerationResult:
    request = _generation_request(served, body, max_tokens, messages=messages, prompt=prompt)
    client, response = _send(served, request, settings)
    try:
        return GenerationResult.model_validate_json(response.read())
    finally:
        response.close()
        client.close()


def _send(
    served: ServedModel, request: GenerationRequest, settings: Settings
) -> tuple[httpx.Client, httpx.Response]:
    """The inference server's answer, its body not read yet; anything but a 200 is raised."""
    if not settings.inference_url:
        raise InferenceUnavailable(
            "no inference server is configured: set RFT_INFERENCE_URL to a running "
            "`rft-server inference` (`rft-server up` starts one)"
        )
    url = settings.inference_url.rstrip("/") + "/v1/generate"
    token = settings.inference_token.get_secret_value() if settings.inference_token else ""
    # Without a token the server answers 401, which the error below explains.
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    client = httpx.Client(timeout=settings.inference_timeout_s, headers=headers)
    try:
        response = client.send(
            client.build_request("POST", url, json=request.model_dump(mode="json")), stream=True
        )
    except httpx.TimeoutException:
        client.close()
        raise InferenceUnavailable(
            f"the inference server did not answer within {settings.inference_timeout_s} s "
            "(RFT_INFERENCE_TIMEOUT_S)"
        ) from None
    except httpx.HTTPError as exc:
        client.close()
        raise InferenceUnavailable(
            f"the inference server at RFT_INFERENCE_URL={settings.inference_url} cannot be "
            f"reached ({type(exc).__name__}); start it with `rft-server inference`"
        ) from None
    if response.status_code == 200:
        return client, response
    response.read()
    response.close()
    client.close()
    if response.status_code == 400:
        raise BadRequest(f"model {served.name!r}: {_detail(response)}")
    if response.status_code == 401:
        raise InferenceUnavailable(
            "the inference server refused the API's token: set the same RFT_INFERENCE_TOKEN on "
            "the API and on the inference server"
        )
    raise InferenceUnavailable(
        f"the inference server answered {response.status_code}: {_detail(response)}"
    )


def stream_chat_completion(
    served: ServedModel, body: ChatCompletionCreate, settings: Settings
) -> Iterator[bytes]:
    """Server-sent events as OpenAI streams them: chat.completion.chunk objects, then [DONE].

    The inference server is asked before this returns, so a refusal is still an HTTP error."""
    request = _generation_request(
        served,
        body,
        chat_max_tokens(body),
        messages=[{"role": m.role, "content": m.text()} for m in body.messages],
    )
    head = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": served.name,
    }

    def choice(delta: dict[str, str], finish_reason: str | None) -> dict[str, Any]:
        return {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}

    def events(pieces: Iterator[StreamLine]) -> Iterator[dict[str, Any]]:
        yield {**head, "choices": [choice({"role": "assistant", "content": ""}, None)]}
        for line in pieces:
            if line.delta is not None:
                yield {**head, "choices": [choice({"content": line.delta}, None)]}
            elif line.result is not None:
                finish = line.result.choices[0].finish_reason
                yield {**head, "choices": [choice({}, finish)]}
                if body.include_usage():
                    yield {**head, "choices": [], "usage": _usage(line.result).model_dump()}

    return _server_sent_events(served, request, settings, events)


def stream_completion(
    served: ServedModel, body: CompletionCreate, settings: Settings
) -> Iterator[bytes]:
    """Server-sent text_completion chunks, as OpenAI streams /v1/completions."""
    request = _generation_request(
        served, body, completion_max_tokens(body), prompt=body.prompt_text()
    )
    head = {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": served.name,
    }

    def choice(text: str, finish_reason: str | None) -> dict[str, Any]:
        return {"index": 0, "text": text, "finish_reason": finish_reason, "logprobs": None}

    def events(pieces: Iterator[StreamLine]) -> Iterator[dict[str, Any]]:
        for line in pieces:
            if line.delta is not None:
                yield {**head, "choices": [choice(line.delta, None)]}
            elif line.result is not None:
                yield {**head, "choices": [choice("", line.result.choices[0].finish_reason)]}
                if body.include_usage():
                    yield {**head, "choices": [], "usage": _usage(line.result).model_dump()}

    return _server_sent_events(served, request, settings, events)


def _server_sent_events(
    served: ServedModel,
    request: GenerationRequest,
    settings: Settings,
    events: Callable[[Iterator[StreamLine]], Iterator[dict[str, Any]]],
) -> Iterator[bytes]:
    client, response = _send(served, request, settings)

    def lines() -> Iterator[StreamLine]:
        for line in response.iter_lines():
            if line.strip():
                yield StreamLine.model_validate_json(line)

    def stream() -> Iterator[bytes]:
        try:
            for event in events(lines()):
                yield f"data: {json.dumps(event)}\n\n".encode()
            yield b"data: [DONE]\n\n"
        finally:
            response.close()
            client.close()

    return stream()


def _detail(response: httpx.Response) -> str:
    """The inference server's words, without the server folders they may quote (a model
    that failed to load names its files)."""
    try:
        detail = str(response.json().get("detail", response.text))
    except ValueError:
        detail = response.text[:500]
    return hide_server_paths(detail)


def _usage(result: GenerationResult) -> Usage:
    completion_tokens = sum(choice.completion_tokens for choice in result.choices)
    return Usage(
        prompt_tokens=result.prompt_tokens,
        completion_tokens=completion_tokens,
        total_tokens=result.prompt_tokens + completion_tokens,
    )
