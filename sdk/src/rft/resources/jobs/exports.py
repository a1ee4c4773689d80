"""Exports: a job's adapter merged into its base model (an archive to download), or the adapter
or a merged model pushed to a Hugging Face hub repository. A worker builds each one in the
background; ``wait`` polls it until it ends, and ``Jobs.download_merged`` / ``push_to_hub``
put the steps together.
"""

from __future__ import annotations

import asyncio
import builtins
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rft.errors import ExportFailedError, RFTError
from rft.models import Export
from rft.resources.adapter_archive import download_archive, download_archive_async
from rft.resources.jobs.resource import AsyncJobsResource, JobsResource
from rft.transport import AsyncTransport, RequestOptions, SyncTransport, new_idempotency_key

DEFAULT_EXPORT_POLL_INTERVAL_S = 2.0


def export_request(
    job_id: str,
    *,
    kind: str,
    checkpoint: int | None,
    dtype: str,
    hub_repo: str | None = None,
    token: str | None = None,
    token_secret: str | None = None,
    private: bool = True,
) -> RequestOptions:
    body: dict[str, Any] = {"kind": kind, "checkpoint_step": checkpoint, "dtype": dtype}
    if hub_repo is not None:
        if (token is None) == (token_secret is None):
            raise RFTError(
                "give the hub token as exactly one of token= (the token itself) or "
                "token_secret= (the name of one of the job's secrets)"
            )
        body["hub"] = {
            "repo_id": hub_repo,
            "private": private,
            "token": token,
            "token_secret": token_secret,
        }
    # Made once per call and reused by every retry, so a retried request cannot push twice.
    headers = {"Idempotency-Key": new_idempotency_key()}
    return RequestOptions("POST", f"/v1/jobs/{job_id}/exports", json=body, headers=headers)


class _ExportClock:
    def __init__(self, timeout: float | None) -> None:
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.timeout = timeout

    def over(self, export: Export) -> bool:
        """True once the export ended; raises TimeoutError past the deadline."""
        if export.status.is_terminal:
            return True
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise TimeoutError(
                f"export {export.id} is still {export.status.value} ({export.stage or 'waiting'}, "
                f"{export.progress:.0%}) after {self.timeout} s"
            )
        return False


def succeeded(export: Export) -> Export:
    if export.status.value == "failed":
        raise ExportFailedError(export)
    return export


class Exports:
    """``client.jobs.exports``: a job's exports."""

    def __init__(self, transport: SyncTransport) -> None:
        self._transport = transport

    def create(
        self,
        job_id: str,
        /,
        *,
        kind: str = "merged",
        checkpoint: int | None = None,
        dtype: str = "auto",
        hub_repo: str | None = None,
        token: str | None = None,
        token_secret: str | None = None,
        private: bool = True,
    ) -> Export:
        """Start an export: ``kind`` "merged" (the base model with the adapter merged in) or
        "adapter"; of the final adapter or the checkpoint at step ``checkpoint``. With
        ``hub_repo`` it is pushed there with ``token`` (sent once, never stored in clear) or the
        job secret named ``token_secret``; without, a merged archive is kept to download (one
        already built or building for the same adapter and dtype is returned instead)."""
        options = export_request(
            job_id,
            kind=kind,
            checkpoint=checkpoint,
            dtype=dtype,
            hub_repo=hub_repo,
            token=token,
            token_secret=token_secret,
            private=private,
        )
        return Export.model_validate(self._transport.request(options).json())

    def get(self, job_id: str, export_id: str, /) -> Export:
        path = f"/v1/jobs/{job_id}/exports/{export_id}"
        return Export.model_validate(self._transport.request(RequestOptions("GET", path)).json())

    def list(self, job_id: str, /) -> builtins.list[Export]:
        """The job's exports, newest first."""
        path = f"/v1/jobs/{job_id}/exports"
        data = self._transport.request(RequestOptions("GET", path)).json()["data"]
        return [Export.model_validate(item) for item in data]

    def delete(self, job_id: str, export_id: str, /) -> None:
        """Delete an export that has ended, and its merged archive on the server (a hub
        repository it pushed to is left as it is). ``rft.ConflictError`` while it is queued or
        running: wait for it to end; ``rft.NotFoundError`` once it is gone."""
        path = f"/v1/jobs/{job_id}/exports/{export_id}"
        self._transport.request(RequestOptions("DELETE", path))

    def wait(
        self,
        job_id: str,
        export_id: str,
        /,
        *,
        poll_interval: float = DEFAULT_EXPORT_POLL_INTERVAL_S,
        timeout: float | None = None,
        on_update: Callable[[Export], None] | None = None,
    ) -> Export:
        """Poll until the export ends (succeeded or failed); returns it. ``on_update`` sees
        the export at each poll (its stage and progress)."""
        clock = _ExportClock(timeout)
        while True:
            export = self.get(job_id, export_id)
            if on_update is not None:
                on_update(export)
            if clock.over(export):
                return export
            time.sleep(poll_interval)


class AsyncExports:
    """See :class:`Exports`."""

    def __init__(self, transport: AsyncTransport) -> None:
        self._transport = transport

    async def create(
        self,
        job_id: str,
        /,
        *,
        kind: str = "merged",
        checkpoint: int | None = None,
        dtype: str = "auto",
        hub_repo: str | None = None,
        token: str | None = None,
        token_secret: str | None = None,
        private: bool = True,
    ) -> Export:
        options = export_request(
            job_id,
            kind=kind,
            checkpoint=checkpoint,
            dtype=dtype,
            hub_repo=hub_repo,
            token=token,
            token_secret=token_secret,
            private=private,
        )
        return Export.model_validate((await self._transport.request(options)).json())

    async def get(self, job_id: str, export_id: str, /) -> Export:
        path = f"/v1/jobs/{job_id}/exports/{export_id}"
        response = await self._transport.request(RequestOptions("GET", path))
        return Export.model_validate(response.json())

    async def list(self, job_id: str, /) -> builtins.list[Export]:
        path = f"/v1/jobs/{job_id}/exports"
        data = (await self._transport.request(RequestOptions("GET", path))).json()["data"]
        return [Export.model_validate(item) for item in data]

    async def delete(self, job_id: str, export_id: str, /) -> None:
        path = f"/v1/jobs/{job_id}/exports/{export_id}"
        await self._transport.request(RequestOptions("DELETE", path))

    async def wait(
        self,
        job_id: str,
        export_id: str,
        /,
        *,
        poll_interval: float = DEFAULT_EXPORT_POLL_INTERVAL_S,
        timeout: float | None = None,
        on_update: Callable[[Export], None] | None = None,
    ) -> Export:
        clock = _ExportClock(timeout)
        while True:
            export = await self.get(job_id, export_id)
            if on_update is not None:
                on_update(export)
            if clock.over(export):
                return export
            await asyncio.sleep(poll_interval)


def _merged_name(job_id: str, checkpoint: int | None) -> str:
    return f"{job_id}-merged" if checkpoint is None else f"{job_id}-step-{checkpoint}-merged"


class ExportMethods(JobsResource):
    """``client.jobs`` shortcuts over exports: a merged model downloaded, an adapter (or a
    merged model) pushed to the hub."""

    exports: Exports

    def download_merged(
        self,
        job_id: str,
        /,
        destination: str | os.PathLike[str],
        *,
        checkpoint: int | None = None,
        dtype: str = "auto",
        extract: bool = True,
        poll_interval: float = DEFAULT_EXPORT_POLL_INTERVAL_S,
        timeout: float | None = None,
        on_update: Callable[[Export], None] | None = None,
    ) -> Path:
        """Save the base model with the final adapter (or the checkpoint at step
        ``checkpoint``) merged into it under ``destination``: a Hugging Face model folder in
        safetensors that ``AutoModelForCausalLM.from_pretrained`` loads.

        A worker builds it first (once per adapter and ``dtype``: "auto" keeps the base
        model's, or "float32", "bfloat16", "float16"); this waits for that, then streams the
        archive to disk. Returns the unpacked folder, or with ``extract=False`` the
        ``.tar.gz``. ``on_update`` sees the export (stage, progress) at each poll. Raises
        ExportFailedError when the build fails, TimeoutError after ``timeout`` seconds.
        """
        export = self.exports.create(job_id, kind="merged", checkpoint=checkpoint, dtype=dtype)
        export = succeeded(
            self.exports.wait(
                job_id,
                export.id,
                poll_interval=poll_interval,
                timeout=timeout,
                on_update=on_update,
            )
        )
        assert export.download_path is not None
        name = _merged_name(job_id, checkpoint)
        return download_archive(self._transport, export.download_path, name, destination, extract)

    def push_to_hub(
        self,
        job_id: str,
        repo_id: str,
        /,
        *,
        token: str | None = None,
        token_secret: str | None = None,
        merged: bool = False,
        checkpoint: int | None = None,
        dtype: str = "auto",
        private: bool = True,
        wait: bool = True,
        poll_interval: float = DEFAULT_EXPORT_POLL_INTERVAL_S,
        timeout: float | None = None,
        on_update: Callable[[Export], None] | None = None,
    ) -> Export:
        """Push the job's adapter (or with ``merged=True`` the base model with the adapter
        merged in) to the Hugging Face hub repository ``repo_id``, created (``private``) when
        missing. The token is ``token`` (sent once; the server keeps it encrypted until the
        push ends, then erases it) or the job secret named ``token_secret``.

        Waits for the push unless ``wait=False``; returns the export (``hub.commit_url``).
        Raises ExportFailedError when it fails (a refused token: the hub's 401).
        """
        export = self.exports.create(
            job_id,
            kind="merged" if merged else "adapter",
            checkpoint=checkpoint,
            dtype=dtype,
            hub_repo=repo_id,
            token=token,
            token_secret=token_secret,
            private=private,
        )
        if not wait:
            return export
        return succeeded(
            self.exports.wait(
                job_id,
                export.id,
                poll_interval=poll_interval,
                timeout=timeout,
                on_update=on_update,
            )
        )


class AsyncExportMethods(AsyncJobsResource):
    """The async twin of :class:`ExportMethods`."""

    exports: AsyncExports

    async def download_merged(
        self,
        job_id: str,
        /,
        destination: str | os.PathLike[str],
        *,
        checkpoint: int | None = None,
        dtype: str = "auto",
        extract: bool = True,
        poll_interval: float = DEFAULT_EXPORT_POLL_INTERVAL_S,
        timeout: float | None = None,
        on_update: Callable[[Export], None] | None = None,
    ) -> Path:
        """See :meth:`Jobs.download_merged`."""
        export = await self.exports.create(
            job_id, kind="merged", checkpoint=checkpoint, dtype=dtype
        )
        export = succeeded(
            await self.exports.wait(
                job_id,
                export.id,
                poll_interval=poll_interval,
                timeout=timeout,
                on_update=on_update,
            )
        )
        assert export.download_path is not None
        return await download_archive_async(
            self._transport,
            export.download_path,
            _merged_name(job_id, checkpoint),
            destination,
            extract,
        )

    async def push_to_hub(
        self,
        job_id: str,
        repo_id: str,
        /,
        *,
        token: str | None = None,
        token_secret: str | None = None,
        merged: bool = False,
        checkpoint: int | None = None,
        dtype: str = "auto",
        private: bool = True,
        wait: bool = True,
        poll_interval: float = DEFAULT_EXPORT_POLL_INTERVAL_S,
        timeout: float | None = None,
        on_update: Callable[[Export], None] | None = None,
    ) -> Export:
        """See :meth:`Jobs.push_to_hub`."""
        export = await self.exports.create(
            job_id,
            kind="merged" if merged else "adapter",
            checkpoint=checkpoint,
            dtype=dtype,
            hub_repo=repo_id,
            token=token,
            token_secret=token_secret,
            private=private,
        )
        if not wait:
            return export
        return succeeded(
            await self.exports.wait(
                job_id,
                export.id,
                poll_interval=poll_interval,
                timeout=timeout,
                on_update=on_update,
            )
        )
