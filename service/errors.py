"""One error base with a status code, rendered by one handler as {"error", "detail"}."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as SQLAlchemyTimeoutError

logger = logging.getLogger(__name__)


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


class InvalidDataset(BadRequest):
    pass


class InvalidRewardFunction(BadRequest):
    pass


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
