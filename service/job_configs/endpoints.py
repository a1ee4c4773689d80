from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Response

from service.auth.dependencies import CurrentTenant
from service.db import SessionDep
from service.errors import error_responses
from service.job_configs import service
from service.job_configs.dry_run import dry_run_update
from service.job_configs.schemas import DryRunResult, JobConfig, JobConfigUpdate, JobConfigUpdated

router = APIRouter(prefix="/v1/jobs/{job_id}/config", tags=["live config"])


def etag(version: int) -> str:
    return f'"{version}"'


@router.get("", response_model=JobConfig)
def get_config(
    session: SessionDep, tenant_id: CurrentTenant, job_id: str, response: Response
) -> JobConfig:
    config = service.get_config(session, tenant_id, job_id)
    response.headers["ETag"] = etag(config.version)
    return config


UPDATE_DESCRIPTION = """\
Replace the job's editable config; the worker applies it from `applies_from_step`.

`If-Match` is required (428 without it): the ETag of the config your change is based on, as
`GET` answered it (`"3"`), so that a change made by someone else in between is refused (412)
rather than overwritten; `*` replaces whatever version is current. A dry run
(`?dry_run=true`) stores nothing and needs no `If-Match`.

The body is the document `GET` returned, edited: read-only fields may stay in it (see
`JobConfigUpdate`). `secrets` sets, replaces or removes secrets by name.
"""


@router.put(
    "",
    response_model=JobConfigUpdated | DryRunResult,
    description=UPDATE_DESCRIPTION,
    # 409: the job has ended; 412: If-Match names an older version; 428: no If-Match.
    responses=error_responses(409, 412, 428),
)
def update_config(
    session: SessionDep,
    tenant_id: CurrentTenant,
    job_id: str,
    update: JobConfigUpdate,
    response: Response,
    if_match: Annotated[str | None, Header()] = None,
    dry_run: Annotated[
        bool, Query(description="Re-score the last step with this config; store nothing.")
    ] = False,
) -> JobConfigUpdated | DryRunResult:
    if dry_run:
        return dry_run_update(session, tenant_id, job_id, update)
    updated = service.update_config(session, tenant_id, job_id, update, if_match=if_match)
    response.headers["ETag"] = etag(updated.version)
    return updated


@router.get("/versions", response_model=list[JobConfig])
def list_config_versions(
    session: SessionDep, tenant_id: CurrentTenant, job_id: str
) -> list[JobConfig]:
    return service.list_config_versions(session, tenant_id, job_id)
