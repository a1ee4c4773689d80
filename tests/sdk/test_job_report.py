"""client.jobs.report and ``rft jobs report``: the report page, saved where asked (the page
itself: tests/api/test_job_report.py, tests/ui/test_job_report.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from typer.testing import CliRunner

import rft
from rft.cli.app import app
from rft.errors import BadRequestError, NotFoundError
from service.stack import LocalStack
from tests.recording.recorded_run import recorded_run


def test_the_sdk_returns_and_saves_the_report(
    rft_client: rft.Client, stack: LocalStack, api_key: str, tmp_path: Path
) -> None:
    job_id = recorded_run(api_key).job_id
    saved = tmp_path / "report.html"
    page = rft_client.jobs.report(job_id, steps=[2, 5], path=saved)
    assert page.startswith("<!doctype html>") and job_id in page
    assert saved.read_text(encoding="utf-8") == page
    with pytest.raises(BadRequestError, match="no step 99"):
        rft_client.jobs.report(job_id, steps=[99])
    with pytest.raises(NotFoundError):
        rft_client.jobs.report("job_missing")

    async def fetch() -> str:
        async with rft.AsyncClient(api_key=api_key, base_url=stack.base_url) as client:
            return await client.jobs.report(job_id)

    assert job_id in asyncio.run(fetch())


def test_the_cli_writes_the_report(stack: LocalStack, api_key: str, tmp_path: Path) -> None:
    job_id = recorded_run(api_key).job_id
    output = tmp_path / "run.html"
    cli = CliRunner(env={"RFT_API_KEY": api_key, "RFT_BASE_URL": stack.base_url})
    result = cli.invoke(app, ["jobs", "report", job_id, "-o", str(output), "--step", "3"])
    assert result.exit_code == 0, (result.output, result.exception)
    assert f"saved {output}" in result.output
    assert '"completions":[{"step":3,"best"' in output.read_text(encoding="utf-8")
