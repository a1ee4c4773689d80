from __future__ import annotations

from fastapi import APIRouter

from service.auth.dependencies import CurrentTenant
from service.db import SessionDep, end_transaction
from service.openai_compat.errors import OpenAIErrorRoute
from service.openai_compat.graders import service
from service.openai_compat.graders.schemas import (
    GraderRunRequest,
    GraderRunResponse,
    GraderValidateRequest,
    GraderValidateResponse,
)

router = APIRouter(
    prefix="/v1/fine_tuning/alpha/graders",
    tags=["openai-compatible fine-tuning"],
    route_class=OpenAIErrorRoute,
)


@router.post("/run", response_model=GraderRunResponse)
def run_grader(
    session: SessionDep, tenant_id: CurrentTenant, request: GraderRunRequest
) -> GraderRunResponse:
    """OpenAI's graders.run: one model sample scored, in our reward sandbox."""
    # The caller is authenticated (tenant_id); the sandbox run needs no database connection.
    end_transaction(session)
    return service.run_grader(request)


@router.post("/validate", response_model=GraderValidateResponse)
def validate_grader(_: CurrentTenant, request: GraderValidateRequest) -> GraderValidateResponse:
    """OpenAI's graders.validate: the grader back when it can run here, else 400."""
    return service.validate_grader(request.grader)
