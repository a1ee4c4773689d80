from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse

from service.auth.dependencies import CurrentTenant
from service.db import SessionDep
from service.errors import error_responses
from service.reports.page import render_report
from service.reports.schemas import MAX_REPORT_STEPS
from service.reports.service import build_report

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

REPORT_DESCRIPTION = f"""\
One self-contained HTML page to share a run: the curves (total reward and validation, each
reward function, completion length, KL), the config history with diffs, warnings and guard
trips with their evidence, the best and worst completions of chosen steps, lineage and
exports. Styles, scripts and data are inline and the page fetches nothing: save it and it opens
offline. `steps` chooses whose completions are shown (repeat it; at most {MAX_REPORT_STEPS};
default: the first and the last step recorded).
"""


@router.get(
    "/{job_id}/report.html",
    response_class=HTMLResponse,
    description=REPORT_DESCRIPTION,
    responses={200: {"content": {"text/html": {}}}, **error_responses(400, 404)},
)
def get_report(
    session: SessionDep,
    tenant_id: CurrentTenant,
    job_id: str,
    steps: Annotated[
        list[int] | None,
        Query(description="Steps whose best and worst completions the report shows."),
    ] = None,
) -> HTMLResponse:
    report = build_report(session, tenant_id, job_id, steps=steps)
    filename = f"{report.job.id}-report.html"
    return HTMLResponse(
        render_report(report),
        headers={"Content-Disposition": f'inline; filename="{filename}"'},
    )
