"""Device-seconds and tokens used, per day or per job."""

from __future__ import annotations

from datetime import date, datetime

from pydantic import BaseModel, ConfigDict, Field


class UsageRow(BaseModel):
    day: date | None = None
    job_id: str | None = None
    gpu_seconds: float
    tokens: int
    jobs: int


class Usage(BaseModel):
    """The tenant's GPU-seconds, completion tokens and jobs over [start, end)."""

    model_config = ConfigDict(populate_by_name=True)

    start: datetime = Field(alias="from")
    end: datetime = Field(alias="to")
    group_by: str
    gpu_seconds: float
    tokens: int
    jobs: int
    rows: list[UsageRow] = Field(default_factory=list)
