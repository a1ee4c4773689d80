"""Turning what a user has in hand (a file, rows, a DataFrame, a Hugging Face dataset) into
the bytes and file name the upload endpoint takes.

pandas and datasets are recognised by their type's module instead of being imported: the
client never needs them installed, and importing them would cost seconds for nothing.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeAlias

from rft.errors import RFTError

# Any stands for a pandas DataFrame or a datasets.Dataset: typing them would import them.
DatasetSource: TypeAlias = str | os.PathLike[str] | Sequence[Mapping[str, Any]] | Any


def _type_module(value: Any) -> str:
    return type(value).__module__.split(".")[0]


def _rows_to_jsonl(rows: Sequence[Mapping[str, Any]]) -> bytes:
    lines = []
    for index, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise RFTError(f"row {index} is a {type(row).__name__}; every row must be a dict")
        lines.append(json.dumps(dict(row), ensure_ascii=False, default=str))
    return ("\n".join(lines) + "\n").encode()


def dataset_file(source: Any, *, name: str | None) -> tuple[str, bytes]:
    """``(file name, content)`` for an upload; the server infers the format from the name."""
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        return path.name, path.read_bytes()
    stem = name or "dataset"
    module = _type_module(source)
    if module == "pandas" and hasattr(source, "to_json"):
        text = source.to_json(orient="records", lines=True, force_ascii=False, date_format="iso")
        return f"{stem}.jsonl", text.encode()
    if module == "datasets" and hasattr(source, "to_json"):
        buffer = io.BytesIO()
        source.to_json(buffer, lines=True, force_ascii=False)
        return f"{stem}.jsonl", buffer.getvalue()
    if isinstance(source, Sequence) and not isinstance(source, bytes | bytearray):
        if not source:
            raise RFTError("the dataset has no rows")
        return f"{stem}.jsonl", _rows_to_jsonl(source)
    raise RFTError(
        "upload takes a file path, a list of dicts, a pandas DataFrame or a datasets.Dataset, "
        f"not {type(source).__name__}"
    )
