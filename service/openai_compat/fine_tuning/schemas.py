"""OpenAI's fine-tuning objects (openai.types.fine_tuning): the create request, the job, its
events and checkpoints. Field names, object names and status values are OpenAI's."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from service.http_tools.schemas import HttpToolCreate
from service.openai_compat.graders.schemas import Grader

Auto = Literal["auto"]
# OpenAI's words; rft's "pausing" reads "paused" (service.openai_status).
FineTuningJobStatus = Literal[
    "validating_files", "queued", "running", "succeeded", "failed", "cancelled", "paused"
]


class ReinforcementHyperparameters(BaseModel):
    # OpenAI's names, and rft's own by name beside them (service.our_extensions checks those).
    model_config = ConfigDict(extra="allow")

    batch_size: Auto | int | None = Field(None, description="-> prompts_per_step")
    compute_multiplier: Auto | float | None = Field(None, description="x num_generations")
    eval_interval: Auto | int | None = Field(None, description="-> eval_every")
    eval_samples: Auto | int | None = Field(None, description="-> eval_samples")
    learning_rate_multiplier: Auto | float | None = Field(None, description="x learning_rate")
    n_epochs: Auto | int | None = Field(None, description="-> train_steps")
    reasoning_effort: Literal["default", "low", "medium", "high"] | None = None
    max_turns: int | None = Field(None, ge=1, le=64, description="-> max_turns (agent jobs)")


def flat_tool(data: Any) -> Any:
    """A tool in OpenAI's function-tool form (``{"type": "function", "function": {name,
    description, parameters}, "url", "headers"}``, or those keys at the top level) as ours."""
    if not isinstance(data, dict):
        return data
    if data.get("type") not in (None, "function", "http"):
        return data  # the field's own validation words the error
    flat = {key: value for key, value in data.items() if key not in ("function", "type")}
    function = data.get("function")
    if isinstance(function, dict):
        flat = {**function, **flat}
    flat.pop("strict", None)  # OpenAI's strict schemas: every call here is checked anyway
    return {"type": "http", **flat}


class ReinforcementTool(HttpToolCreate):
    """An HTTP tool of an agent job (docs/agents.md): ours, or OpenAI's function-tool form."""

    @model_validator(mode="before")
    @classmethod
    def _flat(cls, data: Any) -> Any:
        return flat_tool(data)


class ReinforcementMethod(BaseModel):
    model_config = ConfigDict(extra="forbid")

    grader: Grader
    hyperparameters: ReinforcementHyperparameters | None = None
    tools: list[ReinforcementTool] | None = Field(
        None,
        max_length=32,
        description="Ours: HTTP tools the model calls during each rollout (an agent job).",
    )


class SupervisedHyperparameters(BaseModel):
    model_config = ConfigDict(extra="allow")  # as ReinforcementHyperparameters

    batch_size: Auto | int | None = Field(None, description="-> batch_size")
    learning_rate_multiplier: Auto | float | None = Field(None, description="x learning_rate")
    n_epochs: Auto | int | None = Field(None, description="-> train_steps")


class SupervisedMethod(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hyperparameters: SupervisedHyperparameters | None = None


class Method(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["supervised", "dpo", "reinforcement"]
    reinforcement: ReinforcementMethod | None = None
    supervised: SupervisedMethod | None = None


class FineTuningJobCreate(BaseModel):
    """openai.types.fine_tuning.JobCreateParams."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, max_length=500)
    training_file: str = Field(min_length=1, max_length=64)
    validation_file: str | None = Field(None, max_length=64)
    method: Method | None = None
    seed: int | None = Field(None, ge=0, le=2**32 - 1)
    suffix: str | None = Field(None, max_length=64)
    metadata: dict[str, str] | None = None
    integrations: list[dict[str, Any]] | None = None
    hyperparameters: dict[str, Any] | None = Field(
        None,
        description="Deprecated by OpenAI in favour of method: a supervised job's "
        "hyperparameters (when method is left out or supervised without its own).",
    )


class JobError(BaseModel):
    code: str
    message: str
    param: str | None = None


class JobHyperparameters(BaseModel):
    batch_size: Auto | int | None = None
    learning_rate_multiplier: Auto | float | None = None
    n_epochs: Auto | int | None = None


class FineTuningJob(BaseModel):
    id: str
    object: Literal["fine_tuning.job"] = "fine_tuning.job"
    created_at: int
    error: JobError | None = None
    fine_tuned_model: str | None = None
    finished_at: int | None = None
    hyperparameters: JobHyperparameters
    model: str
    organization_id: str
    result_files: list[str] = Field(default_factory=list)
    seed: int
    status: FineTuningJobStatus
    trained_tokens: int | None = None
    training_file: str
    validation_file: str | None = None
    estimated_finish: int | None = None
    integrations: list[dict[str, Any]] | None = None
    metadata: dict[str, str] | None = None
    method: dict[str, Any] | None = None
    suffix: str | None = None


class FineTuningJobEvent(BaseModel):
    id: str
    object: Literal["fine_tuning.job.event"] = "fine_tuning.job.event"
    created_at: int
    level: Literal["info", "warn", "error"]
    message: str
    data: dict[str, Any] | None = None
    type: Literal["message", "metrics"] = "message"


class CheckpointMetrics(BaseModel):
    step: float | None = None
    train_loss: float | None = None
    train_reward_mean: float | None = None
    valid_reward_mean: float | None = None
    full_valid_loss: float | None = None
    full_valid_mean_token_accuracy: float | None = None
    train_mean_token_accuracy: float | None = None
    valid_loss: float | None = None
    valid_mean_token_accuracy: float | None = None


class FineTuningJobCheckpoint(BaseModel):
    id: str
    object: Literal["fine_tuning.job.checkpoint"] = "fine_tuning.job.checkpoint"
    created_at: int
    fine_tuned_model_checkpoint: str
    fine_tuning_job_id: str
    metrics: CheckpointMetrics
    step_number: int
