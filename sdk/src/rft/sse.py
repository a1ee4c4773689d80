"""A small incremental Server-Sent Events decoder (the WHATWG ``text/event-stream`` rules).

It is fed raw bytes as they arrive (from a sync or an async response alike) and returns the
messages those bytes complete. Lines end at CRLF, LF or CR, even when a CRLF is split across
two chunks; a message is dispatched at a blank line; ``data`` lines are joined with newlines;
comment lines (``: keep-alive``) are skipped; the ``id`` persists from message to message; a
message cut off by the end of the stream is never returned.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass


@dataclass(frozen=True)
class ServerSentEvent:
    event: str
    """The ``event:`` field, ``"message"`` when the server sent none."""
    data: str
    id: str | None
    """The last ``id:`` the stream has carried so far: where to resume from."""
    retry: int | None = None
    """The reconnection delay (ms) the server asked for, if any so far."""


class SSEDecoder:
    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""  # text after the last line break seen
        self._at_start = True
        self._event = ""
        self._data: list[str] = []
        self._id_buffer: str | None = None  # the latest id line, committed at dispatch
        self._last_id: str | None = None
        self._retry: int | None = None

    @property
    def last_event_id(self) -> str | None:
        """The id of the last complete message (or id-only block): where to resume from."""
        return self._last_id

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """The messages completed by ``chunk``, in order."""
        text = self._pending + self._decoder.decode(chunk)
        if self._at_start and text:
            text = text.removeprefix("\ufeff")
            self._at_start = False
        messages: list[ServerSentEvent] = []
        start = 0
        length = len(text)
        while True:
            cr, lf = text.find("\r", start), text.find("\n", start)
            if cr == -1 and lf == -1:
                break
            end = lf if cr == -1 or (lf != -1 and lf < cr) else cr
            if text[end] == "\r" and end + 1 == length:
                break  # a CR at the chunk's end may be the first half of a CRLF: wait
            line = text[start:end]
            start = end + 2 if text.startswith("\r\n", end) else end + 1
            message = self._line(line)
            if message is not None:
                messages.append(message)
        self._pending = text[start:]
        return messages

    def _line(self, line: str) -> ServerSentEvent | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None  # a comment, such as the server's keep-alive
        name, colon, value = line.partition(":")
        if colon:
            value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id":
            if "\0" not in value:
                self._id_buffer = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self._retry = int(value)
        # Any other field is ignored, as the standard asks.
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        event, data = self._event, self._data
        self._event, self._data = "", []
        self._last_id = self._id_buffer
        if not data:
            return None  # e.g. a lone "id:" block: it moved the cursor, but is no message
        return ServerSentEvent(
            event=event or "message", data="\n".join(data), id=self._last_id, retry=self._retry
        )
