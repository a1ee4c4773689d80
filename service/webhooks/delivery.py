"""Sending one webhook request, to an address the egress policy allows.

Webhook URLs are user input: a tenant could name the deployment's database, Redis, the cloud
metadata service or any private address, and the worker sending the request would reach it.
The policy that guards the reward sandbox's way out (sandbox.egress.EgressPolicy, built from
the same deployment settings: RFT_SANDBOX_EGRESS_ALLOW names internal hosts an operator
allows) is asked before every attempt, and the request goes to the address it checked, never
to the name resolved again (a DNS answer that changes in between gains nothing): the URL's
host becomes that address, with the name kept in the Host header and, for https, in TLS's
server name (certificates are checked against the name).
"""

from __future__ import annotations

import ipaddress
import time
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import httpx

from sandbox.egress import EgressPolicy, EgressRefused
from service.settings import Settings

# What an attempt's log keeps of a receiver's answer that was not a 2xx.
MAX_LOGGED_BODY = 300


def egress_policy(settings: Settings) -> EgressPolicy:
    """The deployment's egress policy: the one reward code with network access is held to."""
    return EgressPolicy(
        allowed_hosts=settings.egress_allowed_hosts,
        deployment_hosts=settings.egress_deployment_hosts,
        denied_networks=settings.egress_denied_networks,
    )


def url_problem(url: str) -> str | None:
    """What is wrong with ``url`` as a webhook target, before any lookup; None if nothing."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        return f"url {url!r} is not a URL: {error}"
    if parts.scheme not in ("http", "https"):
        return f"url {url!r}: only http:// and https:// URLs can receive webhooks"
    if not parts.hostname:
        return f"url {url!r} names no host"
    if parts.username is not None or parts.password is not None:
        return f"url {url!r}: credentials in the URL are not kept; sign-in is by the signature"
    if port == 0:
        return f"url {url!r}: port 0 is not a destination"
    return None


def refusal(url: str, policy: EgressPolicy) -> str | None:
    """Why the policy refuses ``url`` at registration, or None. A name that does not resolve
    now is accepted: every attempt asks the policy again."""
    host, port = _host_port(url)
    try:
        ipaddress.ip_address(host)
    except ValueError:
        try:
            policy.resolver(host, port)
        except (OSError, UnicodeError, ValueError):
            return None
    try:
        policy.check(host, port)
    except EgressRefused as refused:
        return str(refused)
    return None


@dataclass(frozen=True)
class AttemptResult:
    status_code: int | None  # None: no answer (refused by the policy, unreachable, timed out)
    error: str | None
    duration_ms: float

    @property
    def delivered(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def send(
    url: str,
    headers: dict[str, str],
    body: str,
    *,
    policy: EgressPolicy,
    timeout_s: float,
    transport: httpx.BaseTransport | None = None,
) -> AttemptResult:
    """POST ``body`` to ``url``: any 2xx is delivered; redirects are not followed (a receiver
    that moved is told so by the failed attempts, not followed to wherever it points)."""
    started = time.monotonic()

    def result(status_code: int | None, error: str | None) -> AttemptResult:
        return AttemptResult(status_code, error, (time.monotonic() - started) * 1000)

    host, port = _host_port(url)
    try:
        addresses = policy.check(host, port)
    except EgressRefused as refused:
        return result(None, f"refused by the egress policy: {refused}")
    parts = urlsplit(url)
    with httpx.Client(
        timeout=timeout_s, follow_redirects=False, trust_env=False, transport=transport
    ) as client:
        error = "no address to connect to"
        for address in addresses:
            shown = f"[{address}]" if address.version == 6 else str(address)
            pinned = urlunsplit(parts._replace(netloc=f"{shown}:{port}"))
            host_header = parts.netloc.rpartition("@")[2]
            extensions = {"sni_hostname": host} if parts.scheme == "https" else {}
            try:
                response = client.post(
                    pinned,
                    content=body.encode(),
                    headers={**headers, "host": host_header, "user-agent": "rft-webhooks"},
                    extensions=extensions,
                )
            except httpx.ConnectError as failed:
                error = f"cannot connect to {host}:{port}: {failed}"
                continue  # the next checked address, if any
            except httpx.TimeoutException:
                return result(None, f"no answer within {timeout_s:g} s")
            except (OSError, httpx.HTTPError) as failed:
                return result(None, f"{type(failed).__name__}: {failed}")
            if 200 <= response.status_code < 300:
                return result(response.status_code, None)
            text = response.text[:MAX_LOGGED_BODY]
            return result(response.status_code, f"HTTP {response.status_code}: {text}".strip())
        return result(None, error)


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
