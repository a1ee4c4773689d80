"""HTTP tools and endpoint graders at the API: each endpoint is checked before a job is stored
(a 400 naming the problem: a bad schema, a URL that is not https, a host the egress policy
refuses, a secret the job does not have), and the job's sandboxes are then allowed to reach
those hosts alone (``Job.egress_hosts``), unless the job asked for the network as a whole."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from pydantic import ValidationError

from sandbox.egress import EgressPolicy, EgressRefused, HostRule
from sandbox.http_tools import (
    HttpToolProblem,
    check_endpoint_url,
    check_headers,
    check_http_tool,
    declaration_in_source,
    http_tool_source,
    secret_references,
)
from service.errors import BadRequest
from service.http_tools.schemas import HttpToolCreate
from service.secrets import MAX_SECRETS, SECRET_NAME
from service.settings import Settings


class InvalidEndpoint(BadRequest):
    """An HTTP tool or endpoint grader that could never be called; the detail names it."""


def seal_header_values(
    headers: dict[str, str], owner: str, secrets: dict[str, str]
) -> dict[str, str]:
    """``headers`` with each literal value moved into ``secrets`` (new entries named after the
    owner and the header) and replaced by a ``{{secrets.NAME}}`` reference to it.

    For requests that have no secrets of their own to refer to (OpenAI's fine-tuning API): a
    token written into a header is then sealed with the job's secrets and never shown back,
    while the sandbox still sends it. Values that already refer to a secret stay as they are.
    A 400 when the job would hold more secrets than a job may.
    """
    sealed = {}
    for header, value in headers.items():
        if secret_references({header: value}):
            sealed[header] = value
            continue
        base = re.sub(r"[^A-Za-z0-9]+", "_", f"HEADER_{owner}_{header}").strip("_").upper()[:120]
        name, suffix = base, 1
        while name in secrets:
            suffix += 1
            name = f"{base}_{suffix}"
        if not SECRET_NAME.match(name) or len(secrets) >= MAX_SECRETS:
            raise InvalidEndpoint(
                f"{owner}: header {header!r} is kept as a job secret, and a job holds at most "
                f"{MAX_SECRETS} secrets: send fewer headers"
            )
        secrets[name] = value
        sealed[header] = f"{{{{secrets.{name}}}}}"
    return sealed


def plain_http_hosts(settings: Settings) -> frozenset[str] | None:
    """Hosts a plain http:// endpoint may have; None: any (development and tests)."""
    if settings.endpoints_allow_plain_http:
        return None
    return frozenset(str(HostRule.parse(entry)) for entry in settings.egress_allowed_hosts)


def check_reachable(host: str, where: str, settings: Settings) -> None:
    """400 when the egress policy would refuse the endpoint's host (a private address, one of
    this deployment's own...), as the sandbox's proxy would on every call."""
    rule = HostRule.parse(host)
    policy = EgressPolicy(
        allowed_hosts=settings.egress_allowed_hosts,
        deployment_hosts=settings.egress_deployment_hosts,
        denied_networks=settings.egress_denied_networks,
    )
    try:
        policy.check(rule.host, rule.port or 443)
    except EgressRefused as refusal:
        raise InvalidEndpoint(f"{where}: the sandbox may not reach {host}: {refusal}") from None


def check_secrets_named(headers: dict[str, str], secrets: Collection[str], where: str) -> None:
    missing = sorted(secret_references(headers) - set(secrets))
    if missing:
        raise InvalidEndpoint(
            f"{where}: headers name secret {missing[0]!r}, which the job does not have "
            "(add it to the job's secrets)"
        )


def check_endpoint(
    url: str, headers: dict[str, str], secrets: Collection[str], where: str, settings: Settings
) -> str:
    """An endpoint grader's URL and headers: its ``host:port``, or a 400 naming the problem."""
    try:
        host = check_endpoint_url(url, plain_http_hosts=plain_http_hosts(settings))
        check_headers(headers, where)
    except HttpToolProblem as problem:
        raise InvalidEndpoint(f"{where}: {problem}") from None
    check_secrets_named(headers, secrets, where)
    check_reachable(host, where, settings)
    return host


def compile_http_tool(
    tool: HttpToolCreate, secrets: Collection[str], settings: Settings
) -> tuple[str, str]:
    """The tool's generated source and its endpoint's ``host:port``; a 400 naming the
    problem when it could never be called."""
    where = f"http tool {tool.name!r}"
    declaration = tool.declaration()
    try:
        host = check_http_tool(declaration, plain_http_hosts=plain_http_hosts(settings))
        source = http_tool_source(declaration)
    except HttpToolProblem as problem:
        raise InvalidEndpoint(str(problem)) from None
    check_secrets_named(tool.headers, secrets, where)
    check_reachable(host, where, settings)
    return source, host


def tool_sources(
    tools: Iterable[Any], secrets: Collection[str], settings: Settings
) -> tuple[dict[str, str], list[str]]:
    """Every tool's source by name (an HTTP tool's generated), and the HTTP tools' hosts."""
    sources: dict[str, str] = {}
    hosts: list[str] = []
    for tool in tools:
        if isinstance(tool, HttpToolCreate):
            sources[tool.name], host = compile_http_tool(tool, secrets, settings)
            hosts.append(host)
        else:
            sources[tool.name] = tool.source
    return sources, sorted(set(hosts))


def check_hosts_kept(hosts: Sequence[str], job_hosts: Sequence[str], allow_network: bool) -> None:
    """A config update's endpoints must be on hosts the job was created with: its sandboxes'
    way out is fixed when they start (a job with allow_network may reach any public host)."""
    if allow_network:
        return
    new = sorted(set(hosts) - set(job_hosts))
    if new:
        allowed = ", ".join(job_hosts) or "none"
        raise InvalidEndpoint(
            f"endpoint host {new[0]} is not one this job was created with ({allowed}): its "
            "sandboxes may reach only those; create a new job to add a host"
        )


def http_declaration(source: str) -> HttpToolCreate | None:
    """The HTTP tool a stored tool's source was generated from; None for a Python tool."""
    declaration = declaration_in_source(source)
    if declaration is None:
        return None
    try:
        return HttpToolCreate.model_validate(declaration)
    except ValidationError:
        return None
