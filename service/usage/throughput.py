"""Throughput measured, not guessed: each recorded step of a run is folded into the running
means of its (device kind, model key, generation backend), which the estimates read.

The model key names the model's shape where its config.json can be read here (parameters,
hidden size, layers, dtype), so two checkpoints of one architecture share their
measurements; else the model's name (the built-in tiny model, a path only workers have).
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from service.base_models.model_config import read_model_files
from service.gpu.memory_plan import ModelShape, UnknownModelShape
from service.models import Job, Step
from service.settings import Settings
from service.usage.repository import ThroughputRepository


def model_key(base_model: str, settings: Settings) -> str:
    files = read_model_files(base_model, settings)
    if files is None:
        return f"model:{base_model}"[:300]
    try:
        shape = ModelShape.from_config(files.config, checkpoint_bytes=files.checkpoint_bytes)
    except UnknownModelShape:
        return f"model:{base_model}"[:300]
    config = files.config.get("text_config") or files.config
    dtype = config.get("torch_dtype") or config.get("dtype") or files.config.get("torch_dtype")
    return (
        f"{shape.parameters} params, hidden {shape.hidden_size}, {shape.layers} layers, "
        f"{dtype or 'dtype unknown'}"
    )


def measure_step(
    session: Session,
    job_id: str,
    *,
    step: int,
    duration_s: float,
    completion_tokens: int | None,
    completions: int,
) -> bool:
    """Fold one recorded step into its throughput row. Not measured: a run's first step (its
    warm-up: model load, vLLM start, compilation; the step before it was not recorded since a
    worker took the job), a step without completion tokens (supervised), and a job whose run
    kind is unknown (the worker did not say it). Whether the step was measured."""
    job = session.get(Job, job_id)
    if (
        job is None
        or not completion_tokens
        or completions < 1
        or duration_s <= 0
        or job.model_key is None
        or job.device_kind is None
        or job.generation_backend is None
        or job.held_since is None
    ):
        return False
    # The run's first step has no step before it recorded since the worker took the job.
    previous = session.get(Step, (job_id, step - 1))
    if previous is None or previous.created_at < job.held_since:
        return False
    devices = job.num_devices * job.num_nodes
    per_completion = completion_tokens / completions
    # The step's whole batch: under several ranks the record may hold rank 0's share only.
    hp = job.hyperparameters or {}
    batch = int(hp.get("prompts_per_step", 0)) * int(hp.get("num_generations", 0)) or completions
    ThroughputRepository(session).add_measurement(
        (job.device_kind, job.model_key, job.generation_backend),
        device_seconds_per_token=duration_s * devices / (per_completion * batch),
        tokens_per_completion=per_completion,
        step_seconds=duration_s,
    )
    return True


def record_run_kind(session: Session, job_id: str, device_kind: str, backend: str) -> None:
    """The worker starting a run says what its steps are measured as."""
    job = session.get(Job, job_id)
    if job is not None:
        job.device_kind = device_kind
        job.generation_backend = backend
