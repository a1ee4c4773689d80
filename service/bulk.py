"""COPY into Postgres: the fastest way to store many rows (dataset rows, completions)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from psycopg.types.json import Jsonb
from sqlalchemy.orm import Session


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


def copy_rows(
    session: Session,
    table: str,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    json_columns: Sequence[str] = (),
) -> int:
    """COPY ``rows`` into ``table`` inside the session's transaction. Returns the row count."""
    json_positions = [columns.index(c) for c in json_columns]
    raw = session.connection().connection.driver_connection
    count = 0
    with raw.cursor() as cursor:  # type: ignore[union-attr]
        statement = f"COPY {table} ({', '.join(columns)}) FROM STDIN"
        with cursor.copy(statement) as copy:
            for row in rows:
                values = [without_nul(value) for value in row]
                for position in json_positions:
                    values[position] = Jsonb(values[position])
                copy.write_row(values)
                count += 1
    return count
