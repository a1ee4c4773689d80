"""A job, its status and the hyperparameters it is created with."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rft.models.cost import CostEstimate
from rft.models.guards import Guards, GuardTrip


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
