"""The API's door: RequestGate caps requests in flight (service.observability), and a request
that cannot get a pooled database connection in time is a 503 with Retry-After, in our shape
and in OpenAI's (service.errors, service.openai_compat.errors), never a hang or a 500."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from starlette.types import Receive, Scope, Send

from service.observability import REQUEST_SECONDS, RequestGate

CAP = 3


class SlowApp:
    """An ASGI app whose /v1/jobs/<id> requests wait until released, counting how many are
    inside at once; other paths answer at once."""

    def __init__(self) -> None:
        self.inside = 0
        self.peak = 0
        self.entered = 0
        self.release = asyncio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"].startswith("/v1/jobs/") and not scope["path"].endswith("/events"):
            self.inside += 1
            self.entered += 1
            self.peak = max(self.peak, self.inside)
            try:
                await self.release.wait()
            finally:
                self.inside -= 1
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def run_in_own_loop(scenario: Coroutine[Any, Any, None]) -> None:
    """Run ``scenario`` on a fresh event loop in a thread of its own: an earlier test in the
    same process (the dashboard's browser driver) may leave this thread's loop running."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as thread:
        thread.submit(asyncio.run, scenario).result()


async def until(condition: object, timeout_s: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():  # type: ignore[operator]
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.01)


def test_requests_beyond_the_cap_wait_at_the_door_and_all_are_served() -> None:
    async def scenario() -> None:
        inner = SlowApp()
        gate = RequestGate(inner, max_in_flight=CAP)
        transport = httpx.ASGITransport(app=gate)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            waiting = [asyncio.create_task(client.get(f"/v1/jobs/{i}")) for i in range(CAP * 3)]
            await until(lambda: inner.entered >= CAP)
            await asyncio.sleep(0.2)  # time for more to get in, were the cap not kept
            assert inner.inside == CAP

            # Event streams and paths outside /v1/ pass the full door: they hold no connection
            # while they wait, and /healthz must answer during a burst.
            for path in ("/v1/jobs/x/events", "/healthz"):
                answered = await asyncio.wait_for(client.get(path), timeout=5)
                assert answered.status_code == 200

            inner.release.set()
            responses = await asyncio.gather(*waiting)
        assert [r.status_code for r in responses] == [200] * (CAP * 3)
        assert inner.peak == CAP and inner.entered == CAP * 3

    run_in_own_loop(scenario())


def test_the_gate_times_every_request_by_route_and_status() -> None:
    async def scenario() -> None:
        inner = SlowApp()
        inner.release.set()
        gate = RequestGate(inner, max_in_flight=1)
        before = REQUEST_SECONDS.labels("GET", "unmatched", "200")._sum.get()  # type: ignore[attr-defined]
        transport = httpx.ASGITransport(app=gate)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            assert (await client.get("/v1/jobs/1")).status_code == 200
        after = REQUEST_SECONDS.labels("GET", "unmatched", "200")._sum.get()  # type: ignore[attr-defined]
        assert after > before

    run_in_own_loop(scenario())


@pytest.fixture
def exhausted_pool_app(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[TestClient, object]]:
    """The real app on a one-connection pool whose only connection is taken."""
    from service.app import create_app
    from service.db import get_engine, get_sessionmaker
    from service.settings import get_settings

    monkeypatch.setenv("RFT_DATABASE_URL", f"sqlite:///{tmp_path / 'pool.db'}")
    monkeypatch.setenv("RFT_DB_POOL_SIZE", "1")
    monkeypatch.setenv("RFT_DB_MAX_OVERFLOW", "0")
    monkeypatch.setenv("RFT_DB_POOL_TIMEOUT_S", "0.2")
    monkeypatch.setenv("RFT_STATE_DIR", str(tmp_path / "state"))
    for cached in (get_settings, get_engine, get_sessionmaker):
        cached.cache_clear()
    held = get_engine().connect()
    try:
        yield TestClient(create_app(), raise_server_exceptions=False), held
    finally:
        held.close()
        get_engine().dispose()
        for cached in (get_settings, get_engine, get_sessionmaker):
            cached.cache_clear()


def test_an_exhausted_connection_pool_is_a_503_with_retry_after(
    exhausted_pool_app: tuple[TestClient, object],
) -> None:
    client, _ = exhausted_pool_app
    headers = {"Authorization": "Bearer rft_" + "0" * 32}
    response = client.get("/v1/jobs", headers=headers)
    assert response.status_code == 503, response.text
    assert response.headers["Retry-After"] == "2"
    assert response.json() == {
        "error": "ServiceUnavailable",
        "detail": "the database is unavailable; retry shortly",
    }

    # The OpenAI-compatible routes say the same in OpenAI's shape.
    openai = client.get("/v1/files", headers=headers)
    assert openai.status_code == 503, openai.text
    assert openai.headers["Retry-After"] == "2"
    error = openai.json()["error"]
    assert isinstance(error, dict), openai.text  # not our own {"error", "detail"}
    assert error["code"] == "ServiceUnavailable" and error["type"] == "server_error"
    assert "retry shortly" in error["message"]
