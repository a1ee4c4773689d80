"""What the training loop reports, one step at a time, and the reward config it runs with.
Plain data: no database, no Celery."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sandbox.agent_api import EnvironmentSpec, ToolSpec
from sandbox.api import FunctionResult, RewardFunctionSpec


@dataclass
class CompletionRecord:
    prompt_index: int  # which prompt of the step (0 .. prompts_per_step - 1)
    group_position: int  # which completion of that prompt's group (0 .. num_generations - 1)
    dataset_index: int | None  # the prompt's row in the dataset, when known
    prompt: Any  # a string, or a list of chat messages
    completion: str
    scores: dict[str, float | None]  # by function name; None where the function gave no score
    total: float | None  # weighted sum of the scores that exist; None when none exist
    advantage: float | None
    token_count: int
    # Agent jobs: the whole rollout, turn by turn (assistant turns, tool calls with their
    # arguments, results, errors and durations); None for single-answer jobs.
    trajectory: list[dict[str, Any]] | None = None


@dataclass
class FunctionStepMetrics:
    name: str
    version: int
    weight: float
    mean: float | None  # over samples with a score
    std: float | None
    scored: int  # samples with a score
    errors: int  # samples whose score was lost to an error


@dataclass
class EvalRecord:
    """The adapter after a step, scored on the validation prompts (workers.training.evaluation)."""

    step: int
    config_version: int
    reward_mean: float | None
    reward_std: float | None
    prompts: int
    samples: int
    duration_s: float
    functions: dict[str, FunctionStepMetrics]
    # Agent jobs: tool use over the validation rollouts (as StepRecord.agent_metrics).
    agent_metrics: dict[str, Any] | None = None


@dataclass
class StepRecord:
    step: int  # 1-based optimizer step
    config_version: int
    reward_mean: float | None
    reward_std: float | None
    loss: float | None
    kl: float | None
    learning_rate: float | None
    duration_s: float
    functions: dict[str, FunctionStepMetrics]
    completions: list[CompletionRecord]
    # Raw per-function results of the generation that fed this step: errors and logs.
    function_results: dict[str, FunctionResult] = field(default_factory=dict)
    extra_metrics: dict[str, float] = field(default_factory=dict)
    # The validation run after this step, when one was due: it travels (and is stored) with
    # the step's record.
    evaluation: EvalRecord | None = None
    # Agent jobs: tool calls per rollout, turns per rollout, truncated share and, per tool,
    # calls, errors (by kind), error rate and mean duration; None for single-answer jobs.
    agent_metrics: dict[str, Any] | None = None
    # Supervised jobs: what TRL logged beside loss and learning rate (grad_norm, token
    # accuracy, ...; eval_* at evaluated steps), stored as the step's metrics; None for GRPO.
    metrics: dict[str, float] | None = None
    # Async-generation jobs: the rollouts' policy versions and staleness, their sampling
    # config versions, the importance-sampling ratios (workers.training.async_generation).
    async_generation: dict[str, Any] | None = None


@dataclass(frozen=True)
class RewardModelSpec:
    """A reward scored by a sequence-classification model on the trainer's device
    (workers.training.reward_models), beside the sandboxed functions."""

    name: str
    model: str  # a built-in name (rft-tiny-reward), a path on the worker, or a hub id
    weight: float = 1.0
    version: int = 1  # bumped when the entry names another model
    batch_size: int | None = None  # texts per forward pass; None: the scorer's default
    max_length: int | None = None  # tokens kept per text (its end); None: all, as TRL


@dataclass(frozen=True)
class RewardConfig:
    """One version of a job's live config, as the ranks apply it."""

    version: int
    functions: list[RewardFunctionSpec]
    temperature: float | None = None
    top_p: float | None = None
    # The job's secrets as of this version (a config update may rotate them): a rank's
    # sandbox restarts with them when it loads this version's functions. Never printed.
    secrets: dict[str, str] = field(default_factory=dict, repr=False)
    # Agent jobs: the tools and environments the model may use from this version on.
    tools: list[ToolSpec] = field(default_factory=list)
    environments: list[EnvironmentSpec] = field(default_factory=list)
    # Rewards scored by reward models instead of code.
    reward_models: list[RewardModelSpec] = field(default_factory=list)
