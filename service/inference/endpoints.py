from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import StreamingResponse

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
from service.settings import get_settings

router = APIRouter(prefix="/v1", tags=["inference"])


@router.post(
    "/chat/completions", response_model=ChatCompletion, responses=error_responses(400, 404)
)
def create_chat_completion(
    session: SessionDep, tenant_id: CurrentTenant, body: ChatCompletionCreate
) -> ChatCompletion | StreamingResponse:
    """OpenAI-compatible chat completion from a base model, a job's adapter or a checkpoint."""
    settings = get_settings()
    service.check_request(body, service.chat_max_tokens(body), settings)
    served = service.resolve_model(session, tenant_id, body.model)
    # A generation can take minutes: give the database connection back before it starts.
    session.close()
    if body.stream:
        events = service.stream_chat_completion(served, body, settings)
        return StreamingResponse(events, media_type="text/event-stream")
    return service.create_chat_completion(served, body, settings)


@router.post("/completions", response_model=Completion, responses=error_responses(400, 404))
def create_completion(
    session: SessionDep, tenant_id: CurrentTenant, body: CompletionCreate
) -> Completion | StreamingResponse:
    """OpenAI-compatible text completion (no chat template) from the same models."""
    settings = get_settings()
    service.check_request(body, service.completion_max_tokens(body), settings)
    served = service.resolve_model(session, tenant_id, body.model)
    session.close()
    if body.stream:
        events = service.stream_completion(served, body, settings)
        return StreamingResponse(events, media_type="text/event-stream")
    return service.create_completion(served, body, settings)
