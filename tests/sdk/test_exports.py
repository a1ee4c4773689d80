"""``client.jobs.exports.delete``, sync and async, on exports written into the database
(tests/integration/test_exports.py has the SDK build real ones, which takes a trained job)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

import rft
from service.exports.status import ExportStatus
from service.stack import LocalStack
from tests.export_rows import ExportRows


@pytest.fixture
def rows(stack: LocalStack, idle_job: rft.Job, tmp_path: Path) -> Iterator[ExportRows]:
    rows = ExportRows(stack, idle_job.id, tmp_path)
    yield rows
    rows.close()


def test_an_ended_export_is_deleted_and_one_still_building_is_refused(
    rft_client: rft.Client, rows: ExportRows, stack: LocalStack, api_key: str
) -> None:
    job_id = rows.job_id
    built, archive = rows.add(ExportStatus.SUCCEEDED, archive=b"merged")
    failed, _ = rows.add(ExportStatus.FAILED)
    running, _ = rows.add(ExportStatus.RUNNING)

    assert rft_client.jobs.exports.delete(job_id, built) is None
    assert archive is not None and not archive.exists()
    with pytest.raises(rft.NotFoundError, match=f"has no export '{built}'"):
        rft_client.jobs.exports.get(job_id, built)
    with pytest.raises(rft.NotFoundError):
        rft_client.jobs.exports.delete(job_id, built)
    with pytest.raises(rft.ConflictError, match=f"export {running} is running") as refused:
        rft_client.jobs.exports.delete(job_id, running)
    assert refused.value.error == "ExportStillBuilding"

    async def async_delete() -> list[rft.Export]:
        async with rft.AsyncClient(api_key=api_key, base_url=stack.base_url) as client:
            await client.jobs.exports.delete(job_id, failed)
            with pytest.raises(rft.ConflictError):
                await client.jobs.exports.delete(job_id, running)
            return await client.jobs.exports.list(job_id)

    assert [export.id for export in asyncio.run(async_delete())] == [running]
