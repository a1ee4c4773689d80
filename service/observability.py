"""Structured logs, Prometheus metrics and the in-flight cap of the API."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import FastAPI, Header, Response
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Histogram, generate_latest
from prometheus_client.core import REGISTRY, GaugeMetricFamily
from prometheus_client.registry import Collector
from pydantic import SecretStr
from sqlalchemy.exc import SQLAlchemyError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import Forbidden, Unauthorized
from service.settings import Settings

REQUEST_SECONDS = Histogram(
    "rft_http_request_duration_seconds",
    "API request latency",
    ["method", "route", "status"],
    buckets=(0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
REQUESTS_REJECTED = Counter(
    "rft_http_requests_rejected_total", "Requests refused before routing", ["reason"]
)


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line: what log pipelines (Loki, CloudWatch, ELK) ingest as is."""

    RESERVED = set(vars(logging.makeLogRecord({})))

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in self.RESERVED and not key.startswith("_"):
                entry[key] = value if isinstance(value, int | float | str | bool) else str(value)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure_logging(log_format: str, level: int = logging.INFO) -> None:
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonLogFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # One line per HTTP request from our own clients (the demo follower) drowns the output.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("pgserver").setLevel(logging.WARNING)
    # Alembic logs its plugins and every migration at INFO; `migrate` prints its own summary.
    logging.getLogger("alembic").setLevel(logging.WARNING)


class JobCollector(Collector):
    """Job counts by status and the Redis queue's depth, read at scrape time."""

    def __init__(self, redis_url: str | None) -> None:
        self.redis_url = redis_url

    def collect(self):  # type: ignore[no-untyped-def]
        from service.db import session_scope
        from service.jobs.repository import JobRepository

        jobs = GaugeMetricFamily("rft_jobs", "Jobs by status", labels=["status"])
        try:
            with session_scope() as session:
                counts = JobRepository(session).count_by_status()
            for status, count in counts.items():
                jobs.add_metric([status], count)
        except SQLAlchemyError:
            pass  # /readyz reports the database; metrics must not fail the scrape
        yield jobs
        depth = GaugeMetricFamily(
            "rft_queue_depth", "Messages waiting in the training queues (every job size)"
        )
        try:
            import redis

            client = redis.Redis.from_url(self.redis_url or "", socket_timeout=0.5)
            # A queue per job size (devices-N, service.work_queue.queue) and the one from
            # before sizes.
            queues = [*client.scan_iter(match="devices-*", count=1000), "training"]
            depth.add_metric([], sum(client.llen(queue) for queue in queues))
        except Exception:
            return
        yield depth


class RequestGate:
    """A cap on API requests in flight, and latency metrics (plain ASGI: no per-request task
    or body buffering as with BaseHTTPMiddleware). Size limits are service.request_input's.

    The cap keeps requests beyond what the database pool can serve waiting here, holding
    nothing. Without it, under a burst, requests that took a pooled connection for the
    API-key check wait for a thread while requests holding threads wait for a connection,
    and the API stalls (measured: 200 clients froze it for over a minute).
    """

    def __init__(self, app: ASGIApp, *, max_in_flight: int) -> None:
        self.app = app
        self.max_in_flight = max_in_flight
        self._slots: asyncio.Semaphore | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500

        async def send_and_note_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        started = time.perf_counter()
        path: str = scope["path"]
        # Event streams last as long as a job and hold no connection while they wait.
        gated = path.startswith("/v1/") and not path.endswith("/events")
        try:
            if gated:
                if self._slots is None:
                    self._slots = asyncio.Semaphore(self.max_in_flight)
                async with self._slots:
                    await self.app(scope, receive, send_and_note_status)
            else:
                await self.app(scope, receive, send_and_note_status)
        finally:
            route = scope.get("route")
            REQUEST_SECONDS.labels(
                scope["method"], getattr(route, "path", "unmatched"), str(status)
            ).observe(time.perf_counter() - started)


_collector_registered = False


def install_observability(app: FastAPI, settings: Settings) -> None:
    global _collector_registered
    if settings.redis_url and not _collector_registered:
        REGISTRY.register(JobCollector(settings.redis_url))
        _collector_registered = True

    app.add_middleware(
        RequestGate,
        max_in_flight=settings.max_requests_in_flight,
    )

    @app.get("/metrics", include_in_schema=False)
    def metrics(authorization: Annotated[str | None, Header()] = None) -> Response:
        check_metrics_token(settings.metrics_token, authorization)
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


def check_metrics_token(token: SecretStr | None, authorization: str | None) -> None:
    """/metrics counts every tenant's jobs and requests: only the scraper may read it.

    Tenant API keys are not accepted: a tenant must not learn of other tenants' activity.
    """
    # An empty token (RFT_METRICS_TOKEN= in a compose file) must not match an empty bearer.
    if token is None or not token.get_secret_value():
        raise Forbidden(
            "metrics are off: set RFT_METRICS_TOKEN on the server and scrape /metrics with "
            "'Authorization: Bearer <token>'"
        )
    scheme, _, given = (authorization or "").partition(" ")
    expected = token.get_secret_value().encode()
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected):
        raise Unauthorized("/metrics needs 'Authorization: Bearer <RFT_METRICS_TOKEN>'")
