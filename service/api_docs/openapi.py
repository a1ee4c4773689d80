"""The OpenAPI document lists, for every operation, the errors it can answer.

Statuses every /v1 operation shares (a bad API key, an unreachable database, bad input the
schema cannot express) are added here, in one place; statuses particular to an operation
(409, 412, ...) are declared on the endpoint with service.errors.error_responses.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from fastapi import FastAPI
from pydantic.json_schema import models_json_schema

from service.errors import ErrorBody
from service.openai_compat.errors import OPENAI_ROUTE_PREFIXES, OpenAIErrorBody

ERROR_SCHEMA_REF = "#/components/schemas/ErrorBody"
OPENAI_ERROR_SCHEMA_REF = "#/components/schemas/OpenAIErrorBody"
HTTP_METHODS = frozenset({"get", "put", "post", "delete", "patch", "head", "options"})

DESCRIPTIONS = {
    400: "Input the schema cannot express: a NUL character in the URL; a JSON body holding "
    "NaN, Infinity, a NUL character or a lone surrogate, nested deeper than 64 levels, or an "
    "integer of more than 4300 digits; a malformed cursor; or refused content (a dataset "
    "file, reward code) with the reason.",
    401: "Missing or invalid API key.",
    404: "No such resource for this API key's tenant.",
    409: "The job's state does not allow this (e.g. resuming a job that is neither paused nor "
    "pausing).",
    412: "If-Match names a config version that is no longer current.",
    413: "The body exceeds RFT_MAX_REQUEST_BYTES (JSON) or RFT_MAX_UPLOAD_BYTES (uploads), "
    "whether or not it declared its length.",
    428: "The request needs an If-Match header.",
    503: "The database is unavailable; retry after the Retry-After header's seconds.",
}


def install_error_responses(app: FastAPI) -> None:
    """Wrap app.openapi so that the document it builds (once) lists the shared errors."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        schema = build()
        add_error_responses(schema)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def add_error_responses(schema: dict[str, Any]) -> None:
    """Idempotent: FastAPI caches the document, and this runs on each call."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components.setdefault("ErrorBody", ErrorBody.model_json_schema())
    _, openai_error = models_json_schema(
        [(OpenAIErrorBody, "serialization")], ref_template="#/components/schemas/{model}"
    )
    for name, component in openai_error["$defs"].items():
        components.setdefault(name, component)
    for path, item in schema.get("paths", {}).items():
        if not path.startswith("/v1/"):
            continue
        openai_shaped = path.startswith(OPENAI_ROUTE_PREFIXES)
        for method, operation in item.items():
            if method not in HTTP_METHODS:
                continue
            statuses = {400, 401, 503}
            if "{" in path:
                statuses.add(404)
            if "requestBody" in operation:
                statuses.add(413)
            responses = operation.setdefault("responses", {})
            for status in sorted(statuses):
                responses.setdefault(str(status), {"description": "", "content": {}})
            if openai_shaped:
                # These answer malformed bodies with 400, as OpenAI does.
                responses.pop("422", None)
            reference = OPENAI_ERROR_SCHEMA_REF if openai_shaped else ERROR_SCHEMA_REF
            for status, response in responses.items():
                if status.isdigit() and int(status) >= 400 and status != "422":
                    _describe(int(status), response, reference)


def _describe(status: int, response: dict[str, Any], reference: str = ERROR_SCHEMA_REF) -> None:
    if response.get("description") in ("", "Error", None):
        response["description"] = DESCRIPTIONS.get(status, HTTPStatus(status).phrase)
    response["content"] = {"application/json": {"schema": {"$ref": reference}}}
