"""What a job records as it trains: steps, evaluations, completions, events, and its reward
functions' output and errors.

The server's responses are these models (service/jobs/schemas.py subclasses them to read its
rows), so their descriptions are the API document's.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from rft.agents import AgentStepMetrics, TrajectoryMessage


class FunctionStepMetrics(BaseModel):
    version: int
    weight: float
    mean: float | None
    std: float | None
    scored: int
    errors: int
    error_rate: float


class ImportanceSamplingRatios(BaseModel):
    min: float | None
    mean: float | None
    max: float | None


class AsyncGenerationStep(BaseModel):
    """How off-policy a step of an async-generation job trained (docs/async-generation.md)."""

    max_staleness: int = Field(description="The job's bound.")
    policy_version: int = Field(
        description="The policy that trained this step: optimizer steps taken before it (step - 1)."
    )
    rollout_policy_versions: list[int] = Field(
        description="The policy versions whose weights the rollout engine held when it "
        "sampled this step's rollouts (as the engine reported them), one per prompt group."
    )
    staleness_max: int = Field(description="policy_version - the oldest rollout version.")
    staleness_mean: float
    sampling_config_versions: list[int] = Field(
        description="Live-config versions whose temperature/top_p sampled the rollouts (the "
        "version when their generation was requested). The rewards were scored under the "
        "step's config_version, at training time."
    )
    importance_sampling_ratio: ImportanceSamplingRatios = Field(
        description="Per-token ratio of the training policy's probability to the sampler's "
        "(TRL's vllm_importance_sampling_correction, after its clipping), over the step."
    )


class Step(BaseModel):
    step: int
    config_version: int
    reward_mean: float | None
    reward_std: float | None
    loss: float | None
    kl: float | None
    learning_rate: float | None
    duration_s: float
    frac_reward_zero_std: float | None = Field(
        None,
        description="Share of the step's groups whose completions all got the same reward: "
        "GRPO learns nothing from them.",
    )
    reward_functions: dict[str, FunctionStepMetrics]
    agent_metrics: AgentStepMetrics | None = Field(
        None,
        description="Agent jobs (tools or environments): tool calls and turns per rollout, "
        "the share of rollouts cut off at max_turns, and per tool its calls, errors by kind, "
        "error rate and mean duration. null for single-answer jobs.",
    )
    metrics: dict[str, float] | None = Field(
        None,
        description="Supervised (method 'sft') jobs: what TRL logged beside loss and "
        "learning_rate: grad_norm, mean_token_accuracy, entropy, num_tokens (tokens trained "
        "on so far), and eval_loss and eval_mean_token_accuracy at evaluated steps (an SFT "
        "step's reward fields are null). null for GRPO steps.",
    )
    async_generation: AsyncGenerationStep | None = Field(
        None,
        description="Jobs with hyperparameters.async_generation: which policy versions "
        "sampled the step's rollouts and how stale they were, the config versions they were "
        "sampled under, and the importance-sampling ratios that corrected for it. null for "
        "other jobs.",
    )
    created_at: datetime


class Evaluation(BaseModel):
    """The adapter after ``step``, scored on the validation prompts by the job's reward
    functions (the config version in force at that step): one point of the eval curve."""

    step: int
    config_version: int
    reward_mean: float | None = Field(description="Mean weighted total over the samples.")
    reward_std: float | None
    prompts: int = Field(description="Validation prompts evaluated.")
    samples: int = Field(description="Completions scored (prompts x eval_samples).")
    duration_s: float
    reward_functions: dict[str, FunctionStepMetrics]
    agent_metrics: AgentStepMetrics | None = Field(
        None, description="Agent jobs: as a step's, over the validation rollouts."
    )
    created_at: datetime


class Completion(BaseModel):
    id: int
    step: int
    config_version: int
    prompt_index: int
    group_position: int
    dataset_index: int | None
    prompt: Any
    completion: str
    scores: dict[str, float | None]
    total: float | None
    advantage: float | None
    token_count: int
    trajectory: list[TrajectoryMessage] | None = Field(
        None,
        description="Agent jobs: the whole rollout as chat messages, in order, as the worker "
        "recorded them (assistant turns with their tool calls, tool results with errors and "
        "durations). null for single-answer jobs.",
    )

    @property
    def truncated(self) -> bool:
        """Whether the rollout was cut off (max_turns or the token budget) before its end."""
        # Marked on the last message, whichever its role (a tool's answer may end the rollout).
        if not self.trajectory:
            return False
        return bool(getattr(self.trajectory[-1], "truncated", False))


class JobEvent(BaseModel):
    id: int
    kind: str
    message: str
    step: int | None
    data: dict[str, Any]
    created_at: datetime


class RewardFunctionLog(BaseModel):
    id: int
    step: int
    function_name: str
    function_version: int
    output: str
    truncated: bool = False


class RewardError(BaseModel):
    """A reward function failing on one sample during training."""

    id: int
    step: int
    function_name: str
    function_version: int
    kind: str = Field(description="exception, timeout, killed, invalid return or wrong length.")
    message: str
    traceback: str | None = None
    sample_index: int | None = None
