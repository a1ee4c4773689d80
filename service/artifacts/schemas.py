from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict


class Checkpoint(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    step: int
    size_bytes: int
    created_at: datetime
    download_path: str


class CheckpointList(BaseModel):
    data: list[Checkpoint]
    final_adapter_path: str | None
