"""The sandbox's way out when the job asked for the network: a forwarder to the egress proxy.

Runs inside the sandbox (standard library only), started by the child runtime before any user
code loads. The proxy itself, and the policy it enforces, live on the host: sandbox/egress.py.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any

# Every name HTTP clients read a proxy from (httpx, requests and urllib read both cases;
# ALL_PROXY covers clients that know no per-scheme variable).
PROXY_VARIABLES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)
FORWARD_CHUNK = 64 * 1024
# Bytes queued towards one side before the other side stops being read (backpressure).
FORWARD_BUFFER = 256 * 1024
FORWARDER_STACK_BYTES = 512 * 1024


def start_egress_forwarder(socket_path: str) -> None:
    """The sandbox's way out when the job asked for the network (sandbox/egress.py): a TCP
    listener on the sandbox's own loopback that hands each connection to the egress proxy's
    unix socket, and the proxy variables pointing at it, set before any user code loads and
    inherited by every process it starts. One thread serves every connection: threads count
    against the sandbox's process limits."""
    import selectors
    import socket

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.setblocking(False)
    proxy = f"http://127.0.0.1:{listener.getsockname()[1]}"
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    # socket -> [its peer, bytes queued for the peer, whether it has stopped sending]
    ends: dict[socket.socket, list[Any]] = {}

    def close_pair(side: socket.socket) -> None:
        for end in (side, ends[side][0]):
            with contextlib.suppress(KeyError, ValueError):
                selector.unregister(end)
            ends.pop(end, None)
            end.close()

    def update(side: socket.socket) -> None:
        peer, queued, finished = ends[side]
        events = 0
        if not finished and len(queued) < FORWARD_BUFFER:
            events |= selectors.EVENT_READ
        if ends[peer][1]:
            events |= selectors.EVENT_WRITE
        with contextlib.suppress(KeyError):
            selector.unregister(side)
        if events:
            selector.register(side, events)

    def serve() -> None:
        while True:
            for key, events in selector.select():
                side: socket.socket = key.fileobj  # type: ignore[assignment]
                if side is listener:
                    with contextlib.suppress(OSError):
                        client, _ = listener.accept()
                        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                        try:
                            upstream.connect(socket_path)
                        except OSError:
                            client.close()
                            upstream.close()
                            continue
                        for end, peer in ((client, upstream), (upstream, client)):
                            end.setblocking(False)
                            ends[end] = [peer, bytearray(), False]
                            selector.register(end, selectors.EVENT_READ)
                    continue
                if side not in ends:
                    continue
                peer = ends[side][0]
                try:
                    if events & selectors.EVENT_WRITE:
                        pending = ends[peer][1]
                        del pending[: side.send(pending)]
                        if not pending and ends[peer][2]:
                            side.shutdown(socket.SHUT_WR)
                    if events & selectors.EVENT_READ:
                        data = side.recv(FORWARD_CHUNK)
                        if data:
                            ends[side][1] += data
                        else:
                            ends[side][2] = True
                            if not ends[side][1]:
                                peer.shutdown(socket.SHUT_WR)
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    close_pair(side)
                    continue
                if ends[side][2] and ends[peer][2] and not ends[side][1] and not ends[peer][1]:
                    close_pair(side)
                    continue
                update(side)
                update(peer)

    # A small stack: the default 8 MiB would count against the address-space limit.
    previous = threading.stack_size(FORWARDER_STACK_BYTES)
    try:
        threading.Thread(target=serve, name="rft-egress-forwarder", daemon=True).start()
    finally:
        threading.stack_size(previous)
    for name in PROXY_VARIABLES:
        os.environ[name] = proxy
    # Nothing bypasses the proxy: there is nothing else to reach.
    os.environ.pop("NO_PROXY", None)
    os.environ.pop("no_proxy", None)
