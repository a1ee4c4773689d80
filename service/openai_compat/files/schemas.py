"""OpenAI's file objects (openai.types.FileObject, FileDeleted) and list page."""

from __future__ import annotations

from typing import Generic, Literal, TypeVar

from pydantic import BaseModel

Item = TypeVar("Item")


class OpenAIPage(BaseModel, Generic[Item]):
    """OpenAI's list shape, which the openai package's cursor pages read."""

    object: Literal["list"] = "list"
    data: list[Item]
    has_more: bool
    first_id: str | None = None
    last_id: str | None = None


class FileObject(BaseModel):
    id: str
    object: Literal["file"] = "file"
    bytes: int
    created_at: int
    filename: str
    purpose: Literal["fine-tune"] = "fine-tune"
    status: Literal["uploaded", "processed", "error"] = "processed"
    expires_at: int | None = None
    status_details: str | None = None


class FileDeleted(BaseModel):
    id: str
    object: Literal["file"] = "file"
    deleted: bool
