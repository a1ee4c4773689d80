from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, UploadFile, status

from service.auth.dependencies import CurrentTenant
from service.datasets import service
from service.datasets.schemas import Dataset, DatasetDetail
from service.db import SessionDep
from service.errors import PayloadTooLarge
from service.pagination import DEFAULT_PAGE_SIZE, Page, PageLimit, paginate
from service.settings import get_settings

router = APIRouter(prefix="/v1/datasets", tags=["datasets"])


@router.post("", status_code=status.HTTP_201_CREATED, response_model=Dataset)
def upload_dataset(
    session: SessionDep,
    tenant_id: CurrentTenant,
    file: UploadFile,
    name: Annotated[str | None, Form(max_length=service.MAX_NAME_CHARS)] = None,
    format: Annotated[str | None, Form(description="jsonl, csv or parquet")] = None,
) -> Dataset:
    limit = get_settings().max_upload_bytes
    content = file.file.read(limit + 1)
    if len(content) > limit:
        raise PayloadTooLarge(f"dataset file is larger than the {limit}-byte limit")
    dataset = service.create_dataset(
        session,
        tenant_id,
        content=content,
        filename=file.filename,
        declared_format=format,
        name=name,
        max_rows=get_settings().max_dataset_rows,
    )
    return Dataset.model_validate(dataset)


@router.get("", response_model=Page[Dataset])
def list_datasets(
    session: SessionDep,
    tenant_id: CurrentTenant,
    limit: PageLimit = DEFAULT_PAGE_SIZE,
    after: str | None = None,
) -> Page[Dataset]:
    datasets = service.list_datasets(session, tenant_id, limit=limit + 1, after=after)
    return paginate(datasets, limit, Dataset, lambda item: item.id)


@router.get("/{dataset_id}", response_model=DatasetDetail)
def get_dataset(session: SessionDep, tenant_id: CurrentTenant, dataset_id: str) -> DatasetDetail:
    dataset = service.get_dataset(session, tenant_id, dataset_id)
    return DatasetDetail.model_validate(
        {
            **Dataset.model_validate(dataset).model_dump(),
            "preview": service.preview_rows(session, dataset),
        }
    )
