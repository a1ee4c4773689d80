"""A job's events: the history as pages, and the live stream (Server-Sent Events) of its
steps and events, resumed after a dropped connection with Last-Event-ID."""

from __future__ import annotations

import asyncio
import json
import time
import warnings
from collections.abc import AsyncIterator, Iterator
from typing import Literal, TypeAlias, overload

from rft.errors import APIConnectionError, APIStatusError
from rft.models import Job, JobEvent, Page, Step
from rft.pagination import AsyncPageIterator, PageIterator, get_api_list, get_async_api_list
from rft.resources.jobs.resource import AsyncJobsResource, JobsResource
from rft.sse import ServerSentEvent, SSEDecoder
from rft.transport import RequestOptions, retry_delay

StreamItem: TypeAlias = Step | JobEvent
StreamItemWithJob: TypeAlias = Step | JobEvent | Job


def _warn_poll_interval(poll_interval: float | None) -> None:
    if poll_interval is not None:
        warnings.warn(
            "stream(poll_interval=...) is deprecated and ignored: the stream is pushed by the "
            "server",
            DeprecationWarning,
            stacklevel=3,
        )


class _JobStream:
    """What the sync and async streams share: the request, the cursor, the retry budget.

    The cursor is the ``id`` of the last complete message; every (re)connection sends it as
    Last-Event-ID, so the server resumes both the steps and the events right after it.
    """

    def __init__(self, job_id: str, *, include_job_snapshots: bool, max_retries: int) -> None:
        self.job_id = job_id
        self.include_job_snapshots = include_job_snapshots
        self.max_retries = max_retries
        self.cursor: str | None = None
        self.failures = 0  # consecutive, since the cursor last moved
        self.ended = False

    def request(self) -> RequestOptions:
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
        if self.cursor:
            headers["Last-Event-ID"] = self.cursor
        return RequestOptions("GET", f"/v1/jobs/{self.job_id}/events", headers=headers)

    def receive(self, message: ServerSentEvent) -> StreamItemWithJob | None:
        """The item a message carries (None for those not yielded); advances the cursor."""
        if message.id and message.id != self.cursor:
            # New information: the failures before it were not consecutive with the next.
            self.cursor = message.id
            self.failures = 0
        if message.event == "end":
            self.ended = True
            return None
        if message.event == "step":
            return Step.model_validate_json(message.data)
        if message.event == "job":
            # A snapshot, sent again on every reconnection: not a log entry.
            return Job.model_validate_json(message.data) if self.include_job_snapshots else None
        payload = json.loads(message.data)
        if isinstance(payload, dict) and "id" in payload and "kind" in payload:
            return JobEvent.model_validate(payload)
        return None  # a message type this client does not know: skipped

    def disconnected(self, decoder: SSEDecoder) -> None:
        if decoder.last_event_id:
            self.cursor = decoder.last_event_id  # an id-only block also moves the cursor

    def early_end(self) -> APIConnectionError:
        return APIConnectionError(
            f"the event stream of job {self.job_id} closed before its end message"
        )

    def backoff(self, error: APIConnectionError | APIStatusError) -> float:
        """Seconds to wait before reconnecting; raises ``error`` when it is not worth it."""
        response = error.response if isinstance(error, APIStatusError) else None
        if response is not None and response.status_code < 500 and response.status_code != 429:
            raise error  # the request itself is wrong (auth, unknown job, bad cursor)
        if self.failures >= self.max_retries:
            raise error
        delay = retry_delay(self.failures, response)
        self.failures += 1
        return delay


class EventMethods(JobsResource):
    """``client.jobs`` methods for the event history and the live stream."""

    def events(self, job_id: str, /, *, after: int = 0) -> PageIterator[JobEvent]:
        return get_api_list(
            self._transport,
            f"/v1/jobs/{job_id}/events/history",
            page=Page[JobEvent],
            start=str(after),
        )

    @overload
    def stream(
        self,
        job_id: str,
        /,
        *,
        include_job_snapshots: Literal[False] = False,
        poll_interval: float | None = None,
    ) -> Iterator[StreamItem]: ...

    @overload
    def stream(
        self,
        job_id: str,
        /,
        *,
        include_job_snapshots: bool,
        poll_interval: float | None = None,
    ) -> Iterator[StreamItemWithJob]: ...

    def stream(
        self,
        job_id: str,
        /,
        *,
        include_job_snapshots: bool = False,
        poll_interval: float | None = None,
    ) -> Iterator[StreamItemWithJob]:
        """Yield the job's steps and events, from its start, live, until the job ends.

        Reads ``GET /v1/jobs/{job_id}/events`` (Server-Sent Events). Steps and events arrive
        in the order they were recorded; with ``include_job_snapshots`` the job itself is
        yielded too, on connecting and whenever its status, step count or config versions
        change (again after a reconnection, being a snapshot). A dropped connection, a
        timeout or a 5xx is answered by reconnecting with backoff and Last-Event-ID, so no
        step or event is repeated or lost; more than ``max_retries`` failures in a row
        without news raise. The iterator stops after the server's ``end`` message.

        A step is yielded again only when the job resumed from a checkpoint (a ``resumed``
        event) and re-ran it: the new one replaces the old.

        ``poll_interval`` is deprecated and ignored (the server pushes).
        """
        _warn_poll_interval(poll_interval)
        state = _JobStream(
            job_id,
            include_job_snapshots=include_job_snapshots,
            max_retries=self._transport.max_retries,
        )
        return self._follow(state)

    def _follow(self, state: _JobStream) -> Iterator[StreamItemWithJob]:
        while True:
            decoder = SSEDecoder()
            error: APIConnectionError | APIStatusError
            try:
                with self._transport.stream(state.request()) as response:
                    for chunk in response.iter_bytes():
                        for message in decoder.feed(chunk):
                            item = state.receive(message)
                            if item is not None:
                                yield item
                            if state.ended:
                                return
                error = state.early_end()
            except (APIConnectionError, APIStatusError) as caught:
                error = caught
            finally:
                state.disconnected(decoder)
            time.sleep(state.backoff(error))


class AsyncEventMethods(AsyncJobsResource):
    """The async twin of :class:`EventMethods`."""

    def events(self, job_id: str, /, *, after: int = 0) -> AsyncPageIterator[JobEvent]:
        return get_async_api_list(
            self._transport,
            f"/v1/jobs/{job_id}/events/history",
            page=Page[JobEvent],
            start=str(after),
        )

    @overload
    def stream(
        self,
        job_id: str,
        /,
        *,
        include_job_snapshots: Literal[False] = False,
        poll_interval: float | None = None,
    ) -> AsyncIterator[StreamItem]: ...

    @overload
    def stream(
        self,
        job_id: str,
        /,
        *,
        include_job_snapshots: bool,
        poll_interval: float | None = None,
    ) -> AsyncIterator[StreamItemWithJob]: ...

    def stream(
        self,
        job_id: str,
        /,
        *,
        include_job_snapshots: bool = False,
        poll_interval: float | None = None,
    ) -> AsyncIterator[StreamItemWithJob]:
        """``async for`` the job's steps and events until it ends; see :meth:`Jobs.stream`."""
        _warn_poll_interval(poll_interval)
        state = _JobStream(
            job_id,
            include_job_snapshots=include_job_snapshots,
            max_retries=self._transport.max_retries,
        )
        return self._follow(state)

    async def _follow(self, state: _JobStream) -> AsyncIterator[StreamItemWithJob]:
        while True:
            decoder = SSEDecoder()
            error: APIConnectionError | APIStatusError
            try:
                async with self._transport.stream(state.request()) as response:
                    async for chunk in response.aiter_bytes():
                        for message in decoder.feed(chunk):
                            item = state.receive(message)
                            if item is not None:
                                yield item
                            if state.ended:
                                return
                error = state.early_end()
            except (APIConnectionError, APIStatusError) as caught:
                error = caught
            finally:
                state.disconnected(decoder)
            await asyncio.sleep(state.backoff(error))
