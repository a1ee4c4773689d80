"""Merged models and hub pushes built from a job's adapter."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field


class ExportStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    @property
    def is_terminal(self) -> bool:
        return self in (ExportStatus.SUCCEEDED, ExportStatus.FAILED)


class HubPush(BaseModel):
    repo_id: str
    private: bool
    token_secret: str | None = Field(
        None, description="The job secret the token came from; None: given with the request."
    )
    commit_url: str | None = Field(None, description="The hub commit, once pushed.")


class Export(BaseModel):
    """A job's adapter merged into its base model (an archive to download) or pushed to a
    Hugging Face hub repository, built on a worker (``jobs.create_export``)."""

    id: str
    job_id: str
    kind: str  # "merged" or "adapter"
    checkpoint_step: int | None = None
    dtype: str = "auto"
    hub: HubPush | None = None
    status: ExportStatus
    stage: str | None = Field(
        None, description="loading, merging, saving, archiving, storing or uploading."
    )
    progress: float = 0.0
    failure_reason: str | None = None
    size_bytes: int | None = None
    download_path: str | None = None
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
