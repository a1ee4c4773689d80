"""HTTP tools in the real agent sandbox (bubblewrap, the egress proxy narrowed to the tools'
hosts), against endpoints on the tests' public side (tests/public_network.py): an answer, a
5xx tried again until it succeeds, a slow endpoint (timeout), an answer that is not JSON, a 4xx,
a host the job did not declare. Each fault is the call's typed error, never an exception."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from sandbox.agent_api import ToolCall, ToolErrorKind, ToolSpec
from sandbox.agent_host import ProcessAgentSandbox
from sandbox.child.agent_code_rules import check_loaded_code
from sandbox.http_tools import (
    HttpTool,
    HttpToolProblem,
    check_http_tool,
    declaration_in_source,
    endpoint_host,
    http_tool_source,
)
from sandbox.isolation import detect_isolation
from sandbox.settings import SandboxSettings
from tests.layers import needs_layer
from tests.public_network import PublicHost

BWRAP = detect_isolation()

LOOKUP_SCHEMA = {
    "type": "object",
    "properties": {
        "key": {"type": "string", "description": "What to look up."},
        "limit": {"type": "integer", "description": "At most this many."},
        "mode": {"enum": ["fast", "exact"]},
    },
    "required": ["key"],
}


def tool(public_side: PublicHost, name: str, path: str, **extra: object) -> HttpTool:
    values: dict[str, object] = {
        "name": name,
        "url": f"{public_side.http_url}/endpoint/{path}",
        "description": f"The {name} endpoint.",
        "parameters": LOOKUP_SCHEMA,
        "timeout_s": 2.0,
        "max_retries": 2,
    }
    return HttpTool(**(values | extra))  # type: ignore[arg-type]


@pytest.fixture
def endpoints(public_side: PublicHost) -> Iterator[tuple[PublicHost, str]]:
    """The public side, and a key of this test's own (the server counts tries per key)."""
    yield public_side, uuid.uuid4().hex[:8]


def sandbox_for(public_side: PublicHost, secrets: dict[str, str]) -> ProcessAgentSandbox:
    settings = SandboxSettings(
        isolation="bwrap",
        allow_network=True,
        egress_only_hosts=[endpoint_host(public_side.http_url)],
        call_timeout_s=30.0,
        env=secrets,
    )
    return ProcessAgentSandbox(settings)


def test_a_declaration_becomes_a_tool_the_model_is_shown_from_its_schema() -> None:
    declared = HttpTool(
        name="lookup", url="https://tools.example.com/lookup", parameters=LOOKUP_SCHEMA
    )
    source = http_tool_source(declared)
    assert declaration_in_source(source) == declared.as_json()
    assert declaration_in_source("def lookup(key: str) -> str: ...") is None
    assert "def lookup(key: str, limit: int | None = None, mode: " in source
    assert check_http_tool(declared, plain_http_hosts=frozenset()) == "tools.example.com:443"


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"url": "http://tools.example.com/x"}, "plain http"),
        ({"url": "ftp://tools.example.com/x"}, "absolute https:// URL"),
        ({"url": "https://user:pw@tools.example.com/x"}, "credentials"),
        ({"parameters": {"type": "array"}}, "type object"),
        ({"parameters": {"properties": {"x": {"type": "date"}}}}, "needs a type"),
        ({"parameters": {"properties": {"class": {"type": "string"}}}}, "Python identifier"),
        ({"parameters": {"properties": {}, "required": ["x"]}}, "not in properties"),
        ({"headers": {"Bad Name": "x"}}, "header name"),
        ({"max_retries": 9}, "max_retries"),
    ],
)
def test_a_declaration_that_cannot_be_a_tool_is_refused_naming_the_problem(
    change: dict[str, object], problem: str
) -> None:
    declared = HttpTool(
        **({"name": "lookup", "url": "https://tools.example.com/x"} | change)  # type: ignore[arg-type]
    )
    with pytest.raises(HttpToolProblem, match=problem):
        check_http_tool(declared, plain_http_hosts=frozenset())


@needs_layer(BWRAP, f"bubblewrap is not usable here: {BWRAP.reason}")
def test_http_tools_answer_retry_and_fail_with_typed_errors(
    endpoints: tuple[PublicHost, str],
) -> None:
    public_side, key = endpoints
    tools = [
        tool(
            public_side,
            "echo",
            f"echo/{key}",
            headers={"Authorization": "Bearer {{secrets.TOOL_KEY}}"},
        ),
        tool(public_side, "flaky", f"flaky/{key}"),
        tool(public_side, "flaky_once", f"flaky/{key}-once", max_retries=0),
        tool(public_side, "slow", f"slow/{key}/20", timeout_s=1.0),
        tool(public_side, "malformed", f"malformed/{key}"),
        tool(public_side, "missing", f"status/404/{key}"),
        tool(
            public_side,
            "elsewhere",
            f"echo/{key}",
            url=f"http://{public_side.host_address}:8080/endpoint/echo/{key}",
        ),
    ]
    specs = [ToolSpec(name=t.name, source=http_tool_source(t)) for t in tools]
    with sandbox_for(public_side, {"TOOL_KEY": "s3cret-value"}) as sandbox:
        loaded = sandbox.load(specs, [])
        check_loaded_code(loaded)  # the worker's rules accept the generated tools
        echo = next(signature for signature in loaded.tools if signature.name == "echo")
        assert [p.name for p in echo.parameters] == ["key", "limit", "mode"]
        assert "What to look up." in echo.doc
        calls = [
            ToolCall("echo", {"key": "a", "mode": "exact"}),
            ToolCall("flaky", {"key": "b"}),
            ToolCall("flaky_once", {"key": "c"}),
            ToolCall("slow", {"key": "d"}),
            ToolCall("malformed", {"key": "e"}),
            ToolCall("missing", {"key": "f"}),
            ToolCall("elsewhere", {"key": "g"}),
        ]
        outcomes = dict(zip([c.tool for c in calls], sandbox.call(calls), strict=True))

    assert outcomes["echo"].error is None
    # The model left `limit` out: it is not sent. The header got the job's secret.
    assert outcomes["echo"].result == {
        "arguments": {"key": "a", "mode": "exact"},
        "authorization": "Bearer s3cret-value",
    }
    assert outcomes["flaky"].error is None and outcomes["flaky"].result == {"tries": 3}
    kinds = {name: outcome.error.kind for name, outcome in outcomes.items() if outcome.error}
    assert kinds == {
        "flaky_once": ToolErrorKind.HTTP_STATUS,
        "slow": ToolErrorKind.TIMEOUT,
        "malformed": ToolErrorKind.MALFORMED_RESPONSE,
        "missing": ToolErrorKind.HTTP_STATUS,
        "elsewhere": ToolErrorKind.CONNECTION,
    }
    assert "503" in outcomes["flaky_once"].error.message  # type: ignore[union-attr]
    assert "404" in outcomes["missing"].error.message  # type: ignore[union-attr]
    assert "may reach only" in outcomes["elsewhere"].error.message  # type: ignore[union-attr]
    assert "not json" in outcomes["malformed"].error.message  # type: ignore[union-attr]
