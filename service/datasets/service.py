from __future__ import annotations

import hashlib
from typing import Any

from sqlalchemy.orm import Session

from service.datasets.parsing import detect_format, parse_dataset
from service.datasets.repository import DatasetRepository
from service.errors import InvalidDataset, NotFound
from service.json_input import UnacceptableJson, check_storable_text
from service.models import Dataset, new_id

PREVIEW_ROWS = 5
# A preview is for a glance: long values are cut (a single row may hold 50 MB), with a marker
# saying how much was left out.
PREVIEW_STRING_CHARS = 1000
PREVIEW_ITEMS = 50
MAX_NAME_CHARS = 300  # the datasets.name column


def create_dataset(
    session: Session,
    tenant_id: str,
    *,
    content: bytes,
    filename: str | None,
    declared_format: str | None,
    name: str | None,
    max_rows: int,
) -> Dataset:
    file_format = detect_format(filename, declared_format)
    name = _checked_name(name, filename)
    parsed = parse_dataset(content, file_format, max_rows=max_rows)
    dataset = Dataset(
        id=new_id("ds"),
        tenant_id=tenant_id,
        name=name,
        file_format=parsed.file_format,
        row_count=len(parsed.rows),
        columns=parsed.columns,
        prompt_kind=parsed.prompt_kind,
        size_bytes=len(content),
        sha256=hashlib.sha256(content).hexdigest(),
    )
    return DatasetRepository(session).add(dataset, parsed.rows)


def _checked_name(name: str | None, filename: str | None) -> str:
    """The dataset's name: the one given, else the file's name."""
    chosen, what = (name, "the name") if name else (filename, "the file name")
    if not chosen:
        return "dataset"
    try:
        check_storable_text(chosen, what=what)
    except UnacceptableJson as exc:
        raise InvalidDataset(str(exc)) from None
    if len(chosen) > MAX_NAME_CHARS:
        hint = "" if name else ": send a shorter 'name' form field"
        raise InvalidDataset(
            f"{what} has {len(chosen)} characters; the limit is {MAX_NAME_CHARS}{hint}"
        )
    return chosen


def get_dataset(session: Session, tenant_id: str, dataset_id: str) -> Dataset:
    dataset = DatasetRepository(session).get(tenant_id, dataset_id)
    if dataset is None:
        # Another tenant's dataset is reported exactly like a missing one.
        raise NotFound(f"dataset {dataset_id!r} not found")
    return dataset


def list_datasets(
    session: Session, tenant_id: str, *, limit: int, after: str | None
) -> list[Dataset]:
    return DatasetRepository(session).list_datasets(tenant_id, limit=limit, after=after)


def preview_rows(session: Session, dataset: Dataset) -> list[dict]:
    rows = DatasetRepository(session).rows(dataset.id, limit=PREVIEW_ROWS)
    return [preview_value(row) for row in rows]


def preview_value(value: Any) -> Any:
    """``value`` with strings cut to PREVIEW_STRING_CHARS and lists and objects to their first
    PREVIEW_ITEMS entries; each cut ends in a marker ``… [N more characters|items|keys]``."""
    if isinstance(value, str) and len(value) > PREVIEW_STRING_CHARS:
        left_out = len(value) - PREVIEW_STRING_CHARS
        return f"{value[:PREVIEW_STRING_CHARS]}… [{left_out} more characters]"
    if isinstance(value, list):
        shown = [preview_value(item) for item in value[:PREVIEW_ITEMS]]
        if len(value) > PREVIEW_ITEMS:
            shown.append(f"… [{len(value) - PREVIEW_ITEMS} more items]")
        return shown
    if isinstance(value, dict):
        kept = {key: preview_value(item) for key, item in list(value.items())[:PREVIEW_ITEMS]}
        if len(value) > PREVIEW_ITEMS:
            kept["…"] = f"[{len(value) - PREVIEW_ITEMS} more keys]"
        return kept
    return value
