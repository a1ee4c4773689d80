"""A loopback HTTP proxy in front of the real API that fails requests on purpose.

Each request takes the next fault from a queue (then passes once the queue is empty):
- "drop": close the connection without forwarding or answering;
- "503": answer 503 with Retry-After: 0 without forwarding;
- "forward-then-drop": forward to the server (so it acts), then close without answering,
  as when a response is lost on the way back;
- ``CutStream(after_messages, extra_bytes, event)``: forward, relay a ``text/event-stream``
  body live for ``after_messages`` messages (blank-line separated; of type ``event`` only,
  if given) and ``extra_bytes`` more, then close mid-body, as a network failure does.

Event streams are relayed as they arrive (chunked), not buffered, so they stay live.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal

import httpx


@dataclass(frozen=True)
class CutStream:
    """Cut an event stream after ``after_messages`` messages (of type ``event`` if given)."""

    after_messages: int
    extra_bytes: int = 0
    event: str | None = None

    def cut_at(self, body: bytes) -> int | None:
        """Where to cut ``body`` (so far), once it holds enough messages."""
        counted, start = 0, 0
        while counted < self.after_messages:
            found = body.find(b"\n\n", start)
            if found == -1:
                return None
            message, start = body[start:found], found + 2
            if self.event is None or message.startswith(f"event: {self.event}\n".encode()):
                counted += 1
        end = start + self.extra_bytes
        return end if len(body) >= end else None


Fault = Literal["drop", "503", "forward-then-drop"] | CutStream
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


@dataclass
class SeenRequest:
    method: str
    path: str
    headers: dict[str, str]
    fault: Fault | None


@dataclass
class FaultPlan:
    faults: deque[Fault] = field(default_factory=deque)
    seen: list[SeenRequest] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fail_next(self, *faults: Fault) -> None:
        with self.lock:
            self.faults.extend(faults)

    def take(self) -> Fault | None:
        with self.lock:
            return self.faults.popleft() if self.faults else None


@contextmanager
def fault_proxy(upstream: str) -> Iterator[tuple[str, FaultPlan]]:
    plan = FaultPlan()
    forwarder = httpx.Client(base_url=upstream, timeout=60)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass  # keep test output clean

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            fault = plan.take()
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            with plan.lock:
                plan.seen.append(SeenRequest(self.command, self.path, headers, fault))
            if fault == "drop":
                self.close_connection = True
                return
            if fault == "503":
                payload = b'{"error": "ServiceUnavailable", "detail": "injected fault"}'
                self.send_response(503)
                self.send_header("Retry-After", "0")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                return
            with forwarder.stream(
                self.command, self.path, content=body, headers=headers
            ) as response:
                if fault == "forward-then-drop":
                    self.close_connection = True
                    return
                self.send_response(response.status_code)
                for key, value in response.headers.items():
                    if key.lower() not in HOP_BY_HOP and key.lower() != "content-encoding":
                        self.send_header(key, value)
                if response.headers.get("content-type", "").startswith("text/event-stream"):
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    self._relay_stream(response, fault if isinstance(fault, CutStream) else None)
                    return
                content = response.read()
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

        def _relay_stream(self, response: httpx.Response, cut: CutStream | None) -> None:
            received = bytearray()
            try:
                for chunk in response.iter_bytes():
                    sent = len(received)
                    received += chunk
                    cut_at = cut.cut_at(bytes(received)) if cut is not None else None
                    if cut_at is not None:
                        self._write_chunk(bytes(received[sent:cut_at]))
                        self.close_connection = True  # no last chunk: the body is cut short
                        return
                    self._write_chunk(chunk)
                self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the client went away

        def _write_chunk(self, data: bytes) -> None:
            if data:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

        do_GET = do_POST = do_PUT = do_DELETE = _handle

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", plan
    finally:
        server.shutdown()
        server.server_close()
        forwarder.close()
