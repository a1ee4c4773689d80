"""The API with its worker-thread pool no larger than its database connection pool.

FastAPI runs sync endpoints and sync ``yield`` dependencies (the request's session) in anyio's
thread pool, 40 threads by default; SQLAlchemy's pool holds 10 + 20 overflow connections. Under
200 concurrent requests 40 threads can each wait for a connection while the requests holding
all 30 connections wait for a thread to run their session's exit (commit, close): nobody
moves until the pool's 30 s timeout. bench_reads.py serves this app next to the stock one to
show the effect of capping the threads below the pool size; the lasting fix belongs in
service/ (see bench/README.md).

Serve: uvicorn bench.capped_app:app
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio.to_thread

from service.app import app as _service_app

# Below the connection pool's 30: a thread never waits for a connection forever.
THREADS = 25


@asynccontextmanager
async def _capped(app: object) -> AsyncIterator[None]:
    anyio.to_thread.current_default_thread_limiter().total_tokens = THREADS
    async with _original_lifespan(app):
        yield


_original_lifespan = _service_app.router.lifespan_context
_service_app.router.lifespan_context = _capped
app = _service_app
