from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Query, UploadFile
from fastapi.responses import Response

from service.auth.dependencies import CurrentTenant
from service.db import SessionDep
from service.errors import PayloadTooLarge
from service.openai_compat.errors import OpenAIErrorRoute
from service.openai_compat.files import service
from service.openai_compat.files.schemas import FileDeleted, FileObject, OpenAIPage
from service.settings import get_settings

router = APIRouter(
    prefix="/v1/files", tags=["openai-compatible fine-tuning"], route_class=OpenAIErrorRoute
)


@router.post("", response_model=FileObject)
def create_file(
    session: SessionDep,
    tenant_id: CurrentTenant,
    file: UploadFile,
    purpose: Annotated[str, Form()],
) -> FileObject:
    """OpenAI's files.create for purpose "fine-tune": the JSONL becomes a dataset."""
    settings = get_settings()
    content = file.file.read(settings.max_upload_bytes + 1)
    if len(content) > settings.max_upload_bytes:
        raise PayloadTooLarge(f"file is larger than the {settings.max_upload_bytes}-byte limit")
    return service.upload_file(
        session,
        tenant_id,
        content=content,
        filename=file.filename,
        purpose=purpose,
        max_rows=settings.max_dataset_rows,
    )


@router.get("", response_model=OpenAIPage[FileObject])
def list_files(
    session: SessionDep,
    tenant_id: CurrentTenant,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 10_000,
    after: str | None = None,
    purpose: str | None = None,
) -> OpenAIPage[FileObject]:
    if purpose not in (None, "fine-tune"):
        return OpenAIPage[FileObject](data=[], has_more=False)
    files, has_more = service.list_files(session, tenant_id, limit=limit, after=after)
    return OpenAIPage[FileObject](
        data=files,
        has_more=has_more,
        first_id=files[0].id if files else None,
        last_id=files[-1].id if files else None,
    )


@router.get("/{file_id}", response_model=FileObject)
def retrieve_file(session: SessionDep, tenant_id: CurrentTenant, file_id: str) -> FileObject:
    return service.file_object(service.get_file(session, tenant_id, file_id))


@router.delete("/{file_id}", response_model=FileDeleted)
def delete_file(session: SessionDep, tenant_id: CurrentTenant, file_id: str) -> FileDeleted:
    return service.delete_file(session, tenant_id, file_id)


@router.get("/{file_id}/content", response_class=Response)
def file_content(session: SessionDep, tenant_id: CurrentTenant, file_id: str) -> Response:
    return Response(
        service.file_content(session, tenant_id, file_id), media_type="application/jsonl"
    )
