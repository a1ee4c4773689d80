"""A job's checkpoints and its final adapter: listed, and downloaded as PEFT folders."""

from __future__ import annotations

import os
from pathlib import Path

from rft.models import CheckpointList
from rft.resources.adapter_archive import download_archive, download_archive_async
from rft.resources.jobs.resource import AsyncJobsResource, JobsResource


def _checkpoint_archive_path(job_id: str, step: int) -> str:
    return f"/v1/jobs/{job_id}/checkpoints/{step}/adapter.tar.gz"


def _adapter_archive_path(job_id: str) -> str:
    return f"/v1/jobs/{job_id}/adapter.tar.gz"


class CheckpointMethods(JobsResource):
    """``client.jobs`` methods for checkpoints and adapters."""

    def checkpoints(self, job_id: str, /) -> CheckpointList:
        """The job's saved checkpoints, oldest first, and whether a final adapter exists."""
        return CheckpointList.model_validate(self._get_json(f"/v1/jobs/{job_id}/checkpoints"))

    def download_checkpoint(
        self,
        job_id: str,
        step: int,
        /,
        destination: str | os.PathLike[str],
        *,
        extract: bool = True,
    ) -> Path:
        """Save the LoRA adapter of the checkpoint at ``step`` under the ``destination`` folder.

        Streamed to disk. Returns the unpacked PEFT directory (load it with
        ``PeftModel.from_pretrained``), or with ``extract=False`` the ``.tar.gz`` itself.
        """
        return download_archive(
            self._transport,
            _checkpoint_archive_path(job_id, step),
            f"{job_id}-step-{step}",
            destination,
            extract,
        )

    def download_adapter(
        self, job_id: str, /, destination: str | os.PathLike[str], *, extract: bool = True
    ) -> Path:
        """Save the final LoRA adapter of a finished job; see :meth:`download_checkpoint`."""
        return download_archive(
            self._transport,
            _adapter_archive_path(job_id),
            f"{job_id}-adapter",
            destination,
            extract,
        )


class AsyncCheckpointMethods(AsyncJobsResource):
    """The async twin of :class:`CheckpointMethods`."""

    async def checkpoints(self, job_id: str, /) -> CheckpointList:
        data = await self._get_json(f"/v1/jobs/{job_id}/checkpoints")
        return CheckpointList.model_validate(data)

    async def download_checkpoint(
        self,
        job_id: str,
        step: int,
        /,
        destination: str | os.PathLike[str],
        *,
        extract: bool = True,
    ) -> Path:
        """See :meth:`Jobs.download_checkpoint`."""
        return await download_archive_async(
            self._transport,
            _checkpoint_archive_path(job_id, step),
            f"{job_id}-step-{step}",
            destination,
            extract,
        )

    async def download_adapter(
        self, job_id: str, /, destination: str | os.PathLike[str], *, extract: bool = True
    ) -> Path:
        """See :meth:`Jobs.download_adapter`."""
        return await download_archive_async(
            self._transport,
            _adapter_archive_path(job_id),
            f"{job_id}-adapter",
            destination,
            extract,
        )
