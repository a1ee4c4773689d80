"""Calls to a user's own HTTP(S) endpoint from inside the sandbox: an HTTP tool's call, an
endpoint grader's score. Standard library only, on purpose: this file's source is copied
verbatim into the code such a tool or grader becomes (sandbox/http_tools.py,
service/openai_compat/graders/compile.py), which runs in the sandbox where none of our
packages is importable. The request leaves through the sandbox's egress proxy (HTTP_PROXY /
HTTPS_PROXY are set there), restricted to the job's endpoint hosts.

One call is a POST of a JSON body. An answer of 5xx or a connection that fails is tried again
(at most ``max_retries`` more times, waiting ``backoff_s`` doubled each time); a 4xx, a
timeout or an answer that is not JSON is not. What fails raises EndpointError with a ``kind``
the agent sandbox records as the tool call's error kind: ``timeout``, ``http_status``,
``malformed_response`` or ``connection``.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
import urllib.error
import urllib.request
from typing import Any, Literal  # noqa: F401  (Literal: generated tools' hints)

ENDPOINT_ERROR_KINDS = ("timeout", "http_status", "malformed_response", "connection")
MAX_ENDPOINT_ANSWER_BYTES = 1 << 20
MAX_BACKOFF_S = 5.0
SECRET_REFERENCE = re.compile(r"\{\{\s*secrets\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


class EndpointError(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        # What the agent child reads to record the call's error kind (sandbox/child/agent_steps.py).
        self.rft_tool_error_kind = kind


def endpoint_headers(headers: dict[str, str]) -> dict[str, str]:
    """The headers with each ``{{secrets.NAME}}`` replaced by the job's secret of that name
    (the sandbox's environment holds the job's secrets)."""

    def secret(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            raise EndpointError("connection", f"the job has no secret named {name!r}")
        return os.environ[name]

    return {key: SECRET_REFERENCE.sub(secret, value) for key, value in headers.items()}


def _is_timeout(error: BaseException) -> bool:
    reason = getattr(error, "reason", None)
    return isinstance(error, TimeoutError | socket.timeout) or isinstance(
        reason, TimeoutError | socket.timeout
    )


def post_to_endpoint(
    url: str,
    body: Any,
    *,
    headers: dict[str, str],
    timeout_s: float,
    max_retries: int,
    backoff_s: float,
) -> Any:
    """The endpoint's JSON answer to ``body``; EndpointError when there is none."""
    data = json.dumps(body).encode()
    sent_headers = {
        "Content-Type": "application/json",
        "Accept": "application/json",
        **endpoint_headers(headers),
    }
    attempt = 0
    while True:
        request = urllib.request.Request(url, data=data, headers=sent_headers, method="POST")
        problem: EndpointError
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                raw = response.read(MAX_ENDPOINT_ANSWER_BYTES + 1)
        except urllib.error.HTTPError as error:
            status = error.code
            detail = error.read(300).decode("utf-8", "replace").strip()
            message = f"{url} answered HTTP {status}" + (f": {detail}" if detail else "")
            if error.headers.get("X-Rft-Egress") == "refused":
                raise EndpointError("connection", message) from None
            if status < 500:
                raise EndpointError("http_status", message) from None
            problem = EndpointError("http_status", message)
        except (urllib.error.URLError, OSError, ValueError) as error:
            if _is_timeout(error):
                raise EndpointError(
                    "timeout", f"{url} did not answer within {timeout_s:g} s"
                ) from None
            reason = getattr(error, "reason", error)
            problem = EndpointError("connection", f"cannot reach {url}: {reason}")
        else:
            if len(raw) > MAX_ENDPOINT_ANSWER_BYTES:
                raise EndpointError(
                    "malformed_response",
                    f"{url} answered more than {MAX_ENDPOINT_ANSWER_BYTES} bytes",
                )
            try:
                return json.loads(raw)
            except ValueError:
                shown = raw[:200].decode("utf-8", "replace")
                raise EndpointError(
                    "malformed_response", f"{url} answered with no JSON: {shown!r}"
                ) from None
        if attempt >= max_retries:
            if attempt:
                raise EndpointError(problem.kind, f"{problem} (after {attempt + 1} tries)")
            raise problem
        time.sleep(min(MAX_BACKOFF_S, backoff_s * 2**attempt))
        attempt += 1


HTTP_TOOL_BACKOFF_S = 0.5


def call_http_tool(tool: dict[str, Any], arguments: dict[str, Any]) -> Any:
    """An HTTP tool's call: the model's arguments (those it left out are not sent) as the
    body, the endpoint's JSON answer as the result the model is shown."""
    return post_to_endpoint(
        tool["url"],
        {name: value for name, value in arguments.items() if value is not None},
        headers=tool.get("headers") or {},
        timeout_s=float(tool["timeout_s"]),
        max_retries=int(tool["max_retries"]),
        backoff_s=HTTP_TOOL_BACKOFF_S,
    )
