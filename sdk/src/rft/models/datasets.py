"""Uploaded datasets."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field


class Dataset(BaseModel):
    id: str
    name: str
    file_format: str
    row_count: int
    columns: list[str]
    prompt_kind: str
    size_bytes: int
    sha256: str
    created_at: datetime


class DatasetDetail(Dataset):
    preview: list[dict[str, Any]] = Field(default_factory=list)
