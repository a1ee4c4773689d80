"""A job's report (``GET /v1/jobs/{id}/report.html``): one self-contained HTML page to share.
What Jobs.report and AsyncJobs.report send and do with the answer."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from rft.transport import RequestOptions


def report_request(job_id: str, steps: Sequence[int] | None) -> RequestOptions:
    params = {"steps": list(steps)} if steps else None
    return RequestOptions("GET", f"/v1/jobs/{job_id}/report.html", params=params)


def save_report(page: str, path: str | os.PathLike[str]) -> Path:
    """Write the page (UTF-8, as the page says it is); returns the path written."""
    target = Path(path)
    target.write_text(page, encoding="utf-8")
    return target
