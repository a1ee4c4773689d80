"""A minimal Server-Sent Events reader over httpx, for the stream's API tests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass
class Message:
    event: str
    id: str | None
    data: str

    @property
    def json(self) -> Any:
        return json.loads(self.data)


def read_messages(response: httpx.Response) -> Iterator[Message]:
    event, message_id, data = "message", None, []
    for line in response.iter_lines():
        if line == "":
            if data:
                yield Message(event, message_id, "\n".join(data))
            event, message_id, data = "message", None, []
        elif line.startswith(":"):
            continue  # a heartbeat comment
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                event = value
            elif name == "id":
                message_id = value
            elif name == "data":
                data.append(value)


def messages_until(response: httpx.Response, done: Any, *, limit: int = 100_000) -> list[Message]:
    """Read until ``done(message)`` is true (that message included) or the stream ends."""
    seen: list[Message] = []
    for message in read_messages(response):
        seen.append(message)
        if done(message) or len(seen) >= limit:
            break
    return seen
