from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from service.auth.dependencies import CurrentTenant
from service.db import SessionDep
from service.jobs import service as jobs
from service.openai_compat.errors import OpenAIErrorRoute
from service.openai_compat.files.schemas import OpenAIPage
from service.openai_compat.fine_tuning import checkpoints, events, service
from service.openai_compat.fine_tuning.schemas import (
    FineTuningJob,
    FineTuningJobCheckpoint,
    FineTuningJobCreate,
    FineTuningJobEvent,
)

router = APIRouter(
    prefix="/v1/fine_tuning/jobs",
    tags=["openai-compatible fine-tuning"],
    route_class=OpenAIErrorRoute,
)
Limit = Annotated[int, Query(ge=1, le=1000)]


@router.post("", response_model=FineTuningJob)
def create_job(
    session: SessionDep, tenant_id: CurrentTenant, request: FineTuningJobCreate
) -> FineTuningJob:
    """OpenAI's fine_tuning.jobs.create for method.type "reinforcement": one of our jobs."""
    return service.create_job(session, tenant_id, request)


@router.get("", response_model=OpenAIPage[FineTuningJob])
def list_jobs(
    session: SessionDep, tenant_id: CurrentTenant, limit: Limit = 20, after: str | None = None
) -> OpenAIPage[FineTuningJob]:
    return service.list_fine_tuning_jobs(session, tenant_id, limit=limit, after=after)


@router.get("/{job_id}", response_model=FineTuningJob)
def retrieve_job(session: SessionDep, tenant_id: CurrentTenant, job_id: str) -> FineTuningJob:
    return service.get_fine_tuning_job(session, tenant_id, job_id)


@router.post("/{job_id}/cancel", response_model=FineTuningJob)
def cancel_job(session: SessionDep, tenant_id: CurrentTenant, job_id: str) -> FineTuningJob:
    return service.change_status(session, tenant_id, job_id, jobs.cancel_job)


@router.post("/{job_id}/pause", response_model=FineTuningJob)
def pause_job(session: SessionDep, tenant_id: CurrentTenant, job_id: str) -> FineTuningJob:
    return service.change_status(session, tenant_id, job_id, jobs.pause_job)


@router.post("/{job_id}/resume", response_model=FineTuningJob)
def resume_job(session: SessionDep, tenant_id: CurrentTenant, job_id: str) -> FineTuningJob:
    return service.change_status(session, tenant_id, job_id, jobs.resume_job)


@router.get("/{job_id}/events", response_model=OpenAIPage[FineTuningJobEvent])
def list_events(
    session: SessionDep,
    tenant_id: CurrentTenant,
    job_id: str,
    limit: Limit = 20,
    after: str | None = None,
) -> OpenAIPage[FineTuningJobEvent]:
    """Newest first: status and other messages, and one metrics event per training step."""
    return events.list_events(session, tenant_id, job_id, limit=limit, after=after)


@router.get("/{job_id}/checkpoints", response_model=OpenAIPage[FineTuningJobCheckpoint])
def list_checkpoints(
    session: SessionDep,
    tenant_id: CurrentTenant,
    job_id: str,
    limit: Limit = 10,
    after: str | None = None,
) -> OpenAIPage[FineTuningJobCheckpoint]:
    return checkpoints.list_checkpoints(session, tenant_id, job_id, limit=limit, after=after)
