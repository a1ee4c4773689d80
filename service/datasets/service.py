from __future__ import annotations

import hashlib

from sqlalchemy.orm import Session

from service.datasets.parsing import detect_format, parse_dataset
from service.datasets.repository import DatasetRepository
from service.errors import NotFound
from service.models import Dataset, new_id

PREVIEW_ROWS = 5


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
    parsed = parse_dataset(content, file_format, max_rows=max_rows)
    dataset = Dataset(
        id=new_id("ds"),
        tenant_id=tenant_id,
        name=name or filename or "dataset",
        file_format=parsed.file_format,
        row_count=len(parsed.rows),
        columns=parsed.columns,
        prompt_kind=parsed.prompt_kind,
        size_bytes=len(content),
        sha256=hashlib.sha256(content).hexdigest(),
    )
    return DatasetRepository(session).add(dataset, parsed.rows)


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
    return DatasetRepository(session).rows(dataset.id, limit=PREVIEW_ROWS)
