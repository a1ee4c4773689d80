"""Files with purpose "fine-tune" are our datasets: each JSONL row's ``messages`` becomes the
chat prompt, its other fields stay on the row and reach graders as ``item``. A file's id is
its dataset's id, so the native API and the dashboard show it too."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy.orm import Session

from service.datasets.repository import DatasetRepository
from service.datasets.service import create_dataset, get_dataset, list_datasets
from service.errors import BadRequest, Conflict, NotFound
from service.json_input import UnacceptableJson, loads_strict
from service.models import Dataset
from service.openai_compat.files.repository import FileRepository
from service.openai_compat.files.schemas import FileDeleted, FileObject


class InvalidFile(BadRequest):
    def __init__(self, detail: str, *, param: str = "file") -> None:
        super().__init__(detail)
        self.param = param


def file_object(dataset: Dataset) -> FileObject:
    return FileObject(
        id=dataset.id,
        bytes=dataset.size_bytes,
        created_at=int(dataset.created_at.timestamp()),
        filename=dataset.name,
    )


def rows_from_jsonl(content: bytes) -> list[dict[str, Any]]:
    """Our dataset rows from OpenAI's fine-tuning JSONL, or 400 naming the line."""
    rows = []
    for number, line in enumerate(content.decode("utf-8", errors="strict").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = loads_strict(line, where=f"line {number}")
        except UnacceptableJson as exc:
            raise InvalidFile(str(exc)) from None
        except ValueError as exc:  # a syntax error
            raise InvalidFile(f"line {number}: not JSON: {exc}") from None
        if not isinstance(record, dict):
            raise InvalidFile(f"line {number}: each line must be a JSON object")
        messages = record.get("messages")
        if not isinstance(messages, list) or not messages:
            raise InvalidFile(f"line {number}: 'messages' must be a non-empty list of messages")
        if "prompt" in record:
            raise InvalidFile(
                f"line {number}: 'prompt' is reserved (the row's messages become its prompt)"
            )
        rows.append({"prompt": messages, **{k: v for k, v in record.items() if k != "messages"}})
    if not rows:
        raise InvalidFile("the file holds no rows")
    return rows


def upload_file(
    session: Session,
    tenant_id: str,
    *,
    content: bytes,
    filename: str | None,
    purpose: str,
    max_rows: int,
) -> FileObject:
    if purpose != "fine-tune":
        raise InvalidFile(
            f"purpose {purpose!r} is not supported here: only 'fine-tune'", param="purpose"
        )
    try:
        rows = rows_from_jsonl(content)
    except UnicodeDecodeError as exc:
        raise InvalidFile(f"the file is not UTF-8 text: {exc}") from None
    dataset_content = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    dataset = create_dataset(
        session,
        tenant_id,
        content=dataset_content.encode(),
        filename=filename or "file.jsonl",
        declared_format="jsonl",
        name=filename,
        max_rows=max_rows,
    )
    return file_object(dataset)


def get_file(session: Session, tenant_id: str, file_id: str) -> Dataset:
    try:
        return get_dataset(session, tenant_id, file_id)
    except NotFound:
        raise NotFound(f"No such File object: {file_id}") from None


def list_files(
    session: Session, tenant_id: str, *, limit: int, after: str | None
) -> tuple[list[FileObject], bool]:
    datasets = list_datasets(session, tenant_id, limit=limit + 1, after=after)
    return [file_object(d) for d in datasets[:limit]], len(datasets) > limit


def delete_file(session: Session, tenant_id: str, file_id: str) -> FileDeleted:
    dataset = get_file(session, tenant_id, file_id)
    repository = FileRepository(session)
    if repository.used_by_a_job(dataset.id):
        raise Conflict(f"file {file_id} is used by a fine-tuning job and cannot be deleted")
    repository.delete(dataset)
    return FileDeleted(id=file_id, deleted=True)


def file_content(session: Session, tenant_id: str, file_id: str) -> bytes:
    """The file as OpenAI JSONL again: each row's prompt back under ``messages``."""
    dataset = get_file(session, tenant_id, file_id)
    lines = []
    for row in DatasetRepository(session).rows(dataset.id):
        record = {"messages": row["prompt"], **{k: v for k, v in row.items() if k != "prompt"}}
        lines.append(json.dumps(record, ensure_ascii=False) + "\n")
    return "".join(lines).encode()
