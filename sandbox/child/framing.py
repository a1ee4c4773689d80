"""The wire format between a sandbox child and its host: length-prefixed JSON frames.

A frame is a 4-byte big-endian length and that many bytes of UTF-8 JSON. The child reads and
writes frames with the helpers here; the host (sandbox/worker_process.py) imports them instead
of copying them. Standard library only: this file runs inside the sandbox too.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any

FRAME_HEADER = struct.Struct(">I")
# A reply holds at most a batch of scores, bounded logs and tracebacks; anything bigger is a
# corrupted or hostile stream, not a message.
MAX_FRAME_BYTES = 256 * 1024 * 1024


def encode_frame(message: dict[str, Any]) -> bytes:
    body = json.dumps(message, separators=(",", ":"), default=to_json_compatible).encode()
    return FRAME_HEADER.pack(len(body)) + body


def frame_from_body(body: bytes) -> bytes:
    return FRAME_HEADER.pack(len(body)) + body


def to_json_compatible(value: object) -> object:
    # Dataset rows can hold numpy scalars and arrays or datetimes; send what JSON can carry.
    to_list = getattr(value, "tolist", None)
    if callable(to_list):
        return to_list()
    if isinstance(value, bytes | bytearray):
        return value.decode("utf-8", "replace")
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


def _read_exact(fd: int, size: int) -> bytes | None:
    chunks = []
    while size:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int) -> Any:
    header = _read_exact(fd, FRAME_HEADER.size)
    if header is None:
        return None
    (size,) = FRAME_HEADER.unpack(header)
    if size > MAX_FRAME_BYTES:
        raise ValueError(f"frame of {size} bytes exceeds the limit")
    body = _read_exact(fd, size)
    if body is None:
        return None
    return json.loads(body)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
