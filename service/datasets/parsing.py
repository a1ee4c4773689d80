"""Turns an uploaded file into rows, or says exactly what is wrong with it.

Every row needs a ``prompt``: a non-empty string, or a non-empty list of chat messages
(``{"role": ..., "content": ...}``). Other columns are passed to reward functions as they are.
In CSV a prompt cell that holds a JSON list of messages is read as a chat prompt.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Literal

from service.errors import InvalidDataset

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
    columns = _columns(rows)
    if "prompt" not in columns:
        raise InvalidDataset(
            f"no 'prompt' column: found columns {columns}. Every row needs a 'prompt' "
            "holding a string or a list of chat messages"
        )
    prompt_kind = _check_prompts(rows, file_format)
    return ParsedDataset(file_format, rows, columns, prompt_kind)


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
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidDataset(f"line {line_number}: not valid JSON ({exc.msg})") from None
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
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames:
        raise InvalidDataset("CSV has no header row")
    rows: list[dict[str, Any]] = []
    try:
        for row in reader:
            if None in row:
                raise InvalidDataset(
                    f"CSV line {reader.line_num}: more fields than the header's "
                    f"{len(reader.fieldnames)}"
                )
            prompt = row.get("prompt")
            if isinstance(prompt, str) and prompt.lstrip().startswith("["):
                row["prompt"] = _maybe_chat_json(prompt)
            rows.append(dict(row))
    except csv.Error as exc:
        raise InvalidDataset(f"CSV line {reader.line_num}: {exc}") from None
    return rows


def _maybe_chat_json(cell: str) -> Any:
    try:
        value = json.loads(cell)
    except json.JSONDecodeError:
        return cell
    return value if isinstance(value, list) else cell


def _read_parquet(content: bytes) -> list[dict[str, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(pa.BufferReader(content))
    except (pa.ArrowInvalid, OSError) as exc:
        raise InvalidDataset(f"not a readable Parquet file: {exc}") from None
    return [{k: _jsonable(v) for k, v in row.items()} for row in table.to_pylist()]


def _jsonable(value: Any) -> Any:
    """Parquet cells may hold types JSON lacks; store what reward functions can use."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


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
            _check_messages(prompt, where)
            kinds.add("chat")
        else:
            raise InvalidDataset(
                f"{where}: 'prompt' must be a string or a list of chat messages, "
                f"got {type(prompt).__name__}"
            )
    if len(kinds) > 1:
        raise InvalidDataset("mixed prompts: either every prompt is a string or every one is chat")
    return "chat" if "chat" in kinds else "text"


def _check_messages(messages: list[Any], where: str) -> None:
    if not messages:
        raise InvalidDataset(f"{where}: 'prompt' is an empty list of messages")
    for position, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("content"), str):
            raise InvalidDataset(
                f"{where}: message {position} must be an object with a string 'content'"
            )
        if message.get("role") not in CHAT_ROLES:
            raise InvalidDataset(
                f"{where}: message {position} has role {message.get('role')!r}; "
                f"expected one of {sorted(CHAT_ROLES)}"
            )
