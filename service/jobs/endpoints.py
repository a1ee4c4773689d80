from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, status

from service.auth.dependencies import CurrentTenant
from service.db import SessionDep
from service.jobs import service
from service.jobs.schemas import Completion, Job, JobCreate, JobEvent, Step
from service.jobs.status import JobStatus
from service.pagination import DEFAULT_PAGE_SIZE, Page, PageLimit

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])


@router.post("", status_code=status.HTTP_201_CREATED, response_model=Job)
def create_job(
    session: SessionDep,
    tenant_id: CurrentTenant,
    payload: JobCreate,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> Job:
    return Job.model_validate(
        service.create_job(session, tenant_id, payload, idempotency_key=idempotency_key)
    )


@router.get("", response_model=Page[Job])
def list_jobs(
    session: SessionDep,
    tenant_id: CurrentTenant,
    limit: PageLimit = DEFAULT_PAGE_SIZE,
    after: str | None = None,
    status: JobStatus | None = None,
) -> Page[Job]:
    jobs = service.list_jobs(session, tenant_id, limit=limit + 1, after=after, status=status)
    page = [Job.model_validate(job) for job in jobs[:limit]]
    has_more = len(jobs) > limit
    return Page(data=page, has_more=has_more, next_cursor=page[-1].id if has_more else None)


@router.get("/{job_id}", response_model=Job)
def get_job(session: SessionDep, tenant_id: CurrentTenant, job_id: str) -> Job:
    return Job.model_validate(service.get_job(session, tenant_id, job_id))


@router.post("/{job_id}/cancel", response_model=Job)
def cancel_job(session: SessionDep, tenant_id: CurrentTenant, job_id: str) -> Job:
    return Job.model_validate(service.cancel_job(session, tenant_id, job_id))


@router.get("/{job_id}/steps", response_model=Page[Step])
def list_steps(
    session: SessionDep,
    tenant_id: CurrentTenant,
    job_id: str,
    limit: PageLimit = 1000,
    after_step: Annotated[int, Query(ge=0, description="Return steps after this one.")] = 0,
) -> Page[Step]:
    steps = service.list_steps(session, tenant_id, job_id, after_step=after_step, limit=limit + 1)
    page = [Step.model_validate(s) for s in steps[:limit]]
    has_more = len(steps) > limit
    return Page(data=page, has_more=has_more, next_cursor=str(page[-1].step) if has_more else None)


@router.get("/{job_id}/completions", response_model=Page[Completion])
def list_completions(
    session: SessionDep,
    tenant_id: CurrentTenant,
    job_id: str,
    step: Annotated[int | None, Query(ge=1)] = None,
    limit: PageLimit = DEFAULT_PAGE_SIZE,
    after: Annotated[int, Query(ge=0, description="The next_cursor of the previous page.")] = 0,
) -> Page[Completion]:
    rows = service.list_completions(
        session, tenant_id, job_id, step=step, after_id=after, limit=limit + 1
    )
    page = [Completion.model_validate(c) for c in rows[:limit]]
    has_more = len(rows) > limit
    return Page(data=page, has_more=has_more, next_cursor=str(page[-1].id) if has_more else None)


@router.get("/{job_id}/events/history", response_model=Page[JobEvent])
def list_events(
    session: SessionDep,
    tenant_id: CurrentTenant,
    job_id: str,
    limit: PageLimit = DEFAULT_PAGE_SIZE,
    after: Annotated[int, Query(ge=0)] = 0,
) -> Page[JobEvent]:
    events = service.list_events(session, tenant_id, job_id, after_id=after, limit=limit + 1)
    page = [JobEvent.model_validate(e) for e in events[:limit]]
    has_more = len(events) > limit
    return Page(data=page, has_more=has_more, next_cursor=str(page[-1].id) if has_more else None)
