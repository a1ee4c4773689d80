"""A job's live config, and what changing it did (or would do)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rft.agents import EnvironmentMap, ToolMap
from rft.models.rewards import RewardFunctionMap


class JobConfig(BaseModel):
    """The live part of a job's configuration: what can change while it trains."""

    model_config = ConfigDict(validate_assignment=True)

    job_id: str | None = None
    version: int | None = None
    reward_functions: RewardFunctionMap = Field(default_factory=RewardFunctionMap)
    # Agent jobs: tools and environments by name. ``config.tools["search"] = search`` (a
    # function, rft.Tool or source string) and ``config.environments["calc"] =
    # rft.Environment.from_file(...)`` are converted on the way in.
    tools: ToolMap = Field(default_factory=ToolMap)
    environments: EnvironmentMap = Field(default_factory=EnvironmentMap)
    temperature: float | None = None
    top_p: float | None = None
    allow_network: bool | None = None
    runtime_packages: list[str] = Field(default_factory=list)
    secret_names: list[str] = Field(default_factory=list)
    created_at: datetime | None = None
    applied_at_step: int | None = Field(
        None, description="The first step this version scored; None until the worker applies it."
    )
    etag: str | None = Field(
        None, exclude=True, description="The ETag it was read with; sent back as If-Match."
    )

    def to_update_request(self) -> dict[str, Any]:
        body: dict[str, Any] = {"reward_functions": self.reward_functions.to_request()}
        # Sent when read from the server (which names them, even empty) or set by the caller:
        # a config without them (an older server, a job without tools) leaves them alone.
        if self.tools or "tools" in self.model_fields_set:
            body["tools"] = self.tools.to_request()
        if self.environments or "environments" in self.model_fields_set:
            body["environments"] = self.environments.to_request()
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.top_p is not None:
            body["top_p"] = self.top_p
        return body


class ConfigUpdate(BaseModel):
    version: int
    applies_from_step: int = Field(
        description="The first step that will use this version (the step after the one the "
        "worker has begun)."
    )
    secrets_changed: bool = Field(False, description="Whether this update rotated secrets.")
    changed_functions: list[str] = Field(default_factory=list)
    added_functions: list[str] = Field(default_factory=list)
    removed_functions: list[str] = Field(default_factory=list)
    changed_tools: list[str] = Field(default_factory=list)
    added_tools: list[str] = Field(default_factory=list)
    removed_tools: list[str] = Field(default_factory=list)
    changed_environments: list[str] = Field(
        default_factory=list, description="Source or class_name changed (not a weight alone)."
    )
    added_environments: list[str] = Field(default_factory=list)
    removed_environments: list[str] = Field(default_factory=list)
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
    """What a config change would have done to the last recorded step; nothing is stored."""

    dry_run: bool = True
    step: int | None = Field(description="The step re-scored; None when none is recorded yet.")
    completions: list[RescoredCompletion] = Field(default_factory=list)
    advantage_sign_changes: int
    errors: dict[str, list[str]] = Field(default_factory=dict)
    not_scored: list[str] = Field(
        default_factory=list,
        description="Reward models naming another model than the one that scored the step: "
        "not run by the server (None in new_scores, left out of new totals).",
    )
