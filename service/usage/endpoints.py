from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query

from service.auth.dependencies import CurrentTenant
from service.db import SessionDep
from service.usage import service
from service.usage.schemas import Usage, UsageGrouping

router = APIRouter(prefix="/v1/usage", tags=["usage"])


@router.get("", response_model=Usage)
def get_usage(
    session: SessionDep,
    tenant_id: CurrentTenant,
    start: Annotated[
        datetime | None,
        Query(alias="from", description="Start (inclusive, UTC); default: 30 days before 'to'."),
    ] = None,
    end: Annotated[
        datetime | None, Query(alias="to", description="End (exclusive, UTC); default: now.")
    ] = None,
    group_by: Annotated[UsageGrouping, Query(description="'day' (UTC) or 'job'.")] = "day",
) -> Usage:
    """The calling tenant's GPU-seconds (device-seconds held), completion tokens and jobs over
    [from, to), by UTC day or by job (docs/cost.md)."""
    return service.usage(session, tenant_id, start=start, end=end, group_by=group_by)
