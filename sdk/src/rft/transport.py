"""HTTP plumbing shared by Client and AsyncClient: headers, retries, error mapping.

Retry policy (why each case is safe):
- a connection that could not be opened, or a 429, never reached the application: any
  request may be sent again;
- a dropped connection or a 5xx may hide a request the server already carried out, so those
  are retried only for GET, or for a POST carrying an Idempotency-Key (the server answers a
  repeated key with the first result instead of acting twice).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from rft._version import __version__
from rft.errors import APIConnectionError, APITimeoutError, RFTError, error_from_response

DEFAULT_BASE_URL = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MAX_RETRIES = 2
INITIAL_RETRY_DELAY_S = 0.5
MAX_RETRY_DELAY_S = 8.0
# A server asking for a longer pause than this is better answered with an error.
MAX_RETRY_AFTER_S = 60.0
# A stream's server sends a keep-alive at least every 15 s: a shorter read timeout would only
# break healthy, quiet streams, so streams wait at least this long for the next bytes.
STREAM_MIN_READ_TIMEOUT_S = 45.0


@dataclass
class RequestOptions:
    method: str
    path: str
    params: dict[str, Any] | None = None
    json: Any = None
    files: dict[str, Any] | None = None
    data: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def replay_safe(self) -> bool:
        """True when sending this request twice cannot act twice on the server."""
        return self.method == "GET" or "Idempotency-Key" in self.headers


def new_idempotency_key() -> str:
    return f"rft-sdk-{uuid.uuid4()}"


def resolve_settings(api_key: str | None, base_url: str | None) -> tuple[str, str]:
    api_key = api_key or os.environ.get("RFT_API_KEY")
    if not api_key:
        raise RFTError("no API key: pass api_key=... or set the RFT_API_KEY environment variable")
    base_url = base_url or os.environ.get("RFT_BASE_URL") or DEFAULT_BASE_URL
    return api_key, base_url.rstrip("/")


def default_headers(api_key: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {api_key}",
        "User-Agent": f"rft-sdk/{__version__}",
        "Accept": "application/json",
    }


def _without_none(params: dict[str, Any] | None) -> dict[str, Any] | None:
    if params is None:
        return None
    return {key: value for key, value in params.items() if value is not None}


def _retry_after_seconds(response: httpx.Response | None) -> float | None:
    if response is None:
        return None
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None  # An HTTP date: rare enough to fall back to our own backoff.
    return seconds if 0 <= seconds <= MAX_RETRY_AFTER_S else None


def retry_delay(attempt: int, response: httpx.Response | None) -> float:
    """Seconds to wait before retry number ``attempt`` (0-based)."""
    asked = _retry_after_seconds(response)
    if asked is not None:
        return asked
    backoff = min(INITIAL_RETRY_DELAY_S * 2**attempt, MAX_RETRY_DELAY_S)
    # Jitter keeps many clients that failed together from retrying together.
    return backoff * (1 - 0.25 * random.random())


def should_retry_response(options: RequestOptions, response: httpx.Response) -> bool:
    status = response.status_code
    if status == 429:
        return True
    return status >= 500 and options.replay_safe


def should_retry_error(options: RequestOptions, error: httpx.TransportError) -> bool:
    never_sent = isinstance(error, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)
    return never_sent or options.replay_safe


def connection_error(error: httpx.TransportError) -> APIConnectionError:
    if isinstance(error, httpx.TimeoutException):
        return APITimeoutError(f"request timed out: {error}", request=error.request)
    return APIConnectionError(f"connection error: {error!r}", request=error.request)


def stream_timeout(timeout: httpx.Timeout) -> httpx.Timeout:
    """The client's timeouts, with the read timeout raised to outlast the keep-alives."""
    read = None if timeout.read is None else max(timeout.read, STREAM_MIN_READ_TIMEOUT_S)
    return httpx.Timeout(connect=timeout.connect, read=read, write=timeout.write, pool=timeout.pool)


class StreamedResponse:
    """An open 2xx response whose body is read as it arrives."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response

    def iter_bytes(self) -> Iterator[bytes]:
        """The body's bytes; a broken connection or a read timeout raises APIConnectionError."""
        try:
            yield from self.response.iter_bytes()
        except httpx.TransportError as error:
            raise connection_error(error) from error


class AsyncStreamedResponse:
    def __init__(self, response: httpx.Response) -> None:
        self.response = response

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self.response.aiter_bytes():
                yield chunk
        except httpx.TransportError as error:
            raise connection_error(error) from error


class SyncTransport:
    def __init__(
        self,
        *,
        api_key: str,
        base_url: str,
        timeout: float,
        max_retries: int,
        http_client: httpx.Client | None,
    ) -> None:
        self.base_url = base_url
        self.max_retries = max_retries
        self._owns_http_client = http_client is None
        self._http = http_client or httpx.Client(timeout=timeout)
        self._headers = default_headers(api_key)

    def close(self) -> None:
        if self._owns_http_client:
            self._http.close()

    def request(self, options: RequestOptions) -> httpx.Response:
        attempt = 0
        while True:
            try:
                response = self._http.request(
                    options.method,
                    self.base_url + options.path,
                    params=_without_none(options.params),
                    json=options.json,
                    files=options.files,
                    data=options.data,
                    headers={**self._headers, **options.headers},
                )
            except httpx.TransportError as error:
                if attempt < self.max_retries and should_retry_error(options, error):
                    time.sleep(retry_delay(attempt, None))
                    attempt += 1
                    continue
                raise connection_error(error) from error
            if response.is_success:
                return response
            if attempt < self.max_retries and should_retry_response(options, response):
                time.sleep(retry_delay(attempt, response))
                attempt += 1
                continue
            raise error_from_response(response)

    @contextmanager
    def stream(self, options: RequestOptions) -> Iterator[StreamedResponse]:
        """Open ``options`` as a streamed response; closed when the ``with`` block ends.

        One attempt, never retried here: a stream's caller resumes from its own cursor, which
        a blind resend would not. Failures raise the same errors as :meth:`request`.
        """
        request = self._http.build_request(
            options.method,
            self.base_url + options.path,
            params=_without_none(options.params),
            json=options.json,
            headers={**self._headers, **options.headers},
            timeout=stream_timeout(self._http.timeout),
        )
        try:
            response = self._http.send(request, stream=True)
        except httpx.TransportError as error:
            raise connection_error(error) from error
        try:
            if not response.is_success:
                try:
                    response.read()
                except httpx.TransportError as error:
                    raise connection_error(error) from error
                raise error_from_response(response)
            yield StreamedResponse(response)
        finally:
            response.close()


class AsyncTransport:
    def __init__(
        self,
        *,
        api_key: str,
        base_url: str,
        timeout: float,
        max_retries: int,
        http_client: httpx.AsyncClient | None,
    ) -> None:
        self.base_url = base_url
        self.max_retries = max_retries
        self._owns_http_client = http_client is None
        self._http = http_client or httpx.AsyncClient(timeout=timeout)
        self._headers = default_headers(api_key)

    async def close(self) -> None:
        if self._owns_http_client:
            await self._http.aclose()

    async def request(self, options: RequestOptions) -> httpx.Response:
        attempt = 0
        while True:
            try:
                response = await self._http.request(
                    options.method,
                    self.base_url + options.path,
                    params=_without_none(options.params),
                    json=options.json,
                    files=options.files,
                    data=options.data,
                    headers={**self._headers, **options.headers},
                )
            except httpx.TransportError as error:
                if attempt < self.max_retries and should_retry_error(options, error):
                    await asyncio.sleep(retry_delay(attempt, None))
                    attempt += 1
                    continue
                raise connection_error(error) from error
            if response.is_success:
                return response
            if attempt < self.max_retries and should_retry_response(options, response):
                await asyncio.sleep(retry_delay(attempt, response))
                attempt += 1
                continue
            raise error_from_response(response)

    @asynccontextmanager
    async def stream(self, options: RequestOptions) -> AsyncIterator[AsyncStreamedResponse]:
        """Open ``options`` as a streamed response; see :meth:`SyncTransport.stream`."""
        request = self._http.build_request(
            options.method,
            self.base_url + options.path,
            params=_without_none(options.params),
            json=options.json,
            headers={**self._headers, **options.headers},
            timeout=stream_timeout(self._http.timeout),
        )
        try:
            response = await self._http.send(request, stream=True)
        except httpx.TransportError as error:
            raise connection_error(error) from error
        try:
            if not response.is_success:
                try:
                    await response.aread()
                except httpx.TransportError as error:
                    raise connection_error(error) from error
                raise error_from_response(response)
            yield AsyncStreamedResponse(response)
        finally:
            await response.aclose()
