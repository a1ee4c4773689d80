"""An HTTP tool as requests declare it (OpenAI agent RFT's shape): an endpoint the user hosts,
which the model calls like any tool. sandbox/http_tools.py turns it into the tool's code."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sandbox.http_tools import (
    DEFAULT_ENDPOINT_TIMEOUT_S,
    DEFAULT_MAX_RETRIES,
    MAX_RETRIES,
    HttpTool,
)
from service.reward_functions.schemas import FUNCTION_NAME

MAX_DESCRIPTION_CHARS = 4000
MAX_HEADERS = 32


class HttpToolCreate(BaseModel):
    """A tool that is an HTTPS endpoint: each call POSTs the model's arguments (a JSON
    object) to ``url`` and shows the model the endpoint's JSON answer."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["http"] = Field("http", description="Always `http`: what makes it an HTTP tool.")
    name: str = Field(pattern=FUNCTION_NAME.pattern, description="The name the model calls.")
    description: str = Field(
        "", max_length=MAX_DESCRIPTION_CHARS, description="What the model is told the tool does."
    )
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="JSON schema (type object) of the arguments: each property's type "
        "(string, integer, number, boolean, array, object, optionally with null) or enum, "
        "and description; `required` lists those the model must give.",
    )
    url: str = Field(
        max_length=2000,
        description="https:// URL the calls are POSTed to (http:// only to hosts the "
        "operator allows). Its host is the only one the job's sandbox may reach for it.",
    )
    headers: dict[str, str] = Field(
        default_factory=dict,
        max_length=MAX_HEADERS,
        description="Sent with every call; a value may say `{{secrets.NAME}}`, replaced by "
        "the job's secret NAME in the sandbox.",
    )
    timeout_s: float = Field(
        DEFAULT_ENDPOINT_TIMEOUT_S,
        description="Wall limit of one try (the tool call's "
        "own limit, tool_timeout_s, bounds all tries together).",
    )
    max_retries: int = Field(
        DEFAULT_MAX_RETRIES,
        description=f"Tries again after a 5xx or a failed connection, at most this many "
        f"times (0 to {MAX_RETRIES}), waiting 0.5 s, then 1 s, 2 s ...",
    )

    def declaration(self) -> HttpTool:
        return HttpTool(
            name=self.name,
            url=self.url,
            description=self.description,
            parameters=self.parameters,
            headers=self.headers,
            timeout_s=self.timeout_s,
            max_retries=self.max_retries,
        )
