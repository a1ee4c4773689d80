"""The tenant's usage: GPU-seconds, completion tokens and jobs, by UTC day or by job."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from rft.models import Usage as UsageReport
from rft.transport import AsyncTransport, RequestOptions, SyncTransport

UsageGrouping = Literal["day", "job"]


def _usage_request(
    start: datetime | None, end: datetime | None, group_by: UsageGrouping
) -> RequestOptions:
    params: dict[str, Any] = {"group_by": group_by}
    if start is not None:
        params["from"] = start.isoformat()
    if end is not None:
        params["to"] = end.isoformat()
    return RequestOptions("GET", "/v1/usage", params=params)


class Usage:
    def __init__(self, transport: SyncTransport) -> None:
        self._transport = transport

    def retrieve(
        self,
        *,
        start: datetime | None = None,
        end: datetime | None = None,
        group_by: UsageGrouping = "day",
    ) -> UsageReport:
        """Usage over [start, end) (default: the last 30 days), by UTC day or by job."""
        response = self._transport.request(_usage_request(start, end, group_by))
        return UsageReport.model_validate(response.json())


class AsyncUsage:
    def __init__(self, transport: AsyncTransport) -> None:
        self._transport = transport

    async def retrieve(
        self,
        *,
        start: datetime | None = None,
        end: datetime | None = None,
        group_by: UsageGrouping = "day",
    ) -> UsageReport:
        """See :meth:`Usage.retrieve`."""
        response = await self._transport.request(_usage_request(start, end, group_by))
        return UsageReport.model_validate(response.json())
