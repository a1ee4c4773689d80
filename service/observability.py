"""Structured logs, Prometheus metrics and request limits for the API."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from fastapi import FastAPI, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Histogram, generate_latest
from prometheus_client.core import REGISTRY, GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError

from service.errors import PayloadTooLarge, render_error
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


class JobCollector(Collector):
    """Job counts by status and the Redis queue's depth, read at scrape time."""

    def __init__(self, redis_url: str | None) -> None:
        self.redis_url = redis_url

    def collect(self):  # type: ignore[no-untyped-def]
        from service.db import session_scope
        from service.models import Job

        jobs = GaugeMetricFamily("rft_jobs", "Jobs by status", labels=["status"])
        try:
            with session_scope() as session:
                rows = session.execute(select(Job.status, func.count()).group_by(Job.status)).all()
            for status, count in rows:
                jobs.add_metric([status], count)
        except SQLAlchemyError:
            pass  # /readyz reports the database; metrics must not fail the scrape
        yield jobs
        depth = GaugeMetricFamily("rft_queue_depth", "Messages waiting in the training queue")
        try:
            import redis

            client = redis.Redis.from_url(self.redis_url or "", socket_timeout=0.5)
            depth.add_metric([], client.llen("training"))
        except Exception:
            return
        yield depth


_collector_registered = False


def install_observability(app: FastAPI, settings: Settings) -> None:
    global _collector_registered
    if settings.redis_url and not _collector_registered:
        REGISTRY.register(JobCollector(settings.redis_url))
        _collector_registered = True

    @app.middleware("http")
    async def limit_and_measure(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        length = request.headers.get("content-length")
        multipart = request.headers.get("content-type", "").startswith("multipart/")
        limit = settings.max_upload_bytes if multipart else settings.max_request_bytes
        if length is not None and length.isdigit() and int(length) > limit:
            REQUESTS_REJECTED.labels("too_large").inc()
            return render_error(
                PayloadTooLarge(f"request body of {length} bytes exceeds the {limit}-byte limit")
            )
        started = time.perf_counter()
        response = await call_next(request)
        route = request.scope.get("route")
        REQUEST_SECONDS.labels(
            request.method, getattr(route, "path", "unmatched"), str(response.status_code)
        ).observe(time.perf_counter() - started)
        return response

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
