"""The stream's wire format: SSE messages and the resumable cursor carried in their ids."""

from __future__ import annotations

import re
from dataclasses import dataclass

from service.errors import BadRequest
from service.parameters import INT32_MAX, INT64_MAX

# ASCII digits: \d would also match other scripts' digits.
_CURSOR = re.compile(r"^s([0-9]{1,10})\.e([0-9]{1,19})$")


@dataclass(frozen=True)
class StreamCursor:
    """How far a client has read: the last step number and the last job_events id.

    Steps and job events are two independent sequences, so every message's SSE ``id`` holds
    both positions (``s<step>.e<event id>``, e.g. ``s12.e34``). Whatever message a client
    saw last, sending its id back (``Last-Event-ID`` or ``?after=``) resumes both sequences
    without gaps or duplicates.
    """

    last_step: int = 0
    last_event_id: int = 0

    @classmethod
    def parse(cls, text: str | None) -> StreamCursor:
        if text is None or not text.strip():
            return cls()
        match = _CURSOR.match(text.strip())
        # Past the columns' range (integer steps, bigint event ids) lies no cursor we sent.
        if match is None or int(match[1]) > INT32_MAX or int(match[2]) > INT64_MAX:
            raise BadRequest(
                f"invalid event stream cursor {text!r}: expected 's<step>.e<event id>', "
                "as sent in the stream's 'id:' lines"
            )
        return cls(last_step=int(match[1]), last_event_id=int(match[2]))

    def __str__(self) -> str:
        return f"s{self.last_step}.e{self.last_event_id}"


@dataclass(frozen=True)
class ServerSentEvent:
    event: str
    data: str
    id: StreamCursor | None = None

    def encode(self) -> str:
        # Our payloads are compact JSON (no raw newlines), but SSE ends a field at a newline,
        # so split defensively rather than let a stray newline corrupt the stream.
        lines = [f"event: {_single_line(self.event)}"]
        if self.id is not None:
            lines.append(f"id: {self.id}")
        lines.extend(f"data: {line}" for line in self.data.splitlines() or [""])
        return "\n".join(lines) + "\n\n"


def _single_line(text: str) -> str:
    return text.replace("\r", " ").replace("\n", " ")


HEARTBEAT = ": keep-alive\n\n"
