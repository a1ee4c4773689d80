"""Every table. Alembic migrations in migrations/ create them; autogenerate compares to this."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated, Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# JSONB on Postgres; the variant keeps the models importable where only JSON exists.
Json = JSON().with_variant(JSONB(), "postgresql")


def utcnow() -> datetime:
    return datetime.now(UTC)


# Columns many tables declare alike; each use gets its own copy of the mapped_column.
CreatedAt = Annotated[datetime, mapped_column(DateTime(timezone=True), default=utcnow)]
# A job's id on a row that belongs to the job: the row goes when the job does.
JobRef = Annotated[str, mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))]


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Tenant(Base):
    __tablename__ = "tenants"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[CreatedAt]


class ApiKey(Base):
    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    # sha256 of the key: keys are 256-bit random, so a fast hash is enough and lookups stay O(1).
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    key_prefix: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[CreatedAt]
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class Dataset(Base):
    __tablename__ = "datasets"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(300))
    file_format: Mapped[str] = mapped_column(String(16))
    row_count: Mapped[int] = mapped_column(Integer)
    columns: Mapped[list[str]] = mapped_column(Json)
    prompt_kind: Mapped[str] = mapped_column(String(16))  # "text" or "chat"
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[CreatedAt]


class DatasetRow(Base):
    __tablename__ = "dataset_rows"

    dataset_id: Mapped[str] = mapped_column(
        ForeignKey("datasets.id", ondelete="CASCADE"), primary_key=True
    )
    row_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    data: Mapped[dict[str, Any]] = mapped_column(Json)


class LeasedWork:
    """The columns of work a worker takes and holds under a lease (jobs, exports;
    service.leases): who holds it and its last heartbeat, and when it was made, changed,
    started and finished."""

    worker_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    created_at: Mapped[CreatedAt]
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, onupdate=utcnow
    )
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class Job(LeasedWork, Base):
    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("tenant_id", "idempotency_key", name="uq_jobs_tenant_idempotency_key"),
        Index("ix_jobs_tenant_id_created_at", "tenant_id", "created_at"),
        Index("ix_jobs_status_heartbeat_at", "status", "heartbeat_at"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id"), index=True)
    name: Mapped[str | None] = mapped_column(String(300), nullable=True)
    base_model: Mapped[str] = mapped_column(String(500))
    hyperparameters: Mapped[dict[str, Any]] = mapped_column(Json)
    # How it trains: "grpo" (rewards) or "sft" (supervised, on the dataset's answers).
    method: Mapped[str] = mapped_column(String(16), default="grpo", server_default=text("'grpo'"))
    status: Mapped[str] = mapped_column(String(16), index=True)
    failure_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    # The newest stored reward config; the worker applies it at the next step boundary.
    config_version: Mapped[int] = mapped_column(Integer, default=1)
    applied_config_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    steps_completed: Mapped[int] = mapped_column(Integer, default=0)
    # The last step the worker began, written as it begins one, under the row lock that
    # config updates take: an update knows exactly which step will be the first to use it.
    started_step: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    allow_network: Mapped[bool] = mapped_column(Boolean, default=False)
    # The hosts (host:port) of the job's HTTP tools and endpoint grader: a job without
    # allow_network may reach these alone (service.http_tools). Fixed at creation.
    egress_hosts: Mapped[list[str]] = mapped_column(
        Json, default=list, server_default=text("'[]'::jsonb")
    )
    runtime_packages: Mapped[list[str]] = mapped_column(Json, default=list)
    # Job secrets: one Fernet token (service.secrets), and their names for display.
    secrets_sealed: Mapped[str | None] = mapped_column(Text, nullable=True)
    secret_names: Mapped[list[str]] = mapped_column(
        Json, default=list, server_default=text("'[]'::jsonb")
    )
    adapter_path: Mapped[str | None] = mapped_column(Text, nullable=True)
    # What the run warned about (workers.training_signals) and the guards that tripped
    # (workers.guards): [{"kind", "step", "message", ...}].
    warnings: Mapped[list[dict[str, Any]]] = mapped_column(
        Json, default=list, server_default=text("'[]'::jsonb")
    )
    # Guards against reward hacking (service.jobs.guard_settings): thresholds and pause_on,
    # as given; '{}' reads as the defaults.
    guards: Mapped[dict[str, Any]] = mapped_column(
        Json, default=dict, server_default=text("'{}'::jsonb")
    )
    # Where validation prompts come from: another dataset of the tenant, or a held-out share
    # of the training rows (at most one of the two; neither: no evaluation).
    validation_dataset_id: Mapped[str | None] = mapped_column(
        ForeignKey("datasets.id"), nullable=True
    )
    validation_split: Mapped[float | None] = mapped_column(Float, nullable=True)
    # What the job trains on: this many devices (ranks) on each of num_nodes workers (one
    # per machine), under this engine.
    num_devices: Mapped[int] = mapped_column(Integer, default=1, server_default=text("1"))
    num_nodes: Mapped[int] = mapped_column(Integer, default=1, server_default=text("1"))
    engine: Mapped[str] = mapped_column(String(32), default="ddp", server_default=text("'ddp'"))
    # Lineage (init_from): the job whose adapter, or checkpoint at parent_checkpoint_step,
    # this one started from. No foreign key: the lineage outlives the parent's row, and the
    # starting weights were copied at creation to init_adapter_path, this job's own.
    parent_job_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    parent_checkpoint_step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    init_adapter_path: Mapped[str | None] = mapped_column(Text, nullable=True)
    # The optimizer starts from the checkpoint's state (its optimizer.pt is in the copy too).
    init_from_optimizer: Mapped[bool] = mapped_column(
        Boolean, default=False, server_default=text("false")
    )
    idempotency_key: Mapped[str | None] = mapped_column(String(200), nullable=True)
    # Cost (service.usage): what the job was expected to cost at creation (a CostEstimate),
    # the GPU-seconds of its finished runs, and since when its current run holds devices
    # (None: it holds none; paused and queued time count nothing).
    cost_estimate: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)
    gpu_seconds: Mapped[float] = mapped_column(Float, default=0.0, server_default=text("0"))
    held_since: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # What its measured throughput is filed under (service.usage.throughput): the model's
    # shape, set at creation; the device kind and generation backend of the run, set by the
    # worker as it starts one.
    model_key: Mapped[str | None] = mapped_column(String(300), nullable=True)
    device_kind: Mapped[str | None] = mapped_column(String(200), nullable=True)
    generation_backend: Mapped[str | None] = mapped_column(String(32), nullable=True)


class RewardFunctionVersion(Base):
    """The source of one version of one named reward function of a job."""

    __tablename__ = "reward_function_versions"
    __table_args__ = (
        UniqueConstraint("job_id", "name", "version", name="uq_reward_function_versions_key"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    job_id: Mapped[JobRef]
    name: Mapped[str] = mapped_column(String(100))
    version: Mapped[int] = mapped_column(Integer)
    source: Mapped[str] = mapped_column(Text)
    form: Mapped[str] = mapped_column(String(16))  # "sample" or "batch"
    created_at: Mapped[CreatedAt]


class AgentCodeVersion(Base):
    """The source of one version of one of a job's tools or environments (agent jobs)."""

    __tablename__ = "agent_code_versions"
    __table_args__ = (
        UniqueConstraint("job_id", "kind", "name", "version", name="uq_agent_code_versions_key"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    job_id: Mapped[JobRef]
    kind: Mapped[str] = mapped_column(String(16))  # "tool" or "environment"
    name: Mapped[str] = mapped_column(String(100))
    version: Mapped[int] = mapped_column(Integer)
    source: Mapped[str] = mapped_column(Text)
    # Environments only: the class the source defines (part of the version: a new class name
    # is new code even when the source is the same).
    class_name: Mapped[str | None] = mapped_column(String(100), nullable=True)
    created_at: Mapped[CreatedAt]


class JobConfigVersion(Base):
    """A whole editable config: which function versions, with which weights, and sampling."""

    __tablename__ = "job_config_versions"
    __table_args__ = (UniqueConstraint("job_id", "version", name="uq_job_config_versions_key"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    job_id: Mapped[JobRef]
    version: Mapped[int] = mapped_column(Integer)
    # {name: {"version": int, "weight": float}}
    reward_functions: Mapped[dict[str, Any]] = mapped_column(Json)
    # Agent jobs: {name: {"version": int}} and {name: {"version": int, "weight": float}},
    # versions of agent_code_versions rows; {} for a job without tools or environments.
    tools: Mapped[dict[str, Any]] = mapped_column(
        Json, default=dict, server_default=text("'{}'::jsonb")
    )
    environments: Mapped[dict[str, Any]] = mapped_column(
        Json, default=dict, server_default=text("'{}'::jsonb")
    )
    temperature: Mapped[float | None] = mapped_column(Float, nullable=True)
    top_p: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_at: Mapped[CreatedAt]
    applied_at_step: Mapped[int | None] = mapped_column(Integer, nullable=True)


class Step(Base):
    __tablename__ = "steps"

    job_id: Mapped[JobRef] = mapped_column(primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    config_version: Mapped[int] = mapped_column(Integer)
    reward_mean: Mapped[float | None] = mapped_column(Float, nullable=True)
    reward_std: Mapped[float | None] = mapped_column(Float, nullable=True)
    loss: Mapped[float | None] = mapped_column(Float, nullable=True)
    kl: Mapped[float | None] = mapped_column(Float, nullable=True)
    learning_rate: Mapped[float | None] = mapped_column(Float, nullable=True)
    duration_s: Mapped[float] = mapped_column(Float)
    # Tokens the step's completions hold (rank 0's record); None for supervised steps and
    # steps stored before it was recorded.
    completion_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Share of the step's groups whose completions all got the same reward (no signal).
    frac_reward_zero_std: Mapped[float | None] = mapped_column(Float, nullable=True)
    # {name: {"version", "weight", "mean", "std", "scored", "errors", "error_rate"}}
    reward_functions: Mapped[dict[str, Any]] = mapped_column(Json)
    # Agent jobs: tool calls, turns, truncation and per-tool errors (StepRecord.agent_metrics).
    agent_metrics: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)
    # Supervised jobs: what TRL logs beside loss and learning rate (grad_norm,
    # mean_token_accuracy, entropy, num_tokens; eval_loss and eval_mean_token_accuracy at
    # evaluated steps). Null for GRPO steps.
    metrics: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)
    # Jobs with hyperparameters.async_generation: the rollouts' policy versions and staleness,
    # the config versions they were sampled under, the importance-sampling ratios
    # (workers.training.async_generation.StepStaleness). Null for other jobs.
    async_generation: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)
    created_at: Mapped[CreatedAt]


class Evaluation(Base):
    """The current adapter's completions for the validation prompts, scored: one per eval step."""

    __tablename__ = "evaluations"

    job_id: Mapped[JobRef] = mapped_column(primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    config_version: Mapped[int] = mapped_column(Integer)
    reward_mean: Mapped[float | None] = mapped_column(Float, nullable=True)
    reward_std: Mapped[float | None] = mapped_column(Float, nullable=True)
    prompts: Mapped[int] = mapped_column(Integer)
    samples: Mapped[int] = mapped_column(Integer)
    duration_s: Mapped[float] = mapped_column(Float)
    # {name: {"version", "weight", "mean", "std", "scored", "errors"}}
    reward_functions: Mapped[dict[str, Any]] = mapped_column(Json)
    # Agent jobs: as the step's, over the validation rollouts.
    agent_metrics: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)
    created_at: Mapped[CreatedAt]


class Completion(Base):
    __tablename__ = "completions"
    __table_args__ = (Index("ix_completions_job_id_step_id", "job_id", "step", "id"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    job_id: Mapped[JobRef]
    step: Mapped[int] = mapped_column(Integer)
    config_version: Mapped[int] = mapped_column(Integer)
    prompt_index: Mapped[int] = mapped_column(Integer)
    group_position: Mapped[int] = mapped_column(Integer)
    dataset_index: Mapped[int | None] = mapped_column(Integer, nullable=True)
    prompt: Mapped[Any] = mapped_column(Json)
    completion: Mapped[str] = mapped_column(Text)
    # {name: score or null}
    scores: Mapped[dict[str, Any]] = mapped_column(Json)
    total: Mapped[float | None] = mapped_column(Float, nullable=True)
    advantage: Mapped[float | None] = mapped_column(Float, nullable=True)
    token_count: Mapped[int] = mapped_column(Integer)
    # Agent jobs: the rollout's messages, turn by turn (CompletionRecord.trajectory).
    trajectory: Mapped[list[dict[str, Any]] | None] = mapped_column(Json, nullable=True)


class FunctionStepRow:
    """The columns every per-function, per-step record shares (its print output, its errors):
    the two are listed through one query (service.jobs.step_repository). sort_order keeps
    them first in each table, as the migrations created them."""

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True, sort_order=-1)
    job_id: Mapped[JobRef] = mapped_column(sort_order=-1)
    step: Mapped[int] = mapped_column(Integer, sort_order=-1)
    function_name: Mapped[str] = mapped_column(String(100), sort_order=-1)
    function_version: Mapped[int] = mapped_column(Integer, sort_order=-1)


class RewardErrorRecord(FunctionStepRow, Base):
    __tablename__ = "reward_errors"
    __table_args__ = (Index("ix_reward_errors_job_id_step", "job_id", "step"),)

    kind: Mapped[str] = mapped_column(String(32))
    message: Mapped[str] = mapped_column(Text)
    traceback: Mapped[str | None] = mapped_column(Text, nullable=True)
    sample_index: Mapped[int | None] = mapped_column(Integer, nullable=True)


class RewardLog(FunctionStepRow, Base):
    """A reward function's stdout and stderr during one step, bounded."""

    __tablename__ = "reward_logs"
    __table_args__ = (Index("ix_reward_logs_job_id_step", "job_id", "step"),)

    output: Mapped[str] = mapped_column(Text)
    truncated: Mapped[bool] = mapped_column(Boolean, default=False)


class JobEvent(Base):
    __tablename__ = "job_events"
    __table_args__ = (Index("ix_job_events_job_id_id", "job_id", "id"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    job_id: Mapped[JobRef]
    kind: Mapped[str] = mapped_column(String(50))
    message: Mapped[str] = mapped_column(Text)
    step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    data: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    created_at: Mapped[CreatedAt]


class JobNode(Base):
    """One worker of a job placed on several machines (workers.placement).

    Rows appear as workers join a placement (node 0 first) and go when the run ends; the
    job runs only once all ``num_nodes`` rows exist. Node 0's worker holds the job's lease and
    records; every node beats its row, so node 0 sees a lost node.
    """

    __tablename__ = "job_nodes"

    job_id: Mapped[JobRef] = mapped_column(primary_key=True)
    node_rank: Mapped[int] = mapped_column(Integer, primary_key=True)
    # One attempt to place the job: rows of an abandoned attempt are never mixed with a new one.
    placement_id: Mapped[str] = mapped_column(String(64))
    worker_id: Mapped[str] = mapped_column(String(200))
    # Where the other nodes reach this worker's machine (RFT_WORKER_ADDRESS).
    address: Mapped[str] = mapped_column(String(255))
    # waiting -> launched -> finished | failed
    state: Mapped[str] = mapped_column(String(16))
    # Node 0 only: the port its launcher's rendezvous listens on, set when all nodes joined.
    rendezvous_port: Mapped[int | None] = mapped_column(Integer, nullable=True)
    detail: Mapped[str | None] = mapped_column(Text, nullable=True)  # why a node failed
    joined_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    heartbeat_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Checkpoint(Base):
    """A saved adapter plus trainer state (optimizer, scheduler, RNG, data position)."""

    __tablename__ = "checkpoints"

    job_id: Mapped[JobRef] = mapped_column(primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    path: Mapped[str] = mapped_column(Text)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[CreatedAt]


class Export(LeasedWork, Base):
    """A job's adapter made into something to ship: a merged model archive in the artifact
    store, or an adapter or merged model pushed to a Hugging Face hub repository. Built by a
    worker (workers.export); the row is its state (service.exports.status) and progress."""

    __tablename__ = "exports"
    __table_args__ = (Index("ix_exports_job_id_created_at", "job_id", "created_at"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    job_id: Mapped[JobRef]
    kind: Mapped[str] = mapped_column(String(16))  # "merged" or "adapter"
    # The checkpoint whose adapter it ships; None: the job's final adapter.
    checkpoint_step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    dtype: Mapped[str] = mapped_column(String(16))  # "auto": the base model's own
    # Where it goes: None keeps an archive in the artifact store; else a hub repository, with
    # the token as the name of one of the job's secrets, or given with the request (sealed,
    # service.secrets, and erased when the export ends).
    hub_repo: Mapped[str | None] = mapped_column(String(200), nullable=True)
    hub_private: Mapped[bool] = mapped_column(Boolean, default=True)
    hub_token_secret: Mapped[str | None] = mapped_column(String(128), nullable=True)
    hub_token_sealed: Mapped[str | None] = mapped_column(Text, nullable=True)
    hub_commit_url: Mapped[str | None] = mapped_column(Text, nullable=True)
    # queued -> running -> succeeded | failed; a lost worker's export is queued again.
    status: Mapped[str] = mapped_column(String(16), index=True)
    stage: Mapped[str | None] = mapped_column(String(32), nullable=True)
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    failure_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    # A client's retried POST carries the same key and gets the same export (looked up under
    # the job's row lock, so two at once cannot both create one).
    idempotency_key: Mapped[str | None] = mapped_column(String(200), nullable=True)
    archive_uri: Mapped[str | None] = mapped_column(Text, nullable=True)
    size_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class Throughput(Base):
    """What steps measured, per kind of device, model shape and generation backend: running
    means over every recorded step but the first of each run (its warm-up). The estimates at
    job creation read them (service.usage.estimates)."""

    __tablename__ = "throughput"

    device_kind: Mapped[str] = mapped_column(String(200), primary_key=True)  # "cpu", "cuda:<name>"
    model_key: Mapped[str] = mapped_column(String(300), primary_key=True)
    generation_backend: Mapped[str] = mapped_column(String(32), primary_key=True)
    steps: Mapped[int] = mapped_column(Integer)
    # A step's wall time x the devices it held, per completion token: step time scales with
    # tokens per step and, across devices, inversely with their number.
    device_seconds_per_token: Mapped[float] = mapped_column(Float)
    tokens_per_completion: Mapped[float] = mapped_column(Float)
    step_seconds: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class GpuUsage(Base):
    """One stretch of a job holding devices (taken -> let go), for per-tenant usage by day.
    No foreign key to the job: what a tenant used outlives the job's row."""

    __tablename__ = "gpu_usage"
    __table_args__ = (
        Index("ix_gpu_usage_tenant_id_started_at", "tenant_id", "started_at"),
        Index("ix_gpu_usage_job_id", "job_id"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    job_id: Mapped[str] = mapped_column(String(64))
    devices: Mapped[int] = mapped_column(Integer)  # num_devices x num_nodes
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class WebhookEndpoint(Base):
    """A URL a tenant registered for job events (service.webhooks), with the secret its
    deliveries are signed with (sealed with the server's secrets key, service.secrets)."""

    __tablename__ = "webhook_endpoints"
    __table_args__ = (
        Index("ix_webhook_endpoints_tenant_id_created_at", "tenant_id", "created_at"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    url: Mapped[str] = mapped_column(Text)
    event_types: Mapped[list[str]] = mapped_column(Json)
    description: Mapped[str | None] = mapped_column(String(200), nullable=True)
    secret_sealed: Mapped[str] = mapped_column(Text)
    created_at: Mapped[CreatedAt]


class WebhookDelivery(Base):
    """One event for one endpoint: the outbox row, written in the transaction of the change it
    reports, then sent (and retried) by the dispatcher (service.webhooks.dispatcher). The body
    is kept as sent: every retry carries the same bytes and the same ``webhook-id``."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        Index("ix_webhook_deliveries_endpoint_id_created_at", "endpoint_id", "created_at"),
        # What the dispatcher looks for: pending rows that are due.
        Index("ix_webhook_deliveries_status_next_attempt_at", "status", "next_attempt_at"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # the webhook-id header
    endpoint_id: Mapped[str] = mapped_column(ForeignKey("webhook_endpoints.id", ondelete="CASCADE"))
    event_id: Mapped[str] = mapped_column(String(64))
    event_type: Mapped[str] = mapped_column(String(64))
    job_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    body: Mapped[str] = mapped_column(Text)
    # pending -> delivered | failed (every attempt used up)
    status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    created_at: Mapped[CreatedAt]
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class WebhookAttempt(Base):
    """One try at sending a delivery: what the receiver answered, or why nothing did."""

    __tablename__ = "webhook_attempts"
    __table_args__ = (Index("ix_webhook_attempts_delivery_id_number", "delivery_id", "number"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    delivery_id: Mapped[str] = mapped_column(
        ForeignKey("webhook_deliveries.id", ondelete="CASCADE")
    )
    number: Mapped[int] = mapped_column(Integer)  # 1 for the first try
    attempted_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    status_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    duration_ms: Mapped[float] = mapped_column(Float)
