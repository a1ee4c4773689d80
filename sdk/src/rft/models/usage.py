"""Device-seconds and tokens used, per day or per job."""

from __future__ import annotations

from datetime import date, datetime

from pydantic import BaseModel, ConfigDict, Field


class UsageRow(BaseModel):
    day: date | None = Field(None, description="The UTC day (group_by=day).")
    job_id: str | None = Field(None, description="The job (group_by=job).")
    gpu_seconds: float = Field(
        description="Device-seconds held in the period (wall time x devices; paused and "
        "queued time count nothing)."
    )
    tokens: int = Field(description="Completion tokens generated in the period.")
    jobs: int = Field(description="Jobs that held devices or recorded steps in the period.")


class Usage(BaseModel):
    """The calling tenant's usage (GPU-seconds, completion tokens, jobs) over [from, to)."""

    model_config = ConfigDict(populate_by_name=True)

    start: datetime = Field(alias="from")
    end: datetime = Field(alias="to")
    group_by: str = Field(description="'day' or 'job': what each of rows is.")
    gpu_seconds: float
    tokens: int
    jobs: int
    rows: list[UsageRow] = Field(default_factory=list)
