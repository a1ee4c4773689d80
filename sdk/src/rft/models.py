"""Typed models of what the server sends and accepts; they mirror service/*/schemas.py.

Read models ignore fields they do not know, so an older client keeps working against a newer
server.
"""

from __future__ import annotations

import os
import types
from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime
from enum import StrEnum
from typing import Any, Generic, Literal, TypeAlias, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from rft.agents import (
    AgentStepMetrics,
    ConfigMap,
    EnvironmentMap,
    ToolMap,
    TrajectoryMessage,
)
from rft.reward_source import function_reference, module_functions, module_text, to_source

Item = TypeVar("Item")


class Page(BaseModel, Generic[Item]):
    data: list[Item]
    has_more: bool
    next_cursor: str | None = None


class Dataset(BaseModel):
    id: str
    name: str
    file_format: str
    row_count: int
    columns: list[str]
    prompt_kind: str
    size_bytes: int
    sha256: str
    created_at: datetime


class DatasetDetail(Dataset):
    preview: list[dict[str, Any]] = Field(default_factory=list)


class JobStatus(StrEnum):
    """``pausing``: paused by the user, its worker still finishing the step and saving the
    checkpoint (``resume`` calls the pause off); ``paused`` once the worker has let go."""

    QUEUED = "queued"
    RUNNING = "running"
    PAUSING = "pausing"
    PAUSED = "paused"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


# How a job trains: GRPO on rewards, or supervised fine-tuning on the dataset's answers.
JobMethod = Literal["grpo", "sft"]


class Hyperparameters(BaseModel):
    """GRPO settings of a job. Only the fields you set are sent; the server fills the rest.

    A field left as None takes the server's value: the preset's when ``preset`` is set, else
    the default for LoRA GRPO on real models. ``job.hyperparameters`` holds the resolved
    values. The server's table (defaults and where they come from): docs/hyperparameters.md.
    """

    model_config = ConfigDict(extra="forbid")

    preset: Literal["tiny-cpu", "small", "medium"] | None = Field(
        None,
        description="Fill unset fields for a model size: 'tiny-cpu' (the built-in rft-tiny on "
        "CPU), 'small' (0.5B-3B; the defaults), 'medium' (7B-14B).",
    )
    train_steps: int | None = Field(None, ge=1, description="Optimizer steps to run.")
    learning_rate: float | None = Field(None, gt=0, le=1.0, description="Peak LoRA learning rate.")
    lr_scheduler_type: Literal["constant", "constant_with_warmup", "linear", "cosine"] | None = None
    warmup_ratio: float | None = Field(None, ge=0, lt=1, description="Share of steps warming up.")
    max_grad_norm: float | None = Field(None, ge=0, description="Gradient clipping; 0 is off.")
    num_generations: int | None = Field(
        None, ge=2, description="Completions sampled per prompt (the GRPO group size)."
    )
    prompts_per_step: int | None = Field(None, ge=1, description="Distinct prompts per step.")
    micro_batch_size: int | None = Field(
        None,
        ge=1,
        description="Completions per backward pass; divides prompts_per_step x num_generations.",
    )
    max_completion_length: int | None = Field(None, ge=1, description="Tokens per completion.")
    max_prompt_length: int | None = Field(None, ge=1, description="Truncate prompts (tokens).")
    stop: list[str] | None = Field(
        None, max_length=4, description="Stop sequences (at most 4, 64 characters each)."
    )
    temperature: float | None = Field(None, gt=0, le=5.0)
    top_p: float | None = Field(None, gt=0, le=1.0)
    beta: float | None = Field(None, ge=0, description="KL coefficient; 0 skips the reference.")
    loss_type: Literal["grpo", "dapo", "dr_grpo", "bnpo"] | None = None
    epsilon: float | None = Field(None, gt=0, le=1.0, description="Lower clipping range.")
    epsilon_high: float | None = Field(
        None, gt=0, le=10.0, description="Upper clipping range (at least epsilon)."
    )
    scale_rewards: Literal["group", "batch", "none"] | None = None
    mask_truncated_completions: bool | None = None
    lora_rank: int | None = Field(None, ge=1)
    lora_alpha: int | None = Field(None, ge=1)
    lora_dropout: float | None = Field(None, ge=0, lt=1)
    lora_target_modules: list[str] | Literal["all-linear"] | None = None
    adapter: Literal["lora", "full"] | None = Field(
        None, description="'lora' (the default) or 'full': train every weight, no LoRA."
    )
    quantization: Literal["none", "4bit"] | None = Field(
        None, description="'4bit': QLoRA (the base in 4-bit NF4); CUDA GPUs only."
    )
    attn_implementation: Literal["sdpa", "eager", "flash_attention_2"] | None = None
    optimizer: Literal["adamw_torch", "adamw_8bit"] | None = Field(
        None, description="'adamw_8bit': bitsandbytes' 8-bit AdamW; CUDA GPUs only."
    )
    bf16: bool | Literal["auto"] | None = None
    activation_checkpointing: bool | Literal["auto"] | None = None
    seed: int | None = Field(None, ge=0)
    reproducible_sampling: bool | None = Field(
        None,
        description="Sampling noise keyed per completion: the same completions on 1 or N "
        "devices (transformers generation only).",
    )
    vllm_gpu_memory_utilization: float | None = Field(
        None,
        gt=0,
        le=1,
        description="vLLM colocated on a GPU: its share of each GPU's memory (unset: sized "
        "for the job and the GPU at its start).",
    )
    vllm_tensor_parallel_size: int | None = Field(
        None, ge=1, description="GPUs each vLLM engine spans; divides num_devices."
    )
    vllm_sleep_mode: bool | None = Field(
        None, description="Free vLLM's weights and KV cache while the trainer steps (GPU)."
    )
    vllm_max_model_length: int | None = Field(
        None, ge=1, description="vLLM's context in tokens (unset: prompt cap + completion)."
    )
    async_generation: dict[str, int] | None = Field(
        None,
        description="Generate the next steps' rollouts while a step trains, e.g. "
        '{"max_staleness": 1} (1-4); needs vLLM workers.',
    )
    reward_error_rate_limit: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Circuit breaker: the job fails when one reward function fails on more "
        "than this share of a step's samples for reward_error_patience consecutive steps.",
    )
    reward_error_patience: int | None = Field(
        None, ge=1, description="See reward_error_rate_limit."
    )
    checkpoint_every: int | None = Field(None, ge=1, description="Save the adapter every N steps.")
    no_signal_threshold: float | None = Field(
        None,
        gt=0,
        le=1,
        description="A step has no signal when this share of its groups got equal rewards.",
    )
    warning_patience: int | None = Field(
        None, ge=1, description="Consecutive steps a warning's condition must hold."
    )
    fail_on_no_signal: bool | None = Field(
        None, description="Fail, instead of warning, when the whole run learned from nothing."
    )
    report_to: list[Literal["wandb", "mlflow", "tensorboard", "trackio"]] | None = Field(
        None, description="Experiment trackers the worker also reports to (TRL's report_to)."
    )
    batch_size: int | None = Field(
        None, ge=1, description="method 'sft': examples per optimizer step (unset: 8)."
    )
    max_length: int | None = Field(
        None, ge=1, description="method 'sft': tokens per example, longer ones cut (unset: 1024)."
    )
    eval_every: int | None = Field(
        None, description="With a validation set: evaluate every N steps (and after the last)."
    )
    eval_samples: int | None = Field(None, description="Completions per validation prompt.")
    eval_max_prompts: int | None = Field(None, description="Validation prompts per evaluation.")
    eval_temperature: float | None = Field(
        None, description="Temperature of validation completions; 0 is greedy."
    )
    keep_best: int | None = Field(
        None, description="How many checkpoints with the best validation reward are marked."
    )
    max_turns: int | None = Field(
        None,
        ge=1,
        le=64,
        description="Agent jobs: most tool-calling rounds in one rollout; one that reaches it "
        "ends there, marked truncated.",
    )
    tool_timeout_s: float | None = Field(
        None,
        gt=0,
        le=600,
        description="Agent jobs: wall limit of one tool call (and of an environment's reset or "
        "get_reward), in seconds; a call past it returns an error to the model.",
    )


GuardName = Literal[
    "reward_divergence",
    "length_drift",
    "reward_dominance",
    "kl_shift",
    "entropy_shift",
    "repetition",
    "group_agreement",
]


class Guards(BaseModel):
    """A job's guards against reward hacking (the server's docs/guards.md); a field left None
    is the server's default. Read back on ``Job.guards`` with every value filled in."""

    # A newer server may add thresholds: an older client keeps them.
    model_config = ConfigDict(extra="allow")

    pause_on: list[GuardName] | None = Field(
        None, description="Guards that pause the job when they trip (resume continues)."
    )
    patience: int | None = Field(
        None, ge=1, description="Consecutive steps a guard's condition must hold (3)."
    )
    early_steps: int | None = Field(
        None, ge=1, description="First steps whose length and entropy are the baseline (3)."
    )
    divergence_evals: int | None = Field(
        None, ge=2, description="reward_divergence: validation runs compared (3)."
    )
    divergence_min_change: float | None = Field(
        None, ge=0, description="reward_divergence: least rise and fall, reward units (0.02)."
    )
    length_limit_share: float | None = Field(
        None, gt=0, le=1, description="length_drift: mean length / max_completion_length (0.9)."
    )
    length_min_rise: float | None = Field(
        None, ge=0, le=1, description="length_drift: least rise over the first steps (0.2)."
    )
    dominance_share: float | None = Field(
        None, gt=0.5, le=1, description="reward_dominance: one function's share (0.8)."
    )
    dominance_window: int | None = Field(
        None, ge=2, description="reward_dominance: steps compared (6)."
    )
    kl_factor: float | None = Field(
        None, gt=1, description="kl_shift: KL over the recent median (4)."
    )
    kl_min: float | None = Field(None, ge=0, description="kl_shift: least KL that trips (0.1).")
    kl_window: int | None = Field(None, ge=1, description="kl_shift: steps of the median (5).")
    entropy_factor: float | None = Field(
        None, gt=1, description="entropy_shift: collapse or jump factor (3)."
    )
    repetition_ngram: int | None = Field(None, ge=1, description="repetition: n of n-grams (3).")
    repetition_share: float | None = Field(
        None, gt=0, le=1, description="repetition: repeated n-gram share (0.5)."
    )
    agreement_share: float | None = Field(
        None, gt=0, le=1, description="group_agreement: share of identical groups (0.5)."
    )


class GuardTrip(BaseModel):
    """A guard that tripped: one of ``Job.warnings`` (``Job.guard_trips``), with evidence."""

    kind: str
    step: int
    message: str
    numbers: dict[str, Any] = Field(default_factory=dict)
    # Two or three of the step's completions: {"completion", "scores", "total", ...}.
    examples: list[dict[str, Any]] = Field(default_factory=list)
    paused_job: bool = False


class WorkerKindEstimate(BaseModel):
    """A job's expected cost on one kind of worker (``basis`` 'measured'), or why there is
    no figure (``basis`` 'none', with ``message``)."""

    device_kind: str
    generation_backend: str
    basis: str
    message: str | None = None
    steps_measured: int = 0
    tokens_per_step: float | None = None
    step_seconds: float | None = None
    total_seconds: float | None = None
    gpu_hours: float | None = None


class CostEstimate(BaseModel):
    """What a job is expected to cost, from throughput the workers measured (docs/cost.md)."""

    model_key: str
    devices: int
    train_steps: int
    completions_per_step: int | None = None
    # Upper bound on completion tokens over the run (prompts x generations x max length).
    max_tokens: int | None = None
    workers: list[WorkerKindEstimate] = Field(default_factory=list)
    note: str | None = None


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


class Job(BaseModel):
    id: str
    name: str | None
    status: JobStatus
    failure_reason: str | None
    base_model: str
    dataset_id: str
    # 'grpo', or 'sft' (supervised fine-tuning).
    method: str = "grpo"
    hyperparameters: dict[str, Any]
    config_version: int
    applied_config_version: int | None
    steps_completed: int
    allow_network: bool
    runtime_packages: list[str] = Field(default_factory=list)
    secret_names: list[str] = Field(default_factory=list)
    # What the run warned about: {"kind", "step", "message", ...}; also 'warning' events.
    # A guard's (``"guard": true``) carries its evidence: see guard_trips.
    warnings: list[dict[str, Any]] = Field(default_factory=list)
    guards: Guards = Field(default_factory=Guards)
    # Where validation prompts come from (None, None: no evaluation).
    validation_dataset_id: str | None = None
    validation_split: float | None = None
    # What it trains on: this many devices on each of num_nodes workers, under this engine.
    num_devices: int = 1
    num_nodes: int = 1
    engine: str = "ddp"
    # Lineage: what it started from ('job_…' or 'job_…:checkpoint-N'; None: fresh LoRA
    # weights), kept after the parent is deleted.
    init_from: str | None = None
    parent_job_id: str | None = None
    parent_checkpoint_step: int | None = None
    init_from_optimizer: bool = False
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    # Cost: expected at creation, device-seconds held so far (queued and paused time count
    # nothing), and while it runs the seconds left (from jobs.get and the event stream).
    cost_estimate: CostEstimate | None = None
    gpu_seconds: float = 0.0
    eta_seconds: float | None = None

    @property
    def train_steps(self) -> int:
        return int(self.hyperparameters.get("train_steps", 0))

    @property
    def guard_trips(self) -> list[GuardTrip]:
        """The guards that tripped, oldest first, with their numbers and example completions."""
        return [GuardTrip.model_validate(w) for w in self.warnings if w.get("guard")]


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


class Checkpoint(BaseModel):
    """A saved LoRA adapter of a job at one step (download with ``jobs.download_checkpoint``)."""

    step: int
    size_bytes: int
    created_at: datetime
    download_path: str
    # Validation reward of the adapter at this step (if evaluated), and whether it is among
    # the job's keep_best best.
    eval_reward: float | None = None
    is_best: bool = False


class CheckpointList(BaseModel):
    data: list[Checkpoint]
    final_adapter_path: str | None = Field(
        None, description="Set once the job has a final adapter (``jobs.download_adapter``)."
    )


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


class RewardFunction(BaseModel):
    """A reward function to send: Python source (or a plain function), its weight, and how it
    runs. Settings left None take the server's defaults."""

    source: str
    weight: float = 1.0
    function: str | None = Field(
        None,
        description="The def to run when source is a whole module (set for functions "
        "that use module-level names: their file is sent, the server keeps what they use).",
    )
    max_concurrency: int | None = Field(
        None, description="Samples scored at once (async or threads); 1: one after another."
    )
    sample_timeout_s: float | None = Field(None, description="Wall limit of one sample.")
    rate_limit_per_s: float | None = Field(None, description="Most calls started per second.")

    def __init__(
        self, source: str | Callable[..., Any], *, weight: float = 1.0, **extra: Any
    ) -> None:
        if callable(source) and not isinstance(source, RewardFunction):
            source, function = function_reference(source)
            if function is not None:
                extra.setdefault("function", function)
        super().__init__(source=to_source(source), weight=weight, **extra)

    def to_request(self) -> dict[str, Any]:
        return self.model_dump(
            include={"source", "weight", *RUN_SETTINGS, "function"}, exclude_none=True
        )


RUN_SETTINGS = ("max_concurrency", "sample_timeout_s", "rate_limit_per_s")


class RewardModule:
    """A whole reward file, and which of its functions are rewards::

        rft.RewardModule("rewards.py", {"correctness_reward_func": 2.0, "int_reward_func": 0.5})
        rft.RewardModule(my_rewards_module, ["strict_format_reward_func"])

    ``functions`` maps names to weights or to ``{"weight", "max_concurrency", ...}``, or lists
    names (weight 1). The server stores each function with the module-level code it uses.
    """

    def __init__(
        self,
        module: str | os.PathLike[str] | types.ModuleType,
        functions: Mapping[str, float | Mapping[str, Any]] | Sequence[str],
    ) -> None:
        self.source = module_text(module)
        self.functions = module_functions(functions)

    @classmethod
    def from_source(
        cls, source: str, functions: Mapping[str, float | Mapping[str, Any]] | Sequence[str]
    ) -> RewardModule:
        module = cls.__new__(cls)
        module.source = source
        module.functions = module_functions(functions)
        return module

    def to_request(self) -> dict[str, Any]:
        return {"source": self.source, "functions": self.functions}


class RewardModel(BaseModel):
    """A reward scored by a sequence-classification model instead of code::

        rft.RewardModel("OpenAssistant/reward-model-deberta-v3-large-v2", weight=0.5)
        rft.RewardModel("rft-tiny-reward")  # built in: prefers text written with the letter a

    ``model`` is a Hugging Face model id, an absolute path on the workers under the server's
    RFT_MODEL_ROOTS, or a built-in name; it must have one label (num_labels 1). The workers
    score with it on the training device, as TRL scores a reward model.
    """

    model: str
    weight: float = 1.0
    batch_size: int | None = Field(None, description="Texts per forward pass; None: 16.")
    max_length: int | None = Field(
        None, description="Tokens read per text (its end); None: the whole text."
    )

    def __init__(self, model: str | os.PathLike[str], *, weight: float = 1.0, **extra: Any) -> None:
        super().__init__(model=os.fspath(model), weight=weight, **extra)

    def to_request(self) -> dict[str, Any]:
        return self.model_dump(
            include={"model", "weight", *REWARD_MODEL_SETTINGS}, exclude_none=True
        )


REWARD_MODEL_SETTINGS = ("batch_size", "max_length")

RewardFunctionLike: TypeAlias = str | Callable[..., Any] | RewardFunction | RewardModel


class RewardFunctionConfig(RewardFunction):
    """A reward function as the server stores it; ``version`` is None until the server saves it."""

    version: int | None = None
    label: str | None = Field(None, description="name_vN, as shown in graphs.")

    def __init__(
        self,
        source: str | Callable[..., Any],
        *,
        weight: float = 1.0,
        version: int | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(source, weight=weight, version=version, **extra)


class RewardModelConfig(RewardModel):
    """A reward model as the server stores it; ``version`` is None until the server saves it
    (a new model is a new version, a new weight is not)."""

    version: int | None = None
    label: str | None = Field(None, description="name_vN, as shown in graphs.")

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        weight: float = 1.0,
        version: int | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(model, weight=weight, version=version, **extra)


# An entry of a config's reward_functions: code, or a reward model.
RewardEntryConfig: TypeAlias = RewardFunctionConfig | RewardModelConfig


def to_reward_function_config(
    name: str, value: RewardFunctionLike | Mapping[str, Any], *, weight: float = 1.0
) -> RewardEntryConfig:
    if isinstance(value, RewardFunctionConfig | RewardModelConfig):
        return value
    if isinstance(value, RewardModel):
        return RewardModelConfig.model_validate(value.model_dump(exclude={"version", "label"}))
    if isinstance(value, Mapping) and value.get("model") is not None:
        return RewardModelConfig.model_validate(value)
    if isinstance(value, RewardFunction):
        return RewardFunctionConfig.model_validate(value.model_dump(exclude={"version", "label"}))
    if isinstance(value, Mapping):
        return RewardFunctionConfig.model_validate(value)
    if callable(value):
        source, function = function_reference(value, name=name)
        return RewardFunctionConfig(source, weight=weight, function=function)
    return RewardFunctionConfig(to_source(value, name=name), weight=weight)


RewardFunctionsInput: TypeAlias = Mapping[str, RewardFunctionLike | Mapping[str, Any]]


class RewardFunctionMap(ConfigMap[RewardEntryConfig]):
    """Reward functions (and reward models) by name; assigning a function or source string
    keeps the old weight.

    ``config.reward_functions["fmt"] = my_function`` replaces fmt's code and leaves its weight,
    ``config.reward_functions["fmt"].weight = 0.5`` changes only the weight, and
    ``config.reward_functions["judge"] = rft.RewardModel("org/other-rm", weight=2)`` swaps a
    reward model.
    """

    def __init__(self, functions: RewardFunctionsInput | None = None) -> None:
        super().__init__(functions)

    def _converted(self, name: str, value: Any) -> RewardEntryConfig:
        previous = self.get(name)
        weight = previous.weight if previous is not None else 1.0
        return to_reward_function_config(name, value, weight=weight)


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


class SampleError(BaseModel):
    kind: str
    message: str
    traceback: str | None = None
    sample_index: int | None = None


class Sample(BaseModel):
    prompt: str | list[dict[str, Any]]
    completion: str
    example: dict[str, Any] = Field(default_factory=dict)


class FunctionTestResult(BaseModel):
    form: str = Field(
        "", description="sample or batch: how the function is called; model: a reward model."
    )
    scores: list[float | None]
    errors: list[SampleError] = Field(default_factory=list)
    error_rate: float = 0.0
    logs: str = ""
    logs_truncated: bool = False
    duration_s: float = 0.0


class RewardFunctionTestResult(BaseModel):
    samples: list[Sample] = Field(default_factory=list)
    results: dict[str, FunctionTestResult]
    totals: list[float | None] = Field(
        default_factory=list,
        description="Weighted sum per sample, as in training, of the functions that ran.",
    )
    not_scored: list[str] = Field(
        default_factory=list,
        description="Reward models: checked by the server, not run (their scores are None).",
    )


def reward_functions_request(functions: RewardFunctionsInput) -> dict[str, dict[str, Any]]:
    """The JSON body part ``{name: {"source", "weight"}}`` from functions, strings or models."""
    return RewardFunctionMap(functions).to_request()


class Webhook(BaseModel):
    """A URL registered for job events (``client.webhooks.create``)."""

    id: str
    url: str
    event_types: list[str]
    description: str | None = None
    created_at: datetime


class WebhookCreated(Webhook):
    """A new webhook, with its signing secret: shown only this once, keep it."""

    secret: str


class WebhookAttempt(BaseModel):
    number: int
    attempted_at: datetime
    status_code: int | None = None  # None: nothing answered (``error`` says why)
    error: str | None = None
    duration_ms: float


class WebhookDelivery(BaseModel):
    """One event sent to a webhook: pending (retrying), delivered or failed, with every try."""

    id: str  # the webhook-id header, the same on every retry
    event_id: str
    event_type: str
    job_id: str | None = None
    status: Literal["pending", "delivered", "failed"]
    next_attempt_at: datetime | None = None
    created_at: datetime
    delivered_at: datetime | None = None
    payload: dict[str, Any]
    attempts: list[WebhookAttempt]
