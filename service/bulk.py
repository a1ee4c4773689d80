"""COPY into Postgres: the fastest way to store many rows (dataset rows, completions).

Rows are written in COPY's text format, encoded here rather than by psycopg's write_row(),
which costs ~10 us a row in Python (a dumper per value, a Jsonb wrapper per JSON value) and
capped recording near 25k rows/s.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy.orm import Session

_COPY_ESCAPES = str.maketrans(
    {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\x00": "\ufffd"}
)
_NEEDS_ESCAPE = re.compile("[\\\\\n\r\t\x00]")
NULL = "\\N"


def without_nul(value: Any) -> Any:
    """Postgres text and jsonb cannot hold NUL. Models do emit it (byte-level tokenizers can
    produce any byte), and user code prints it: store U+FFFD in its place."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd") if "\x00" in value else value
    if isinstance(value, dict):
        return {without_nul(k): without_nul(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [without_nul(v) for v in value]
    return value


def copy_text(value: str) -> str:
    """A text value in COPY text format (NUL becomes U+FFFD)."""
    return value.translate(_COPY_ESCAPES) if _NEEDS_ESCAPE.search(value) else value


def copy_json(value: Any) -> str:
    """A json/jsonb value in COPY text format (jsonb refuses \\u0000: U+FFFD instead)."""
    encoded = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if "\\u0000" in encoded:
        encoded = json.dumps(without_nul(value), ensure_ascii=False, separators=(",", ":"))
    return copy_text(encoded)


def copy_number(value: float | None) -> str:
    if value is None:
        return NULL
    if math.isfinite(value):
        return repr(float(value))
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def copy_line(*values: str | int | None) -> str:
    """One row of already-encoded values (strings as copy_text/copy_json made them)."""
    return "\t".join(NULL if v is None else str(v) for v in values) + "\n"


def copy_lines(cursor: Any, table: str, columns: Sequence[str], lines: Iterable[str]) -> None:
    """COPY encoded ``lines`` into ``table`` on a psycopg cursor."""
    text = "".join(lines)
    if not text:
        return
    with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
        copy.write(text)


def copy_into(session: Session, table: str, columns: Sequence[str], lines: Iterable[str]) -> None:
    """copy_lines inside the session's transaction."""
    raw = session.connection().connection.driver_connection
    with raw.cursor() as cursor:  # type: ignore[union-attr]
        copy_lines(cursor, table, columns, lines)
