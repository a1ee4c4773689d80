"""What every part of ``client.jobs`` stands on: the transport, and a GET read as JSON.

Each module of this package holds one sub-resource of a job (checkpoints, config, steps,
completions, events, exports, the report) as a sync and an async class of methods over the
request builders they share; ``Jobs`` and ``AsyncJobs`` (jobs.py) are made of them, so every
method is still ``client.jobs.NAME``.
"""

from __future__ import annotations

from typing import Any

from rft.transport import AsyncTransport, RequestOptions, SyncTransport


class JobsResource:
    def __init__(self, transport: SyncTransport) -> None:
        self._transport = transport

    def _get_json(self, path: str, **params: Any) -> Any:
        return self._transport.request(RequestOptions("GET", path, params=params)).json()


class AsyncJobsResource:
    def __init__(self, transport: AsyncTransport) -> None:
        self._transport = transport

    async def _get_json(self, path: str, **params: Any) -> Any:
        return (await self._transport.request(RequestOptions("GET", path, params=params))).json()
