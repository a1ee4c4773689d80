from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from service.jobs.schemas import RewardFunctions


class RewardFunctionConfig(BaseModel):
    source: str
    weight: float
    version: int = Field(description="Bumped each time this function's source changes.")
    label: str = Field(description="name_vN, as shown in graphs.")


class JobConfig(BaseModel):
    job_id: str
    version: int
    reward_functions: dict[str, RewardFunctionConfig]
    temperature: float | None
    top_p: float | None
    allow_network: bool
    runtime_packages: list[str]
    secret_names: list[str] = Field(description="Set at job creation; values are never shown.")
    created_at: datetime
    applied_at_step: int | None = Field(
        description="The first step this version scored; null until the worker applies it."
    )


class JobConfigUpdate(BaseModel):
    """The whole editable config: functions missing here are removed from the next step on."""

    model_config = ConfigDict(extra="forbid")

    reward_functions: RewardFunctions
    temperature: float | None = Field(None, gt=0, le=5.0)
    top_p: float | None = Field(None, gt=0, le=1.0)


class JobConfigUpdated(BaseModel):
    version: int
    applies_from_step: int = Field(
        description="The next step to start; the worker applies the newest version there "
        "(at the next generation when several steps share one)."
    )
    changed_functions: list[str] = Field(description="Functions whose source got a new version.")
    added_functions: list[str]
    removed_functions: list[str]
    config: JobConfig


class RescoredCompletion(BaseModel):
    completion_id: int
    prompt_index: int
    group_position: int
    old_scores: dict[str, float | None]
    new_scores: dict[str, float | None]
    old_total: float | None
    new_total: float | None
    old_advantage_sign: int
    new_advantage_sign: int


class DryRunResult(BaseModel):
    dry_run: bool = True
    step: int | None = Field(description="The step re-scored; null when none is recorded yet.")
    completions: list[RescoredCompletion]
    advantage_sign_changes: int
    errors: dict[str, list[str]] = Field(description="Per function, the errors it raised.")
