"""Errors on the OpenAI-compatible routes in OpenAI's shape,
``{"error": {"message", "type", "param", "code"}}``, which the openai package reads into its
exceptions. The rest of the API keeps our own ``{"error", "detail"}``."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as SQLAlchemyTimeoutError

from service.errors import RFTError

# The routes that answer errors in OpenAI's shape (the OpenAPI document says so too).
OPENAI_ROUTE_PREFIXES = ("/v1/files", "/v1/fine_tuning/")


class OpenAIErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class OpenAIErrorBody(BaseModel):
    """Errors of the OpenAI-compatible routes, which the openai package reads."""

    error: OpenAIErrorDetail


ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "invalid_request_error",
    404: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


def openai_error(
    status: int,
    message: str,
    *,
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(
        status_code=status,
        content={
            "error": {
                "message": message,
                "type": ERROR_TYPES.get(status, "server_error"),
                "param": param,
                "code": code,
            }
        },
        headers=headers,
    )


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    first = exc.errors()[0] if exc.errors() else {}
    location = [str(part) for part in first.get("loc", ()) if part not in ("body", "query")]
    param = ".".join(location) or None
    message = str(first.get("msg", "invalid request"))
    return (f"{param}: {message}" if param else message), param


class OpenAIErrorRoute(APIRoute):
    """A route whose refusals (ours and FastAPI's validation) answer in OpenAI's shape."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                return await handler(request)
            except RFTError as exc:
                return openai_error(
                    exc.status_code,
                    exc.detail,
                    param=getattr(exc, "param", None),
                    code=type(exc).__name__,
                    headers=exc.headers,
                )
            except RequestValidationError as exc:
                message, param = _validation_message(exc)
                # OpenAI answers malformed bodies with 400, not 422.
                return openai_error(400, message, param=param, code="invalid_request")
            except (OperationalError, SQLAlchemyTimeoutError):
                return openai_error(
                    503,
                    "the database is unavailable; retry shortly",
                    code="ServiceUnavailable",
                    headers={"Retry-After": "2"},
                )

        return handle
