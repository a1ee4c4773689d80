"""The only way out of a sandbox that asked for the network: an HTTP proxy on a unix socket.

A sandbox always gets a network namespace of its own (sandbox/isolation.py): inside it there
is only a loopback interface, so raw sockets reach nothing, neither the host's loopback (Redis,
Postgres, the API, the inference server) nor any address the host could route to. When the job
asks for the network, the process that starts the sandbox (a training rank, or the API for a
dry run) runs one :class:`EgressProxy` per sandbox process, listening on a unix socket in a
private directory; the socket is bound into the sandbox, where the child runs a small
TCP-to-unix forwarder on the sandbox's own 127.0.0.1 and points HTTP_PROXY / HTTPS_PROXY at it
(sandbox/child/egress_forwarder.py) before any user code loads. httpx, requests and urllib then
work unchanged. The proxy's HTTP wire work (parsing, connecting, relaying) is
sandbox/egress_wire.py's.

The proxy speaks two things: ``CONNECT host:port`` (HTTPS, or any TCP stream tunnelled through
a proxy-aware client) and plain HTTP requests with an absolute URL (one request per
connection: ``Connection: close`` both ways, so a client's pooled proxy connection is never
reused for another host). Everything else is refused.

Before connecting, :class:`EgressPolicy` resolves the name itself and refuses the connection
when any resolved address is loopback, private (RFC 1918), link-local (169.254.0.0/16: cloud
metadata services), shared (100.64.0.0/10), unspecified, multicast or reserved, an IPv6
unique-local, link-local or site-local address, an IPv6 form that embeds one of those
(IPv4-mapped, 6to4, NAT64), one of the operator's extra denied networks, an address of this
machine, or one of the deployment's own hosts (its database, Redis, inference server, API...).
It then connects to the address it checked, never resolving the name again, so a DNS answer
that changes between check and use (rebinding) gains nothing. Names the operator lists as
allowed (``host`` or ``host:port``: an internal judge, a tool service) skip the address
checks; that list is per deployment, never per job. A job may narrow the way out further
(``only_hosts``: the hosts of its HTTP tools and endpoint grader, when it did not ask for the
network as a whole): every other destination is refused before any lookup, and the listed ones
still pass the address checks above.

Refusals answer ``403`` with the reason in the status line (httpx and requests show it in
their ProxyError for HTTPS) and in the body (plain HTTP), and are logged and counted.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import logging
import os
import re
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from sandbox.egress_wire import (
    IPAddress,
    answer,
    connect,
    parse_request,
    read_head,
    relay,
    split_host_port,
)

logger = logging.getLogger(__name__)

Resolver = Callable[[str, int], list[str]]

# Never reachable from user code, whatever a name resolves to. Documentation ranges
# (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24) are deliberately not here: they are not
# routed on the internet, so a deployment does not use them for its services, and the tests
# use 198.51.100.0/24 as the "public" side (docs/security.md). An operator whose internal
# network uses other ranges adds them (RFT_SANDBOX_EGRESS_DENY_NETWORKS).
DENIED_NETWORKS: tuple[tuple[str, str], ...] = (
    ("0.0.0.0/8", "an unspecified address"),
    ("10.0.0.0/8", "a private address"),
    ("100.64.0.0/10", "a shared (carrier-grade NAT) address"),
    ("127.0.0.0/8", "a loopback address"),
    ("169.254.0.0/16", "a link-local address (cloud metadata services live there)"),
    ("172.16.0.0/12", "a private address"),
    ("192.0.0.0/24", "an IETF protocol address"),
    ("192.168.0.0/16", "a private address"),
    ("198.18.0.0/15", "a benchmarking address"),
    ("224.0.0.0/4", "a multicast address"),
    ("240.0.0.0/4", "a reserved address"),
    ("::/128", "an unspecified address"),
    ("::1/128", "a loopback address"),
    ("100::/64", "a discard address"),
    ("fc00::/7", "a unique-local address (cloud metadata services live there)"),
    ("fe80::/10", "a link-local address"),
    ("fec0::/10", "a site-local address"),
    ("ff00::/8", "a multicast address"),
)
NAT64 = ipaddress.ip_network("64:ff9b::/96")
HEAD_TIMEOUT_S = 30.0
MAX_CONNECTIONS = 64
DEPLOYMENT_REFRESH_S = 60.0
LOGGED_REFUSALS = 20
DIRECTORY_PREFIX = "rft-egress-"


@dataclass(frozen=True)
class HostRule:
    """``host`` or ``host:port`` (IPv6 in brackets), as an operator writes it."""

    host: str
    port: int | None = None

    @classmethod
    def parse(cls, text: str) -> HostRule:
        text = text.strip()
        if not text:
            raise ValueError("an empty host entry")
        host, port = split_host_port(text)
        return cls(host=_normal_host(host), port=port)

    def matches(self, host: str, port: int) -> bool:
        return self.host == host and (self.port is None or self.port == port)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"


def _normal_host(host: str) -> str:
    host = host.strip().lower().rstrip(".")
    with contextlib.suppress(ValueError):
        return str(ipaddress.ip_address(host))  # one spelling per address
    return host


def hosts_of_urls(urls: Iterable[str | None]) -> list[str]:
    """The hosts (``host:port``) that URLs of the deployment's own services point at."""
    hosts = []
    for url in urls:
        if not url:
            continue
        try:
            parts = urlsplit(url)
            host, port = parts.hostname, parts.port
        except ValueError:
            continue
        if host:  # a unix-socket URL (postgresql:///db?host=/run/...) has none: nothing to deny
            hosts.append(str(HostRule(_normal_host(host), port)))
    return hosts


def default_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def local_addresses() -> set[IPAddress]:
    """Every address of this machine's interfaces (in this network namespace), from /proc:
    a service listening on 0.0.0.0 is reachable at each of them, public ones included."""
    found: set[IPAddress] = set()
    with contextlib.suppress(OSError):
        # fib_trie lists each local address as "|-- A.B.C.D" followed by "/32 host LOCAL".
        lines = Path("/proc/net/fib_trie").read_text().splitlines()
        for previous, line in itertools.pairwise(lines):
            if "/32 host LOCAL" in line:
                match = re.search(r"(\d+\.\d+\.\d+\.\d+)\s*$", previous)
                if match:
                    found.add(ipaddress.ip_address(match.group(1)))
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/net/if_inet6").read_text().splitlines():
            raw = line.split()[0]
            found.add(ipaddress.ip_address(":".join(raw[i : i + 4] for i in range(0, 32, 4))))
    return found


class EgressRefused(Exception):
    """The policy refuses a destination; the message says why (it reaches the user)."""


@dataclass
class EgressPolicy:
    """Which destinations user code may reach through the proxy.

    ``allowed_hosts`` (operator: named internal services) skip every address check;
    ``deployment_hosts`` (the deployment's own services, from its settings) are refused by
    name and by every address they resolve to, on every port; ``denied_networks`` adds to
    DENIED_NETWORKS."""

    allowed_hosts: Sequence[str] = ()
    deployment_hosts: Sequence[str] = ()
    denied_networks: Sequence[str] = ()
    # Non-empty: only these destinations (``host`` or ``host:port``), still address-checked.
    only_hosts: Sequence[str] = ()
    resolver: Resolver = default_resolver
    # This machine's addresses; injectable so unit tests need no /proc.
    machine_addresses: Callable[[], set[IPAddress]] = local_addresses
    _allowed: list[HostRule] = field(init=False)
    _deployment: list[HostRule] = field(init=False)
    _only: list[HostRule] = field(init=False)
    _networks: list[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str]] = field(init=False)
    # The deployment hosts' addresses, looked up again at most every DEPLOYMENT_REFRESH_S: a
    # name that does not resolve (a DNS timeout) must not slow every connection down.
    _deployment_cache: tuple[float, set[IPAddress]] | None = field(init=False, default=None)
    _cache_lock: threading.Lock = field(init=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._allowed = [HostRule.parse(entry) for entry in self.allowed_hosts]
        self._deployment = [HostRule.parse(entry) for entry in self.deployment_hosts]
        self._only = [HostRule.parse(entry) for entry in self.only_hosts]
        self._networks = [(ipaddress.ip_network(net), why) for net, why in DENIED_NETWORKS]
        for entry in self.denied_networks:
            network = ipaddress.ip_network(entry.strip(), strict=False)
            self._networks.append((network, "in a network this deployment denies"))

    def check(self, host: str, port: int) -> list[IPAddress]:
        """The addresses to connect to for ``host:port``, each checked; EgressRefused if any
        address the name resolves to may not be reached (a mixed answer is refused whole)."""
        name = _normal_host(host)
        if not name or not 0 < port < 65536:
            raise EgressRefused(f"{host!r} port {port} is not a destination")
        if self._only and not any(rule.matches(name, port) for rule in self._only):
            listed = ", ".join(str(rule) for rule in self._only)
            raise EgressRefused(f"this job may reach only {listed}, not {name}:{port}")
        allowed = any(rule.matches(name, port) for rule in self._allowed)
        if not allowed and any(rule.host == name for rule in self._deployment):
            raise EgressRefused(f"{name} is one of this deployment's own hosts")
        try:
            resolved = self._resolve(name, port)
        except (OSError, UnicodeError, ValueError) as error:
            raise EgressRefused(f"{name} could not be resolved ({error})") from None
        if not resolved:
            raise EgressRefused(f"{name} resolves to no address")
        if allowed:
            return sorted(resolved, key=lambda address: address.version)
        own = self._deployment_addresses() | self.machine_addresses()
        for address in resolved:
            reason = self._denied(address)
            if reason is None and address in own:
                reason = "an address of this deployment's own hosts"
            if reason is not None:
                shown = name if name == str(address) else f"{name} ({address})"
                raise EgressRefused(f"{shown} is {reason}")
        return sorted(resolved, key=lambda address: address.version)

    def _denied(self, address: IPAddress) -> str | None:
        for network, why in self._networks:
            if address.version == network.version and address in network:
                return why
        if isinstance(address, ipaddress.IPv6Address):
            embedded = address.ipv4_mapped or (address.sixtofour)
            if embedded is None and address in NAT64:
                embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
            if embedded is not None:
                inner = self._denied(embedded)
                if inner is not None:
                    return f"an IPv6 form of {embedded}, {inner}"
        return None

    def _resolve(self, name: str, port: int) -> set[IPAddress]:
        with contextlib.suppress(ValueError):
            return {ipaddress.ip_address(name)}  # a literal address: nothing to look up
        # A scoped IPv6 answer (fe80::1%eth0) is checked without its scope.
        return {ipaddress.ip_address(a.split("%")[0]) for a in self.resolver(name, port)}

    def _deployment_addresses(self) -> set[IPAddress]:
        with self._cache_lock:
            now = time.monotonic()
            if self._deployment_cache is None or now - self._deployment_cache[0] > (
                DEPLOYMENT_REFRESH_S
            ):
                addresses: set[IPAddress] = set()
                for rule in self._deployment:
                    with contextlib.suppress(OSError, UnicodeError, ValueError):
                        addresses |= self._resolve(rule.host, rule.port or 80)
                self._deployment_cache = (now, addresses)
            return self._deployment_cache[1]


@dataclass
class EgressCounters:
    allowed: int = 0
    refused: int = 0


class EgressProxy:
    """One sandbox process's way out: a proxy on a unix socket in a private directory.

    ``owner_uid``: the sandbox's unprivileged uid (the worker runs as root), which alone may
    connect; the directory is the host process's own (0700), and only this sandbox has the
    socket bound inside, so no other tenant's sandbox can reach it."""

    def __init__(self, policy: EgressPolicy, owner_uid: int | None = None) -> None:
        self.policy = policy
        self.counters = EgressCounters()
        _remove_stale_directories()
        self._directory = Path(tempfile.mkdtemp(prefix=f"{DIRECTORY_PREFIX}{os.getpid()}-"))
        self.socket_path = self._directory / "egress.sock"
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._connections: set[socket.socket] = set()  # to shut down at close(), both ends
        self._clients = 0  # connections from the sandbox being served, for MAX_CONNECTIONS
        self._lock = threading.Lock()
        self._closed = False
        try:
            self._listener.bind(str(self.socket_path))
            if owner_uid is not None and os.geteuid() == 0:
                os.chown(self.socket_path, owner_uid, owner_uid)
            os.chmod(self.socket_path, 0o600)
            # The sandbox reaches the socket through its own bind mount; on the host only
            # this directory's owner can walk to it.
            self._listener.listen(MAX_CONNECTIONS)
        except BaseException:
            self._listener.close()
            shutil.rmtree(self._directory, ignore_errors=True)
            raise
        self._thread = threading.Thread(target=self._accept_loop, name="rft-egress", daemon=True)
        self._thread.start()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            connections = list(self._connections)
        # shutdown() wakes the accept() blocked in the other thread; close() alone would not.
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)
        shutil.rmtree(self._directory, ignore_errors=True)

    def __enter__(self) -> EgressProxy:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _accept_loop(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                if self._closed:
                    client.close()
                    return
                busy = self._clients >= MAX_CONNECTIONS
                if not busy:
                    self._clients += 1
                    self._connections.add(client)
            if busy:
                answer(client, 503, "too many connections through the egress proxy at once")
                client.close()
                continue
            threading.Thread(
                target=self._serve, args=(client,), name="rft-egress-connection", daemon=True
            ).start()

    def _track(self, connection: socket.socket) -> bool:
        with self._lock:
            if self._closed:
                return False
            self._connections.add(connection)
            return True

    def _serve(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        try:
            client.settimeout(HEAD_TIMEOUT_S)
            head, rest = read_head(client)
            request = parse_request(head)
            if isinstance(request, str):
                answer(client, 400, request)
                return
            try:
                addresses = self.policy.check(request.host, request.port)
            except EgressRefused as refusal:
                self.counters.refused += 1
                refused = self.counters.refused
                # Tenant code can ask in a loop: the first few, then one in a hundred.
                if refused <= LOGGED_REFUSALS or refused % 100 == 0:
                    logger.warning(
                        "egress refused (%d so far for this sandbox): %s:%s: %s",
                        refused,
                        request.host,
                        request.port,
                        refusal,
                    )
                answer(client, 403, f"refused by the egress policy: {refusal}")
                return
            upstream = connect(addresses, request.port)
            if upstream is None:
                answer(client, 502, f"cannot connect to {request.host}:{request.port}")
                return
            if not self._track(upstream):
                return
            self.counters.allowed += 1
            if request.tunnel:
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                relay(client, upstream, rest)
            else:
                upstream.sendall(request.forwarded_head + rest)
                relay(client, upstream, b"", rewrite_response=True)
        except (OSError, ValueError):
            pass  # the peer went away or sent garbage: nothing left to tell it
        finally:
            with self._lock:
                self._clients -= 1
            for connection in (client, upstream):
                if connection is not None:
                    with self._lock:
                        self._connections.discard(connection)
                    connection.close()


def _remove_stale_directories() -> None:
    """The folders of proxies whose process died without closing them (a SIGKILLed rank):
    each folder is named after its process, and only a dead process's folder goes."""
    for folder in Path(tempfile.gettempdir()).glob(f"{DIRECTORY_PREFIX}*-*"):
        owner = folder.name.removeprefix(DIRECTORY_PREFIX).split("-", 1)[0]
        if not owner.isdigit() or folder.stat().st_uid != os.geteuid():
            continue
        try:
            os.kill(int(owner), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except PermissionError:
            pass  # alive, another user's
