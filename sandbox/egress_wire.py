"""The egress proxy's HTTP wire work: read and parse a proxy request, connect, answer, relay.

The policy of what may be reached, and the proxy that applies it, are sandbox/egress.py's;
this module only moves bytes and understands just enough HTTP to do so.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import selectors
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

MAX_HEAD_BYTES = 16 * 1024
CONNECT_TIMEOUT_S = 10.0
# A tunnel with no traffic either way for this long is closed (a reward call is bounded far
# below it; this only frees threads a stuck peer would hold).
IDLE_TIMEOUT_S = 600.0
DRAIN_TIMEOUT_S = 1.0
MAX_DRAIN_BYTES = 1 << 20
RELAY_CHUNK = 64 * 1024
# Request headers that belong to the hop to the proxy, not to the origin server.
HOP_HEADERS = frozenset(
    {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "upgrade"}
)


def split_host_port(text: str) -> tuple[str, int | None]:
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else None
        if rest and port_text is None:
            raise ValueError(f"{text!r} is not host or host:port")
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    else:
        host, port_text = text, None  # a name, an IPv4 address or a bare IPv6 address
    if port_text is None:
        return host, None
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"{text!r}: the port must be a number from 1 to 65535")
    return host, int(port_text)


@dataclass(frozen=True)
class ProxyRequest:
    host: str
    port: int
    tunnel: bool
    forwarded_head: bytes = b""  # plain HTTP: the request as the origin server gets it


def read_head(connection: socket.socket) -> tuple[bytes, bytes]:
    received = b""
    while b"\r\n\r\n" not in received:
        if len(received) > MAX_HEAD_BYTES:
            raise ValueError("request head too long")
        chunk = connection.recv(4096)
        if not chunk:
            raise ValueError("closed before the request head ended")
        received += chunk
    head, _, rest = received.partition(b"\r\n\r\n")
    return head, rest


def parse_request(head: bytes) -> ProxyRequest | str:
    """The request, or what is wrong with it (answered 400)."""
    try:
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ")
    except ValueError:
        return "not an HTTP proxy request"
    if method == "CONNECT":
        if target.count(":") > 1 and not target.startswith("["):
            target = "[{}]:{}".format(*target.rsplit(":", 1))  # httpx: CONNECT ::1:443
        try:
            tunnel_host, tunnel_port = split_host_port(target)
        except ValueError as error:
            return str(error)
        if tunnel_port is None:
            return "CONNECT needs host:port"
        return ProxyRequest(host=tunnel_host, port=tunnel_port, tunnel=True)
    try:
        url = urlsplit(target)
    except ValueError as error:
        return f"bad URL: {error}"
    host: str | None
    try:
        host, port = url.hostname, url.port or 80
    except ValueError as error:
        # httpx writes an IPv6 literal without its brackets in the absolute URL
        # (http://::1/path); the Host header has them.
        host_header = _header(lines[1:], "host")
        try:
            parsed_host, parsed_port = split_host_port(host_header or "")
        except ValueError:
            return f"bad URL: {error}"
        host, port = parsed_host, parsed_port or 80
    if url.scheme != "http" or not host:
        return (
            "this is an egress proxy: send absolute http:// URLs, or CONNECT for https "
            "(HTTP clients do both when HTTP_PROXY / HTTPS_PROXY are set, as they are here)"
        )
    path = url.path or "/"
    if url.query:
        path += f"?{url.query}"
    headers = [
        line
        for line in lines[1:]
        if line and line.split(":", 1)[0].strip().lower() not in HOP_HEADERS
    ]
    forwarded = "\r\n".join([f"{method} {path} {version}", *headers, "Connection: close", "", ""])
    return ProxyRequest(
        host=host, port=port, tunnel=False, forwarded_head=forwarded.encode("latin-1")
    )


def _header(lines: list[str], name: str) -> str | None:
    for line in lines:
        key, _, value = line.partition(":")
        if key.strip().lower() == name:
            return value.strip()
    return None


def connect(addresses: list[IPAddress], port: int) -> socket.socket | None:
    """A connection to the first checked address that answers: never to the name again."""
    for address in addresses:
        family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
        connection = socket.socket(family, socket.SOCK_STREAM)
        connection.settimeout(CONNECT_TIMEOUT_S)
        try:
            connection.connect((str(address), port))
        except OSError:
            connection.close()
            continue
        return connection
    return None


def answer(connection: socket.socket, status: int, reason: str) -> None:
    # The reason goes in the status line too: for HTTPS, clients report only that line
    # (httpx: ProxyError('403 refused by ...'); requests: 'Tunnel connection failed: 403 ...').
    line = re.sub(r"[^\x20-\x7e]", "?", reason)[:400]
    body = f"{line}\n".encode()
    head = (
        f"HTTP/1.1 {status} {line}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\nX-Rft-Egress: refused\r\n\r\n"
    )
    with contextlib.suppress(OSError):
        connection.sendall(head.encode() + body)
        # Read what the client still sends (a request body) before it is closed: closing over
        # unread data resets the connection, and the client would see the reset, not this.
        connection.shutdown(socket.SHUT_WR)
        connection.settimeout(DRAIN_TIMEOUT_S)
        drained = 0
        while drained < MAX_DRAIN_BYTES and (chunk := connection.recv(RELAY_CHUNK)):
            drained += len(chunk)


def relay(
    client: socket.socket,
    upstream: socket.socket,
    to_upstream: bytes,
    rewrite_response: bool = False,
) -> None:
    """Copy bytes both ways until both sides are done. With ``rewrite_response``, the
    response head gets ``Connection: close`` (the client must not reuse this connection)."""
    if to_upstream:
        upstream.sendall(to_upstream)
    client.settimeout(IDLE_TIMEOUT_S)
    upstream.settimeout(IDLE_TIMEOUT_S)
    peers = {client: upstream, upstream: client}
    open_reads = {client, upstream}
    response_head = b"" if rewrite_response else None
    with selectors.DefaultSelector() as selector:
        for end in open_reads:
            selector.register(end, selectors.EVENT_READ)
        while open_reads:
            ready = selector.select(IDLE_TIMEOUT_S)
            if not ready:
                return
            for key, _ in ready:
                side: socket.socket = key.fileobj  # type: ignore[assignment]
                data = side.recv(RELAY_CHUNK)
                other = peers[side]
                if not data:
                    selector.unregister(side)
                    open_reads.discard(side)
                    if response_head and side is upstream:
                        other.sendall(response_head)  # a head that never ended: pass it on
                        response_head = None
                    with contextlib.suppress(OSError):
                        other.shutdown(socket.SHUT_WR)
                    if side is upstream and rewrite_response:
                        return  # one request per connection: the response is complete
                    continue
                if side is upstream and response_head is not None:
                    response_head += data
                    if b"\r\n\r\n" not in response_head and len(response_head) < MAX_HEAD_BYTES:
                        continue
                    data, response_head = _close_response(response_head), None
                other.sendall(data)


def _close_response(received: bytes) -> bytes:
    head, separator, body = received.partition(b"\r\n\r\n")
    if not separator:
        return received
    lines = [
        line
        for line in head.split(b"\r\n")
        if line.split(b":", 1)[0].strip().lower() not in (b"connection", b"keep-alive")
    ]
    return b"\r\n".join([*lines, b"Connection: close"]) + separator + body
