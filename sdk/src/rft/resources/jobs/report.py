"""A job's report (``GET /v1/jobs/{id}/report.html``): one self-contained HTML page to share.
What Jobs.report and AsyncJobs.report send and do with the answer."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from rft.resources.jobs.resource import AsyncJobsResource, JobsResource
from rft.transport import RequestOptions


def report_request(job_id: str, steps: Sequence[int] | None) -> RequestOptions:
    params = {"steps": list(steps)} if steps else None
    return RequestOptions("GET", f"/v1/jobs/{job_id}/report.html", params=params)


def save_report(page: str, path: str | os.PathLike[str]) -> Path:
    """Write the page (UTF-8, as the page says it is); returns the path written."""
    target = Path(path)
    target.write_text(page, encoding="utf-8")
    return target


class ReportMethods(JobsResource):
    """``client.jobs`` method for the report."""

    def report(
        self,
        job_id: str,
        /,
        *,
        steps: Sequence[int] | None = None,
        path: str | os.PathLike[str] | None = None,
    ) -> str:
        """The job's report: one self-contained HTML page (curves, config history with diffs,
        warnings and guard trips, the best and worst completions of ``steps`` (default: the
        first and the last step), lineage, exports) that opens offline. With ``path``, it is
        also written there."""
        page = self._transport.request(report_request(job_id, steps)).text
        if path is not None:
            save_report(page, path)
        return page


class AsyncReportMethods(AsyncJobsResource):
    """The async twin of :class:`ReportMethods`."""

    async def report(
        self,
        job_id: str,
        /,
        *,
        steps: Sequence[int] | None = None,
        path: str | os.PathLike[str] | None = None,
    ) -> str:
        page = (await self._transport.request(report_request(job_id, steps))).text
        if path is not None:
            save_report(page, path)
        return page
