from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    computed_field,
    field_validator,
    model_validator,
)

from service.agent_code.schemas import (
    ENVIRONMENT_GIVEN,
    AgentCodeInput,
    reward_sources_required,
)
from service.jobs.guard_settings import GuardSettings
from service.jobs.hyperparameters import SFT_FIELDS, SFT_ONLY_FIELDS, Hyperparameters
from service.jobs.status import JobStatus
from service.reward_functions.schemas import (
    MAX_RUNTIME_PACKAGES,
    ONE_REWARD_FUNCTION_GIVEN,
    RewardEntry,
    RewardFunctionsInput,
    check_reward_function_count,
    plain_requirements,
)
from service.secrets import JobSecrets
from service.usage.schemas import CostEstimate

# A name with optional extras and version clauses: no pip options, URLs or paths, so a job
# cannot point pip at another index or at the worker's files.
TINY_MODEL_NAME = "rft-tiny"


MAX_DEVICES_PER_JOB = 64
MAX_NODES_PER_JOB = 64
# How a job's ranks share the training (docs/internals/processes.md).
TrainingEngine = Literal["ddp", "deepspeed_zero2", "deepspeed_zero3", "fsdp"]
AVAILABLE_ENGINES = frozenset({"ddp", "deepspeed_zero2", "deepspeed_zero3", "fsdp"})
# Engines that run only on CUDA GPUs (FSDP on CPU silently trains as plain DDP).
CUDA_ONLY_ENGINES = frozenset({"fsdp"})
# How a job trains: GRPO on rewards, or supervised fine-tuning (SFT) on the dataset's answers.
JobMethod = Literal["grpo", "sft"]
# A supervised job needs no reward: for the OpenAPI document, beside the reward sources.
SFT_METHOD_GIVEN: list[Any] = [{"required": ["method"], "properties": {"method": {"const": "sft"}}}]


# "job_…" (its final adapter) or "job_…:checkpoint-N" (its checkpoint after step N).
INIT_FROM_FORMAT = re.compile(r"(job_[A-Za-z0-9]{1,60})(?::checkpoint-([0-9]{1,9}))?")


class InitFrom(NamedTuple):
    """Where a job's starting weights come from: a job's final adapter, or one checkpoint."""

    job_id: str
    checkpoint_step: int | None = None

    @classmethod
    def parse(cls, text: str) -> InitFrom:
        match = INIT_FROM_FORMAT.fullmatch(text)
        if match is None:
            raise ValueError(
                f"init_from: expected 'job_…' (a job's final adapter) or "
                f"'job_…:checkpoint-N' (its checkpoint after step N), got {text[:80]!r}"
            )
        step = match.group(2)
        return cls(match.group(1), int(step) if step is not None else None)

    def __str__(self) -> str:
        if self.checkpoint_step is None:
            return self.job_id
        return f"{self.job_id}:checkpoint-{self.checkpoint_step}"


class JobCreate(RewardFunctionsInput, AgentCodeInput):
    # At least one reward function, or an environment (whose get_reward scores the rollouts),
    # unless the job is supervised.
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "anyOf": ONE_REWARD_FUNCTION_GIVEN + ENVIRONMENT_GIVEN + SFT_METHOD_GIVEN
        },
    )

    method: JobMethod = Field(
        "grpo",
        description="'grpo' (the default): reinforcement learning on the reward functions' "
        "scores. 'sft': supervised fine-tuning on the dataset's answers (TRL's SFTTrainer, "
        "the same LoRA settings): every row is {'messages': [...]} ending with the "
        "assistant's message, or {'prompt': ..., 'completion': ...}; no reward functions, "
        "tools or environments; of the hyperparameters only those docs/hyperparameters.md "
        "lists for SFT (batch_size and max_length are SFT's own). Its adapter can seed a "
        "GRPO job.",
    )

    reward_functions: Annotated[
        dict[str, RewardEntry], AfterValidator(check_reward_function_count)
    ] = Field(
        default_factory=dict,
        description="Functions by name, each with its own source, or naming a reward model "
        '(`{"model": ..., "weight": ...}`). May be left out, or empty, when '
        "reward_module names the functions, or when every environment scores the rollouts "
        "with get_reward.",
    )
    dataset_id: str
    base_model: str = Field(
        TINY_MODEL_NAME,
        description=f"A Hugging Face model id (checked on the hub at creation), an absolute "
        f"path on the workers under RFT_MODEL_ROOTS, or {TINY_MODEL_NAME!r} for the built-in "
        "tiny model.",
        min_length=1,
        max_length=500,
    )
    hyperparameters: Hyperparameters = Field(default_factory=Hyperparameters)
    guards: GuardSettings = Field(
        default_factory=GuardSettings,
        description="Guards against reward hacking, checked at every step (docs/guards.md): "
        "thresholds (each has a default) and pause_on, the guards that pause the job when "
        "they trip. A tripped guard is a 'guard_tripped' event and one of the job's warnings, "
        "with its evidence. GRPO only.",
    )
    name: str | None = Field(None, max_length=300)
    allow_network: bool = Field(
        False,
        description="Let reward functions, tools and environments make HTTP(S) calls to "
        "public hosts (e.g. LLM-as-judge calls) through the egress proxy; the deployment's own "
        "services and private, loopback and metadata addresses stay unreachable.",
    )
    runtime_packages: list[str] = Field(
        default_factory=list,
        max_length=MAX_RUNTIME_PACKAGES,
        description="Extra pip requirements for the reward functions (e.g. 'rapidfuzz>=3'), "
        "installed for this job only before training.",
    )
    secrets: JobSecrets = Field(
        default_factory=dict,
        description="Environment variables for this job's reward functions only (e.g. an API "
        "key for LLM-as-judge calls). Encrypted at rest, never returned, masked in logs.",
    )
    validation_dataset_id: str | None = Field(
        None,
        description="A dataset of yours whose prompts evaluate the adapter every "
        "hyperparameters.eval_every steps and after the last one (GET /v1/jobs/{id}/evals).",
    )
    validation_split: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="Instead of validation_dataset_id: hold out this share of the training "
        "rows for validation (the dataset's last rows, at least one; shuffle an ordered file "
        "before uploading); they are not trained on.",
    )
    num_devices: int = Field(
        1,
        ge=1,
        le=MAX_DEVICES_PER_JOB,
        description="Devices (GPUs; processes on a CPU-only worker) the job trains on, all "
        "on one worker: only a worker whose RFT_WORKER_DEVICES is at least this takes it. "
        "A step's completions must split evenly over them.",
    )
    num_nodes: int = Field(
        1,
        ge=1,
        le=MAX_NODES_PER_JOB,
        description="Machines the job spans: it is placed on this many workers at once "
        "(one per machine, each giving it num_devices devices; world size num_nodes x "
        "num_devices), or waits. Losing any of them resumes the job from its last checkpoint.",
    )
    engine: TrainingEngine = Field(
        "ddp",
        description="How the ranks share the training: 'ddp' (every rank holds the whole "
        "model; right while model, gradients and optimizer state fit one device, e.g. LoRA "
        "or up to ~1B parameters). 'deepspeed_zero2' (DeepSpeed ZeRO stage 2: optimizer "
        "state and gradients sharded over the ranks; for full fine-tuning of models whose "
        "optimizer state does not fit one device), 'deepspeed_zero3' (parameters sharded "
        "too: models whose weights do not fit one device); both need DeepSpeed on the "
        "worker. 'fsdp' (PyTorch's FSDP2: parameters, gradients and optimizer state sharded, "
        "like ZeRO-3, without DeepSpeed; CUDA GPUs only).",
    )
    init_from: str | None = Field(
        None,
        max_length=120,
        description="Start from the LoRA weights of one of your jobs with the same base model: "
        "'job_…' (its final adapter; the job must have succeeded) or 'job_…:checkpoint-N' "
        "(its checkpoint after step N, also of a running, paused or failed job). The "
        "weights are copied at creation: deleting the parent later does not touch this job. "
        "base_model and lora_rank, lora_alpha and lora_target_modules are the parent's "
        "unless given (then they must equal the parent's); everything else, the optimizer "
        "included, starts fresh.",
    )
    init_from_optimizer: bool = Field(
        False,
        description="With init_from 'job_…:checkpoint-N' of a job trained with engine "
        "'ddp', and engine 'ddp' here: also start the optimizer from that checkpoint's state "
        "(Adam's moment estimates); this job's own learning rate and schedule apply.",
    )

    @field_validator("init_from")
    @classmethod
    def _check_init_from(cls, init_from: str | None) -> str | None:
        if init_from is not None:
            InitFrom.parse(init_from)
        return init_from

    @property
    def starting_point(self) -> InitFrom | None:
        return InitFrom.parse(self.init_from) if self.init_from is not None else None

    @model_validator(mode="after")
    def _optimizer_state_from_a_checkpoint(self) -> JobCreate:
        if not self.init_from_optimizer:
            return self
        start = self.starting_point
        if start is None or start.checkpoint_step is None:
            raise ValueError(
                "init_from_optimizer needs init_from 'job_…:checkpoint-N': a final adapter "
                "keeps no optimizer state, a checkpoint does"
            )
        if self.engine != "ddp":
            raise ValueError(
                f"init_from_optimizer needs engine 'ddp' (this job asks for {self.engine!r}): "
                "DeepSpeed and FSDP keep the optimizer state in shards of their own"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _hyperparameters_of_the_method(cls, data: Any) -> Any:
        # Read from the request as sent: a preset fills fields of both methods.
        if not isinstance(data, dict):
            return data
        method = data.get("method", "grpo")
        given = data.get("hyperparameters", {})
        if isinstance(given, dict):
            check_method_hyperparameters(method, set(given))
            if method == "sft":
                data = {**data, "hyperparameters": Hyperparameters.sft_request(given)}
        return data

    @model_validator(mode="after")
    def _something_scores(self) -> JobCreate:
        if self.method == "sft":
            given = [
                name
                for name, value in (
                    ("reward_functions", self.reward_functions),
                    ("tools", self.tools),
                    ("environments", self.environments),
                    ("runtime_packages", self.runtime_packages),
                    # Guards read completions and rewards, which a supervised step has not.
                    ("guards", "guards" in self.model_fields_set),
                )
                if value
            ]
            if given:
                raise ValueError(
                    f"method 'sft' learns from the dataset's answers: leave out "
                    f"{', '.join(given)} (they are for method 'grpo')"
                )
            self.hyperparameters = self.hyperparameters.with_sft_defaults()
            return self
        reward_sources_required(self.reward_functions, self.environments)
        return self

    @model_validator(mode="after")
    def _one_validation_source(self) -> JobCreate:
        if self.validation_dataset_id is not None and self.validation_split is not None:
            raise ValueError(
                "give validation_dataset_id or validation_split, not both: the validation "
                "prompts come from one place"
            )
        return self

    @model_validator(mode="after")
    def _tensor_parallel_within_devices(self) -> JobCreate:
        tp = self.hyperparameters.vllm_tensor_parallel_size
        if self.num_devices % tp != 0:
            raise ValueError(
                f"hyperparameters.vllm_tensor_parallel_size ({tp}) must divide num_devices "
                f"({self.num_devices}): each vLLM engine spans that many of the job's GPUs "
                "on one worker"
            )
        return self

    @field_validator("runtime_packages")
    @classmethod
    def _check_requirements(cls, packages: list[str]) -> list[str]:
        return plain_requirements(packages)


def check_method_hyperparameters(method: Any, given: set[str]) -> None:
    """Refuse the hyperparameters a request gives that the job's method does not use."""
    known = set(Hyperparameters.model_fields)
    if method == "sft":
        foreign = sorted((given & known) - SFT_FIELDS)
        if foreign:
            raise ValueError(
                f"hyperparameters {', '.join(foreign)} steer GRPO and mean nothing to method "
                f"'sft': leave them out (SFT uses {', '.join(sorted(SFT_FIELDS))})"
            )
    elif method == "grpo":
        foreign = sorted(given & SFT_ONLY_FIELDS)
        if foreign:
            raise ValueError(
                f"hyperparameters {', '.join(foreign)} are for method 'sft': a GRPO step is "
                "prompts_per_step x num_generations completions, and max_prompt_length and "
                "max_completion_length bound its tokens"
            )


class RewardFunctionState(BaseModel):
    version: int
    weight: float


class Job(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    name: str | None
    status: JobStatus
    failure_reason: str | None
    base_model: str
    dataset_id: str
    method: str = Field("grpo", description="'grpo' or 'sft' (supervised fine-tuning).")
    hyperparameters: dict[str, Any]
    config_version: int
    applied_config_version: int | None
    steps_completed: int
    allow_network: bool
    egress_hosts: list[str] = Field(
        default_factory=list,
        description="The hosts (host:port) of its HTTP tools and endpoint grader: without "
        "allow_network, the only ones its sandboxes may reach.",
    )
    runtime_packages: list[str]
    secret_names: list[str] = Field(
        description="The job's secrets, by name; values are never shown."
    )
    warnings: list[dict[str, Any]] = Field(
        default_factory=list,
        description="What the run warned about, oldest first: each has a kind ('no_signal', "
        "'no_signal_run', 'function_flat', 'length_collapse', 'truncation', or a guard's "
        "name), the step and a message. Each is also a 'warning' event; a guard's (marked "
        "'guard': true, with its 'numbers', 'examples' and 'paused_job') a 'guard_tripped' "
        "event.",
    )
    guards: GuardSettings = Field(
        default_factory=GuardSettings,
        description="The job's guards against reward hacking: thresholds and pause_on "
        "(docs/guards.md).",
    )
    validation_dataset_id: str | None = None
    validation_split: float | None = None
    num_devices: int = 1
    num_nodes: int = 1
    engine: str = "ddp"
    parent_job_id: str | None = Field(
        None,
        description="The job whose weights this one started from (init_from); kept after "
        "that job is deleted.",
    )
    parent_checkpoint_step: int | None = Field(
        None, description="The parent's checkpoint it started from; null: its final adapter."
    )
    init_from_optimizer: bool = False
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    cost_estimate: CostEstimate | None = Field(
        None,
        description="What the job was expected to cost when it was created, on the kinds of "
        "running worker that could take it, from throughput they measured (docs/cost.md); "
        "null for jobs created before estimates.",
    )
    gpu_seconds: float = Field(
        0.0,
        description="Device-seconds the job has held so far: wall time from a worker's take "
        "until it lets go, x num_devices x num_nodes, summed over resumes; queued and paused "
        "time count nothing. Grows while it runs.",
    )
    eta_seconds: float | None = Field(
        None,
        description="While it runs: steps left x the mean of its last 10 step times "
        "(GET /v1/jobs/{id} and the event stream's job messages; null in lists, before its "
        "first step and once it ended).",
    )
    # Since when the current run holds devices: read from the row to count the stretch under
    # way into gpu_seconds, never shown.
    held_since: datetime | None = Field(None, exclude=True)

    @model_validator(mode="after")
    def _count_the_stretch_under_way(self) -> Job:
        if self.held_since is not None:
            held_s = max(0.0, (datetime.now(UTC) - self.held_since).total_seconds())
            self.gpu_seconds += held_s * self.num_devices * self.num_nodes
            self.held_since = None
        return self

    @computed_field(  # type: ignore[prop-decorator]
        description="What the job was created with: 'job_…' or 'job_…:checkpoint-N'; null "
        "for a job that started from fresh LoRA weights."
    )
    @property
    def init_from(self) -> str | None:
        if self.parent_job_id is None:
            return None
        return str(InitFrom(self.parent_job_id, self.parent_checkpoint_step))

    @property
    def train_steps(self) -> int:
        return int(self.hyperparameters["train_steps"])


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
    model_config = ConfigDict(from_attributes=True)

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
    agent_metrics: dict[str, Any] | None = Field(
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
    functions (the config version in force at that step)."""

    model_config = ConfigDict(from_attributes=True)

    step: int
    config_version: int
    reward_mean: float | None = Field(description="Mean weighted total over the samples.")
    reward_std: float | None
    prompts: int = Field(description="Validation prompts evaluated.")
    samples: int = Field(description="Completions scored (prompts x eval_samples).")
    duration_s: float
    reward_functions: dict[str, FunctionStepMetrics]
    agent_metrics: dict[str, Any] | None = Field(
        None, description="Agent jobs: as a step's, over the validation rollouts."
    )
    created_at: datetime


class Completion(BaseModel):
    model_config = ConfigDict(from_attributes=True)

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
    trajectory: list[dict[str, Any]] | None = Field(
        None,
        description="Agent jobs: the whole rollout as chat messages, in order, as the worker "
        "recorded them (assistant turns with their tool calls, tool results with errors and "
        "durations). null for single-answer jobs.",
    )


class JobEvent(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    kind: str
    message: str
    step: int | None
    data: dict[str, Any]
    created_at: datetime


class RewardLog(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    step: int
    function_name: str
    function_version: int
    output: str
    truncated: bool


class RewardErrorOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    step: int
    function_name: str
    function_version: int
    kind: str
    message: str
    traceback: str | None
    sample_index: int | None
