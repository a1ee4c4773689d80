from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Response

from service.auth.dependencies import CurrentTenant
from service.db import SessionDep
from service.job_configs import service
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


@router.put("", response_model=JobConfigUpdated | DryRunResult)
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
        return service.dry_run(session, tenant_id, job_id, update)
    updated = service.update_config(session, tenant_id, job_id, update, if_match=if_match)
    response.headers["ETag"] = etag(updated.version)
    return updated


@router.get("/versions", response_model=list[JobConfig])
def list_config_versions(
    session: SessionDep, tenant_id: CurrentTenant, job_id: str
) -> list[JobConfig]:
    return service.list_config_versions(session, tenant_id, job_id)
