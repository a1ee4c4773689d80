"""The API with at most 25 requests in flight, the rest waiting in the event loop.

Why: under 200 concurrent requests the stock API stalls for the connection pool's 30 s
timeout. A request checks out a database connection in its first sync step (the API key
lookup) and keeps it until its session closes, several thread-pool hops later; between hops
it holds no thread. So 30 requests can hold all 30 connections while waiting for a thread,
and all 40 threads are taken by other requests waiting for a connection: nobody moves
(the machine sits idle) until checkouts time out. Capping threads does not help (connections
are held across hops); capping requests in flight below the pool size does. bench_reads.py
serves this next to the stock app; the lasting fix belongs in service/ (see bench/README.md).

Serve: uvicorn bench.capped_app:app
"""

from __future__ import annotations

import asyncio
from typing import Any

from service.app import app as service_app

# Below the pool's 10 + 20 connections, so a request in flight always gets one.
IN_FLIGHT = 25


class InFlightLimit:
    """Pure ASGI middleware: at most ``limit`` HTTP requests past this point at once."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app = app
        self.limit = limit
        self._semaphore: asyncio.Semaphore | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self._semaphore is None:  # created in the server's event loop
            self._semaphore = asyncio.Semaphore(self.limit)
        async with self._semaphore:
            await self.app(scope, receive, send)


app = InFlightLimit(service_app, IN_FLIGHT)
