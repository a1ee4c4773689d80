"""What a job records as it trains: steps, evaluations, completions, events, and its reward
functions' output and errors."""

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
    """How off-policy a step of a job with ``async_generation`` trained."""

    max_staleness: int
    # The policy that trained the step (optimizer steps before it) and, per prompt group, the
    # policy version whose weights sampled the rollouts.
    policy_version: int
    rollout_policy_versions: list[int]
    staleness_max: int
    staleness_mean: float
    # Config versions whose temperature/top_p sampled the rollouts; the rewards were scored
    # under the step's config_version.
    sampling_config_versions: list[int]
    importance_sampling_ratio: ImportanceSamplingRatios


class Step(BaseModel):
    step: int
    config_version: int
    reward_mean: float | None
    reward_std: float | None
    loss: float | None
    kl: float | None
    learning_rate: float | None
    duration_s: float
    # Share of the step's groups whose completions all got the same reward (no signal).
    frac_reward_zero_std: float | None = None
    reward_functions: dict[str, FunctionStepMetrics]
    # Agent jobs: tool calls, turns and tool errors of the step's rollouts; None otherwise.
    agent_metrics: AgentStepMetrics | None = None
    # Supervised jobs: grad_norm, mean_token_accuracy, entropy, num_tokens, and eval_loss
    # and eval_mean_token_accuracy at evaluated steps; None for GRPO steps.
    metrics: dict[str, float] | None = None
    # Jobs with async_generation: the rollouts' staleness and importance-sampling ratios.
    async_generation: AsyncGenerationStep | None = None
    created_at: datetime


class Evaluation(BaseModel):
    """The adapter after ``step`` scored on the validation prompts (one point of the eval
    curve)."""

    step: int
    config_version: int
    reward_mean: float | None
    reward_std: float | None
    prompts: int
    samples: int
    duration_s: float
    reward_functions: dict[str, FunctionStepMetrics]
    # Agent jobs: as a step's, over the validation rollouts.
    agent_metrics: AgentStepMetrics | None = None
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
    # Agent jobs: the rollout turn by turn (assistant turns, tool results); None for jobs
    # that sample one answer per prompt.
    trajectory: list[TrajectoryMessage] | None = None

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
