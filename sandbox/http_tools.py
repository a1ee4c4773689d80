"""HTTP tools: a tool that is an endpoint the user hosts (OpenAI agent RFT's shape), not code.

A job declares one by name, description, the JSON schema of its arguments, a URL and headers
(whose values may say ``{{secrets.NAME}}``). It becomes an ordinary tool: Python source,
generated here, that defines a function of that name whose parameters and docstring come from
the schema, and whose body POSTs the model's arguments to the URL (sandbox/endpoint_runtime.py,
copied into the source). So it loads, runs, times out, is recorded and is live-updated exactly
like a tool written in Python, inside the job's agent sandbox, whose egress proxy lets it reach
the job's endpoint hosts only. An endpoint's failure is a typed tool error (``timeout``,
``http_status``, ``malformed_response``, ``connection``) shown to the model, never the job's.

The declaration travels in the source (``HTTP_TOOL = json.loads(...)``) and is read back from
it (``declaration_in_source``), so a config shows what was declared.
"""

from __future__ import annotations

import json
import keyword
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sandbox import endpoint_runtime
from sandbox.egress import HostRule

RUNTIME_SOURCE = Path(endpoint_runtime.__file__).read_text()
DEFAULT_ENDPOINT_TIMEOUT_S = 10.0
DEFAULT_MAX_RETRIES = 2
MAX_RETRIES = 5
# Names the generated function's body uses: a parameter may not hide them.
RESERVED_PARAMETERS = frozenset({"HTTP_TOOL", "call_http_tool"})
JSON_TYPES = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "array": "list",
    "object": "dict",
}
HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$")
DECLARATION_LINE = re.compile(r"^HTTP_TOOL = json\.loads\((.*)\)$", re.MULTILINE)


class HttpToolProblem(ValueError):
    """A declaration that cannot become a tool; the message names what to change."""


@dataclass(frozen=True)
class HttpTool:
    name: str
    url: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)  # a JSON schema of an object
    headers: dict[str, str] = field(default_factory=dict)
    timeout_s: float = DEFAULT_ENDPOINT_TIMEOUT_S
    max_retries: int = DEFAULT_MAX_RETRIES

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def endpoint_host(url: str) -> str:
    """``host:port`` of an endpoint URL, as the egress restriction lists it."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return str(HostRule(host=HostRule.parse(parts.hostname or "").host, port=port))


def check_endpoint_url(url: str, *, plain_http_hosts: frozenset[str] | None) -> str:
    """The URL's ``host:port``; HttpToolProblem unless it is an absolute https URL (http only
    to a host in ``plain_http_hosts``, or anywhere when that is None: development)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises for a bad port)
    except ValueError as error:
        raise HttpToolProblem(f"url {url!r} is not a URL: {error}") from None
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise HttpToolProblem(f"url {url!r} must be an absolute https:// URL")
    if parts.username or parts.password:
        raise HttpToolProblem(
            f"url {url!r} carries credentials: put them in headers, from the job's secrets"
        )
    host = endpoint_host(url)
    if parts.scheme == "http" and plain_http_hosts is not None:
        bare = HostRule.parse(host).host
        if host not in plain_http_hosts and bare not in plain_http_hosts:
            raise HttpToolProblem(
                f"url {url!r} is plain http: use https (http goes only to hosts the operator "
                "allows, RFT_SANDBOX_EGRESS_ALLOWED_HOSTS)"
            )
    return host


def secret_references(headers: dict[str, str]) -> set[str]:
    """The job secrets ``{{secrets.NAME}}`` in header values name."""
    return {
        match.group(1)
        for value in headers.values()
        for match in endpoint_runtime.SECRET_REFERENCE.finditer(value)
    }


def check_headers(headers: dict[str, str], where: str) -> None:
    for name, value in headers.items():
        if not HEADER_NAME.match(name):
            raise HttpToolProblem(f"{where}: header name {name!r} is not a valid header name")
        if any(character in value for character in "\r\n\0"):
            raise HttpToolProblem(f"{where}: header {name!r} may not contain line breaks")


def _annotation(name: str, schema: Any, where: str) -> str:
    if not isinstance(schema, dict):
        raise HttpToolProblem(f"{where}: parameter {name!r} must be a JSON schema object")
    if "enum" in schema:
        values = schema["enum"]
        if (
            not isinstance(values, list)
            or not values
            or not all(isinstance(v, str | int | float | bool) for v in values)
        ):
            raise HttpToolProblem(
                f"{where}: parameter {name!r}: enum must list strings, numbers or booleans"
            )
        shown = (json.dumps(v) if isinstance(v, str) else repr(v) for v in values)
        return f"Literal[{', '.join(shown)}]"
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    nullable = "null" in kinds
    kinds = [k for k in kinds if k != "null"]
    if len(kinds) != 1 or kinds[0] not in JSON_TYPES:
        raise HttpToolProblem(
            f"{where}: parameter {name!r} needs a type, one of {', '.join(JSON_TYPES)} "
            f'(optionally with "null"), not {kind!r}'
        )
    return JSON_TYPES[kinds[0]] + (" | None" if nullable else "")


def _one_line(text: Any) -> str:
    return " ".join(str(text).split()).replace('"""', "'''").replace("\\", "\\\\")


def check_http_tool(tool: HttpTool, *, plain_http_hosts: frozenset[str] | None) -> str:
    """The tool's endpoint host (``host:port``); HttpToolProblem naming what is wrong."""
    where = f"http tool {tool.name!r}"
    try:
        host = check_endpoint_url(tool.url, plain_http_hosts=plain_http_hosts)
    except HttpToolProblem as problem:
        raise HttpToolProblem(f"{where}: {problem}") from None
    check_headers(tool.headers, where)
    if not 0 < tool.timeout_s <= 600:
        raise HttpToolProblem(f"{where}: timeout_s must be above 0 and at most 600")
    if not 0 <= tool.max_retries <= MAX_RETRIES:
        raise HttpToolProblem(f"{where}: max_retries must be from 0 to {MAX_RETRIES}")
    http_tool_source(tool)  # the schema's checks
    return host


def http_tool_source(tool: HttpTool) -> str:
    """The Python tool the declaration becomes; HttpToolProblem for a schema it cannot show."""
    where = f"http tool {tool.name!r}"
    schema = tool.parameters or {"type": "object", "properties": {}}
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        raise HttpToolProblem(f"{where}: parameters must be a JSON schema of type object")
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    if not isinstance(properties, dict):
        raise HttpToolProblem(f"{where}: parameters.properties must be an object")
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise HttpToolProblem(f"{where}: parameters.required must be a list of names")
    missing = sorted(set(required) - set(properties))
    if missing:
        raise HttpToolProblem(f"{where}: required parameter {missing[0]!r} is not in properties")
    signature, arguments, docs = [], [], []
    # Required parameters first: Python puts those without defaults before the others.
    ordered = [n for n in properties if n in required] + [
        n for n in properties if n not in required
    ]
    for name in ordered:
        if not name.isidentifier() or keyword.iskeyword(name) or name in RESERVED_PARAMETERS:
            raise HttpToolProblem(
                f"{where}: parameter name {name!r} must be a Python identifier (letters, digits "
                f"and _), not a keyword, nor {' or '.join(sorted(RESERVED_PARAMETERS))}"
            )
        annotation = _annotation(name, properties[name], where)
        if name in required:
            signature.append(f"{name}: {annotation}")
        else:
            optional = annotation if annotation.endswith("| None") else f"{annotation} | None"
            signature.append(f"{name}: {optional} = None")
        arguments.append(f"{name!r}: {name}")
        described = properties[name].get("description") or name
        docs.append(f"        {name}: {_one_line(described)}")
    description = _one_line(tool.description) or f"Calls the {tool.name} endpoint."
    doc_lines = [description]
    if docs:
        doc_lines += ["", "    Args:", *docs]
    docstring = "\n".join(doc_lines)
    declaration = json.dumps(json.dumps(tool.as_json()))
    return (
        f"{RUNTIME_SOURCE}\n\n"
        f"HTTP_TOOL = json.loads({declaration})\n\n\n"
        f"def {tool.name}({', '.join(signature)}):\n"
        f'    """{docstring}\n    """\n'
        f"    return call_http_tool(HTTP_TOOL, {{{', '.join(arguments)}}})\n"
    )


def declaration_in_source(source: str) -> dict[str, Any] | None:
    """The declaration an http_tool_source was generated from; None for any other source."""
    if not source.startswith(RUNTIME_SOURCE[:200]):
        return None
    match = DECLARATION_LINE.search(source)
    if match is None:
        return None
    try:
        declaration = json.loads(json.loads(match.group(1)))
    except ValueError:
        return None
    return declaration if isinstance(declaration, dict) else None
