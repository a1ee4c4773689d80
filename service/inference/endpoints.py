from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

from fastapi import APIRouter
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session

from service.auth.dependencies import CurrentTenant
from service.db import SessionDep
from service.errors import error_responses
from service.inference import service
from service.inference.schemas import (
    ChatCompletion,
    ChatCompletionCreate,
    Completion,
    CompletionCreate,
)
from service.inference.service import ServedModel
from service.settings import Settings, get_settings

router = APIRouter(prefix="/v1", tags=["inference"])

Body = TypeVar("Body", ChatCompletionCreate, CompletionCreate)
Answer = TypeVar("Answer", ChatCompletion, Completion)


def _answer(
    session: Session,
    tenant_id: str,
    body: Body,
    max_tokens: int,
    stream: Callable[[ServedModel, Body, Settings], Iterator[bytes]],
    complete: Callable[[ServedModel, Body, Settings], Answer],
) -> Answer | StreamingResponse:
    """Check the request, resolve its model, give the database connection back (a generation
    can take minutes and needs none), then stream or answer whole."""
    settings = get_settings()
    service.check_request(body, max_tokens, settings)
    served = service.resolve_model(session, tenant_id, body.model)
    session.close()
    if body.stream:
        events = stream(served, body, settings)
        return StreamingResponse(events, media_type="text/event-stream")
    return complete(served, body, settings)


@router.post(
    "/chat/completions", response_model=ChatCompletion, responses=error_responses(400, 404)
)
def create_chat_completion(
    session: SessionDep, tenant_id: CurrentTenant, body: ChatCompletionCreate
) -> ChatCompletion | StreamingResponse:
    """OpenAI-compatible chat completion from a base model, a job's adapter or a checkpoint."""
    max_tokens = service.chat_max_tokens(body)
    stream, complete = service.stream_chat_completion, service.create_chat_completion
    return _answer(session, tenant_id, body, max_tokens, stream, complete)


@router.post("/completions", response_model=Completion, responses=error_responses(400, 404))
def create_completion(
    session: SessionDep, tenant_id: CurrentTenant, body: CompletionCreate
) -> Completion | StreamingResponse:
    """OpenAI-compatible text completion (no chat template) from the same models."""
    max_tokens = service.completion_max_tokens(body)
    stream, complete = service.stream_completion, service.create_completion
    return _answer(session, tenant_id, body, max_tokens, stream, complete)
