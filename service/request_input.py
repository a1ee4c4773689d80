"""Refuses, before any endpoint runs, requests whose input no endpoint can handle.

- A body over its limit is a 413 naming the limit, whether the client sent Content-Length or
  streamed the body in chunks without one (the byte count is checked as the body arrives).
- A NUL character in the URL is a 400: Postgres text cannot hold one, so any id, cursor or
  filter carrying it used to fail inside a query.
- A JSON body must be strict JSON that we can store (see service.json_input): NaN, Infinity,
  NUL characters, lone surrogates, very deep nesting and huge integers are a 400 that names
  the place, instead of a 500 from Postgres or the response encoder.

Plain ASGI, as RequestGate: a JSON body is read here once (bounded by its limit), checked,
and handed on; an upload is counted as it streams, never buffered here.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import BadRequest, PayloadTooLarge, RFTError, render_error
from service.json_input import UnacceptableJson, loads_strict
from service.observability import REQUESTS_REJECTED
from service.openai_compat.errors import OPENAI_ROUTE_PREFIXES, openai_error

# Requests that never carry a body: passed through untouched (the hot read paths).
BODYLESS_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class InvalidJsonBody(BadRequest):
    pass


def is_json_content_type(content_type: bytes) -> bool:
    """What FastAPI parses as JSON: no content type, application/json or application/*+json."""
    if not content_type.strip():
        return True
    media_type = content_type.split(b";", 1)[0].strip().lower()
    return media_type == b"application/json" or (
        media_type.startswith(b"application/") and media_type.endswith(b"+json")
    )


def too_large(limit: int, what: str, *, declared: int | None = None) -> PayloadTooLarge:
    size = f"of {declared} bytes " if declared is not None else ""
    return PayloadTooLarge(
        f"{what} {size}exceeds the {limit}-byte limit"
        + (" (RFT_MAX_UPLOAD_BYTES)" if what == "upload" else " (RFT_MAX_REQUEST_BYTES)")
    )


class RequestInputGuard:
    def __init__(self, app: ASGIApp, *, max_request_bytes: int, max_upload_bytes: int) -> None:
        self.app = app
        self.max_request_bytes = max_request_bytes
        self.max_upload_bytes = max_upload_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if "\x00" in scope["path"] or _has_nul(scope.get("query_string", b"")):
            nul = BadRequest("the URL holds a NUL character (%00)")
            await _refuse(scope, receive, send, nul, reason="nul_in_url")
            return
        if scope["method"] in BODYLESS_METHODS:
            await self.app(scope, receive, send)
            return

        headers = dict(scope["headers"])
        content_type = headers.get(b"content-type", b"")
        upload = content_type.lower().startswith(b"multipart/")
        limit = self.max_upload_bytes if upload else self.max_request_bytes
        what = "upload" if upload else "request body"
        length = headers.get(b"content-length", b"")
        if length.isdigit() and int(length) > limit:
            declared = too_large(limit, what, declared=int(length))
            await _refuse(scope, receive, send, declared, reason="too_large")
            return
        if is_json_content_type(content_type):
            await self._check_json_body(scope, receive, send, limit)
        else:
            await self._count_streamed_body(scope, receive, send, limit, what)

    async def _check_json_body(
        self, scope: Scope, receive: Receive, send: Send, limit: int
    ) -> None:
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                error = too_large(limit, "request body")
                await _refuse(scope, receive, send, error, reason="too_large")
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if body:
            try:
                loads_strict(body, where="request body")
            except UnacceptableJson as exc:
                invalid = InvalidJsonBody(str(exc))
                await _refuse(scope, receive, send, invalid, reason="invalid_json")
                return
            except json.JSONDecodeError:
                pass  # FastAPI answers malformed JSON with its own 422 and the position

        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _count_streamed_body(
        self, scope: Scope, receive: Receive, send: Send, limit: int, what: str
    ) -> None:
        received = 0
        refused = False

        async def counting_receive() -> Message:
            nonlocal received, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    # Answer now; the endpoint then sees a disconnect, and whatever it
                    # answers to that is dropped below.
                    refused = True
                    error = too_large(limit, what)
                    await _refuse(scope, receive, send, error, reason="too_large")
                    return {"type": "http.disconnect"}
            return message

        async def send_unless_refused(message: Message) -> None:
            if not refused:
                await send(message)

        await self.app(scope, counting_receive, send_unless_refused)


async def _refuse(
    scope: Scope, receive: Receive, send: Send, error: RFTError, *, reason: str
) -> None:
    REQUESTS_REJECTED.labels(reason).inc()
    if str(scope.get("path", "")).startswith(OPENAI_ROUTE_PREFIXES):
        response = openai_error(
            error.status_code, error.detail, code=type(error).__name__, headers=error.headers
        )
    else:
        response = render_error(error)
    await response(scope, receive, send)


def _has_nul(query_string: bytes) -> bool:
    return b"\x00" in query_string or b"%00" in query_string.lower()
