"""Every error the client raises: one base, one class per HTTP status the server uses."""

from __future__ import annotations

from typing import Any

import httpx


class RFTError(Exception):
    """Base of every error raised by the rft client."""


class RewardFunctionSourceError(RFTError, ValueError):
    """A Python callable cannot be turned into source the server can run."""


class AgentSourceError(RFTError, ValueError):
    """A tool or environment cannot be turned into source the server can run (a lambda, a
    closure, a file without the named function or class, two tools of one name)."""


class ExportFailedError(RFTError):
    """An export (a merged model, a hub push) ended failed; ``export.failure_reason`` says why."""

    def __init__(self, export: Any) -> None:
        super().__init__(
            f"export {export.id} of job {export.job_id} failed: {export.failure_reason}"
        )
        self.export = export


class APIConnectionError(RFTError):
    """The server could not be reached, or the connection broke before a response arrived."""

    def __init__(self, message: str, *, request: httpx.Request | None = None) -> None:
        super().__init__(message)
        self.request = request


class APITimeoutError(APIConnectionError):
    """The request took longer than the client's timeout."""


class APIStatusError(RFTError):
    """The server answered with a 4xx or 5xx status.

    ``error`` is the server's error class name (e.g. ``"InvalidRewardFunction"``) and
    ``detail`` its message. For 422 validation errors FastAPI sends a list of problems: they
    are kept in ``errors`` and summarised in ``detail``.
    """

    status_code: int

    def __init__(
        self,
        *,
        status_code: int,
        error: str | None,
        detail: str,
        response: httpx.Response,
        body: Any = None,
        errors: list[dict[str, Any]] | None = None,
    ) -> None:
        label = f"{status_code} {error}" if error else str(status_code)
        super().__init__(f"{label}: {detail}")
        self.status_code = status_code
        self.error = error
        self.detail = detail
        self.response = response
        self.body = body
        self.errors = errors or []


class BadRequestError(APIStatusError):
    pass


class AuthenticationError(APIStatusError):
    pass


class PermissionDeniedError(APIStatusError):
    pass


class NotFoundError(APIStatusError):
    pass


class ConflictError(APIStatusError):
    pass


class PreconditionFailedError(APIStatusError):
    """The config changed since it was read (the If-Match version is stale)."""


class PreconditionRequiredError(APIStatusError):
    """The request must say which version it changes (If-Match): read the config first."""


class PayloadTooLargeError(APIStatusError):
    pass


class UnprocessableEntityError(APIStatusError):
    pass


class RateLimitError(APIStatusError):
    pass


class InternalServerError(APIStatusError):
    pass


ERROR_CLASS_BY_STATUS: dict[int, type[APIStatusError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    412: PreconditionFailedError,
    413: PayloadTooLargeError,
    422: UnprocessableEntityError,
    428: PreconditionRequiredError,
    429: RateLimitError,
}


def _describe_validation_errors(errors: list[dict[str, Any]]) -> str:
    parts = []
    for problem in errors:
        location = ".".join(str(part) for part in problem.get("loc", ()) if part != "body")
        message = problem.get("msg", "invalid")
        parts.append(f"{location}: {message}" if location else str(message))
    return "; ".join(parts) or "invalid request"


def error_from_response(response: httpx.Response) -> APIStatusError:
    """Build the exception for a non-2xx response, reading the server's error envelope."""
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    error_name: str | None = None
    validation_errors: list[dict[str, Any]] | None = None
    if isinstance(body, dict):
        error_name = body.get("error") if isinstance(body.get("error"), str) else None
        raw_detail = body.get("detail")
        if isinstance(raw_detail, list):
            validation_errors = [item for item in raw_detail if isinstance(item, dict)]
            detail = _describe_validation_errors(validation_errors)
        else:
            detail = str(raw_detail) if raw_detail is not None else response.text
    else:
        detail = str(body) or response.reason_phrase
    status = response.status_code
    error_class = ERROR_CLASS_BY_STATUS.get(status)
    if error_class is None:
        error_class = InternalServerError if status >= 500 else APIStatusError
    return error_class(
        status_code=status,
        error=error_name,
        detail=detail,
        response=response,
        body=body,
        errors=validation_errors,
    )
