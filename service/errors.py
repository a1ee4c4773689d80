"""One error base with a status code, rendered by one handler as {"error", "detail"}."""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as SQLAlchemyTimeoutError

from sandbox.isolation import SandboxUnavailableError

logger = logging.getLogger(__name__)

# A validation error repeats the input it refused; longer inputs are cut to this many
# characters, so a refused 1 MB reward source does not come back in the 422.
MAX_ECHOED_INPUT_CHARS = 200


class ErrorBody(BaseModel):
    """Every error response except 422, which lists pydantic's validation problems."""

    error: str = Field(description="The error's kind, e.g. NotFound or InvalidRewardFunction.")
    detail: str = Field(description="What is wrong, and what to do about it.")


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for an endpoint that can answer these statuses (the common ones, such
    as 401 and 503, are added to every operation by service.api_docs.openapi)."""
    return {status: {"model": ErrorBody, "description": "Error"} for status in statuses}


class RFTError(Exception):
    status_code = 500

    def __init__(self, detail: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.headers = headers


class BadRequest(RFTError):
    status_code = 400


class Unauthorized(RFTError):
    status_code = 401

    def __init__(self, detail: str = "missing or invalid API key") -> None:
        super().__init__(detail, headers={"WWW-Authenticate": "Bearer"})


class Forbidden(RFTError):
    status_code = 403


class NotFound(RFTError):
    status_code = 404


class Conflict(RFTError):
    status_code = 409


class PreconditionFailed(RFTError):
    status_code = 412


class PreconditionRequired(RFTError):
    status_code = 428


class PayloadTooLarge(RFTError):
    status_code = 413


class ServiceUnavailable(RFTError):
    status_code = 503


class SandboxUnavailable(ServiceUnavailable):
    pass


class InvalidDataset(BadRequest):
    pass


class InvalidRewardFunction(BadRequest):
    pass


class InvalidAgentCode(BadRequest):
    """A tool or environment that cannot be loaded; the detail names it."""


class IllegalTransition(Conflict):
    pass


def render_error(exc: RFTError) -> JSONResponse:
    return JSONResponse(
        status_code=exc.status_code,
        content={"error": type(exc).__name__, "detail": exc.detail},
        headers=exc.headers,
    )


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RFTError)
    async def _render(_: Request, exc: RFTError) -> JSONResponse:
        return render_error(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation_failed(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{**error, "input": echoable_input(error.get("input"))} for error in exc.errors()]
        return JSONResponse(status_code=422, content={"detail": jsonable_encoder(errors)})

    @app.exception_handler(SandboxUnavailableError)
    async def _sandbox_unavailable(_: Request, exc: SandboxUnavailableError) -> JSONResponse:
        # The server, not the request, is at fault (bubblewrap missing, no sandbox uid): the
        # operator must act, and the client is told what is missing rather than a bare 500.
        logger.error("the sandbox for user code cannot start: %s", exc)
        return render_error(
            SandboxUnavailable(
                f"this server cannot start the sandbox that runs user code: {exc}. "
                "The request was not carried out; an operator must fix the server's sandbox."
            )
        )

    @app.exception_handler(OperationalError)
    @app.exception_handler(SQLAlchemyTimeoutError)
    async def _database_unavailable(_: Request, exc: Exception) -> JSONResponse:
        # A lost connection, a restarting server or an exhausted pool is transient: tell
        # clients to retry.
        logger.warning("database unavailable: %s", exc)
        return render_error(
            ServiceUnavailable(
                "the database is unavailable; retry shortly", headers={"Retry-After": "2"}
            )
        )


def echoable_input(value: Any) -> Any:
    """The refused input as a validation error shows it: short values as they came, longer
    ones (or ones JSON cannot carry) as a cut preview that says how long they were."""
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False, default=str)
        text.encode()
    except (ValueError, TypeError):  # NaN, a lone surrogate, an unserialisable object
        text = None
    if text is not None and len(text) <= MAX_ECHOED_INPUT_CHARS:
        return json.loads(text)
    shown = (value if isinstance(value, str) else text or repr(value)).encode(errors="replace")
    preview = shown.decode()
    if len(preview) <= MAX_ECHOED_INPUT_CHARS:
        return preview
    return f"{preview[:MAX_ECHOED_INPUT_CHARS]}... ({len(preview)} characters, not repeated)"
