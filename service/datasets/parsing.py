"""Turns an uploaded file into rows, or says exactly what is wrong with it.

Every row needs a ``prompt``: a non-empty string, or a non-empty list of chat messages
(``{"role": ..., "content": ...}``). Other columns are passed to reward functions as they are.
In CSV a prompt cell that holds a JSON list of messages is read as a chat prompt.
A dataset for supervised fine-tuning may instead give every row ``messages`` (a conversation,
a non-empty list of chat messages) and no prompt (service.datasets.supervised).

Rows reach reward functions as uploaded, or the upload is refused naming what cannot be kept:
CSV is read strictly (a quote that never closes is an error naming the line it opened on,
not one row swallowing the rest of the file); Parquet types JSON lacks are converted without
losing data (see ``_cell``: binary as base64, maps as objects or key-value pairs).
"""

from __future__ import annotations

import base64
import csv
import io
import json
import math
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, Literal

from service.errors import InvalidDataset
from service.json_input import UnacceptableJson, check_json_value, loads_strict

FileFormat = Literal["jsonl", "csv", "parquet"]
SUPPORTED_FORMATS: tuple[FileFormat, ...] = ("jsonl", "csv", "parquet")
CHAT_ROLES = {"system", "user", "assistant", "tool", "developer"}


@dataclass
class ParsedDataset:
    file_format: FileFormat
    rows: list[dict[str, Any]]
    columns: list[str]
    prompt_kind: Literal["text", "chat"]


def detect_format(filename: str | None, declared: str | None) -> FileFormat:
    if declared:
        lowered = declared.lower()
        if lowered not in SUPPORTED_FORMATS:
            raise InvalidDataset(
                f"unsupported format {declared!r}: use one of {', '.join(SUPPORTED_FORMATS)}"
            )
        return lowered  # type: ignore[return-value]
    name = (filename or "").lower()
    if name.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    if name.endswith(".csv"):
        return "csv"
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    raise InvalidDataset(
        f"cannot tell the format of {filename!r}: name it .jsonl, .csv or .parquet, "
        "or send a 'format' form field"
    )


def parse_dataset(content: bytes, file_format: FileFormat, *, max_rows: int) -> ParsedDataset:
    if not content.strip():
        raise InvalidDataset("the file is empty")
    if file_format == "jsonl":
        rows = _read_jsonl(content)
    elif file_format == "csv":
        rows = _read_csv(content)
    else:
        rows = _read_parquet(content)
    if not rows:
        raise InvalidDataset("the file holds no rows")
    if len(rows) > max_rows:
        raise InvalidDataset(f"the file holds {len(rows)} rows; the limit is {max_rows}")
    if file_format != "jsonl":  # JSONL lines were checked as they were read
        _check_storable(rows)
    columns = _columns(rows)
    if "prompt" not in columns and "messages" in columns:
        _check_conversations(rows, file_format)
        return ParsedDataset(file_format, rows, columns, "chat")
    if "prompt" not in columns:
        raise InvalidDataset(
            f"no 'prompt' column: found columns {columns}. Every row needs a 'prompt' "
            "holding a string or a list of chat messages (or, for supervised fine-tuning, "
            "'messages': a conversation)"
        )
    prompt_kind = _check_prompts(rows, file_format)
    return ParsedDataset(file_format, rows, columns, prompt_kind)


def _check_storable(rows: list[dict[str, Any]]) -> None:
    """NUL characters (CSV allows them, Parquet strings may hold them), non-finite numbers and
    deep nesting cannot be stored as jsonb: refused, naming the row."""
    for index, row in enumerate(rows):
        try:
            check_json_value(row, where=f"row {index + 1}")
        except UnacceptableJson as exc:
            raise InvalidDataset(str(exc)) from None


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    seen: dict[str, None] = {}
    for row in rows:
        for key in row:
            seen.setdefault(key, None)
    return list(seen)


def _read_jsonl(content: bytes) -> list[dict[str, Any]]:
    try:
        text = content.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidDataset(f"JSONL must be UTF-8: {exc}") from None
    rows: list[dict[str, Any]] = []
    for line_number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = loads_strict(line, where=f"line {line_number}")
        except json.JSONDecodeError as exc:
            raise InvalidDataset(f"line {line_number}: not valid JSON ({exc.msg})") from None
        except UnacceptableJson as exc:
            raise InvalidDataset(str(exc)) from None
        if not isinstance(value, dict):
            raise InvalidDataset(
                f"line {line_number}: expected a JSON object, got {type(value).__name__}"
            )
        rows.append(value)
    return rows


def _read_csv(content: bytes) -> list[dict[str, Any]]:
    try:
        text = content.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidDataset(f"CSV must be UTF-8: {exc}") from None
    # strict: a quote that never closes is an error, not one row holding the rest of the file.
    reader = csv.reader(io.StringIO(text), strict=True)
    rows: list[dict[str, Any]] = []
    header: list[str] | None = None
    while True:
        starts_at = reader.line_num + 1
        try:
            cells = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            if "unexpected end of data" in str(exc):
                raise InvalidDataset(
                    f"CSV line {starts_at}: a quoted field opened on this line is never closed"
                ) from None
            raise InvalidDataset(f"CSV line {max(starts_at, reader.line_num)}: {exc}") from None
        if header is None:
            if not cells:
                raise InvalidDataset("CSV has no header row")
            header = cells
            continue
        if not cells:
            continue  # a blank line, as DictReader skips them
        if len(cells) > len(header):
            raise InvalidDataset(
                f"CSV line {reader.line_num}: more fields than the header's {len(header)}"
            )
        row: dict[str, Any] = dict(zip(header, cells, strict=False))
        for name in header[len(cells) :]:
            row[name] = None  # a short line: its missing fields, as DictReader fills them
        # A dataset's messages (when it has no prompts) are read as a prompt is; in a dataset
        # with prompts, a 'messages' column is another column, passed on as written.
        column = "prompt" if "prompt" in header else "messages"
        cell = row.get(column)
        if isinstance(cell, str) and cell.lstrip().startswith("["):
            row[column] = _maybe_chat_json(cell)
        rows.append(row)
    if header is None:
        raise InvalidDataset("CSV has no header row")
    return rows


def _maybe_chat_json(cell: str) -> Any:
    try:
        value = loads_strict(cell)
    except (json.JSONDecodeError, UnacceptableJson):
        return cell  # kept as the text it is
    return value if isinstance(value, list) else cell


def _read_parquet(content: bytes) -> list[dict[str, Any]]:
    """Each cell as JSON can hold it (see ``_cell``); columns are converted by their type."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(pa.BufferReader(content))
    except (pa.ArrowInvalid, OSError) as exc:
        raise InvalidDataset(f"not a readable Parquet file: {exc}") from None
    names = table.column_names
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise InvalidDataset(f"Parquet columns {repeated} appear more than once")
    if "prompt" in names and _is_binary(table.schema.field("prompt").type):
        raise InvalidDataset("column 'prompt' holds binary data: store prompts as strings")
    columns = [
        [_cell(value, field.type, field.name) for value in table.column(field.name).to_pylist()]
        for field in table.schema
    ]
    return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]


def _cell(value: Any, arrow_type: Any, column: str) -> Any:
    """A Parquet cell as a JSON value, keeping its data:

    - binary: a base64 string (JSON has no bytes; decode with ``base64.b64decode``);
    - map with string keys: an object (a key repeated within one cell is refused);
      map with other keys: a list of ``[key, value]`` pairs, keeping the keys' types;
    - timestamps, dates and times: ISO 8601 strings; durations: seconds; decimals: numbers;
      NaN and infinities: null.
    """
    import pyarrow as pa

    if value is None:
        return None
    if pa.types.is_map(arrow_type):
        pairs = [
            (_cell(k, arrow_type.key_type, column), _cell(v, arrow_type.item_type, column))
            for k, v in value
        ]
        if not _is_string(arrow_type.key_type):
            return [list(pair) for pair in pairs]
        cell = dict(pairs)
        if len(cell) < len(pairs):
            repeated = next(key for key, _ in pairs if sum(k == key for k, _ in pairs) > 1)
            raise InvalidDataset(
                f"column {column!r}: a map repeats the key {repeated!r}, which a JSON object "
                "cannot hold"
            )
        return cell
    if pa.types.is_struct(arrow_type):
        return {
            field.name: _cell(value.get(field.name), field.type, column) for field in arrow_type
        }
    if (
        pa.types.is_list(arrow_type)
        or pa.types.is_large_list(arrow_type)
        or pa.types.is_fixed_size_list(arrow_type)
    ):
        return [_cell(item, arrow_type.value_type, column) for item in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, timedelta):
        return value.total_seconds()
    return value


def _is_binary(arrow_type: Any) -> bool:
    import pyarrow as pa

    return bool(
        pa.types.is_binary(arrow_type)
        or pa.types.is_large_binary(arrow_type)
        or pa.types.is_fixed_size_binary(arrow_type)
    )


def _is_string(arrow_type: Any) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type))


def _check_prompts(rows: list[dict[str, Any]], file_format: FileFormat) -> Literal["text", "chat"]:
    kinds: set[str] = set()
    for index, row in enumerate(rows):
        where = f"row {index + 1}" if file_format != "jsonl" else f"record {index + 1}"
        prompt = row.get("prompt")
        if isinstance(prompt, str):
            if not prompt.strip():
                raise InvalidDataset(f"{where}: 'prompt' is empty")
            kinds.add("text")
        elif isinstance(prompt, list):
            check_messages(prompt, where, "prompt")
            kinds.add("chat")
        else:
            raise InvalidDataset(
                f"{where}: 'prompt' must be a string or a list of chat messages, "
                f"got {type(prompt).__name__}"
            )
    if len(kinds) > 1:
        raise InvalidDataset("mixed prompts: either every prompt is a string or every one is chat")
    return "chat" if "chat" in kinds else "text"


def _check_conversations(rows: list[dict[str, Any]], file_format: FileFormat) -> None:
    """Every row of a dataset without prompts holds a conversation in ``messages``."""
    for index, row in enumerate(rows):
        where = f"row {index + 1}" if file_format != "jsonl" else f"record {index + 1}"
        messages = row.get("messages")
        if not isinstance(messages, list):
            raise InvalidDataset(
                f"{where}: 'messages' must be a list of chat messages, got "
                f"{type(messages).__name__}: a dataset without prompts holds a conversation "
                "in every row's 'messages'"
            )
        check_messages(messages, where, "messages")


def check_messages(messages: list[Any], where: str, column: str) -> None:
    """A non-empty list of {"role", "content"} messages (content a string; null or absent in
    an assistant message with tool_calls, as OpenAI's chat format writes a call), or
    InvalidDataset naming ``where`` and the message."""
    if not messages:
        raise InvalidDataset(f"{where}: {column!r} is an empty list of messages")
    for position, message in enumerate(messages):
        if not isinstance(message, dict) or not (
            isinstance(message.get("content"), str) or _calls_instead_of_content(message)
        ):
            raise InvalidDataset(
                f"{where}: message {position} must be an object with a string 'content' "
                "(null only in an assistant message with 'tool_calls')"
            )
        if message.get("role") not in CHAT_ROLES:
            raise InvalidDataset(
                f"{where}: message {position} has role {message.get('role')!r}; "
                f"expected one of {sorted(CHAT_ROLES)}"
            )


def _calls_instead_of_content(message: dict[str, Any]) -> bool:
    return (
        message.get("content") is None
        and message.get("role") == "assistant"
        and isinstance(message.get("tool_calls"), list)
        and bool(message["tool_calls"])
    )
