"""What a job is expected to cost, per kind of worker that could run it."""

from __future__ import annotations

from pydantic import BaseModel, Field


class WorkerKindEstimate(BaseModel):
    """A job's expected cost on one kind of worker that could take it (``basis`` 'measured'),
    or why there is no figure (``basis`` 'none', with ``message``)."""

    device_kind: str = Field(description="'cpu', or 'cuda:' and the GPU's name.")
    generation_backend: str = Field(description="'vllm' or 'transformers'.")
    basis: str = Field(
        description="'measured': from steps of this model measured on this kind of worker; "
        "'none': nothing measured yet, and no figure is given."
    )
    message: str | None = Field(None, description="Why there is no figure, when there is none.")
    steps_measured: int = Field(0, description="Steps the figures are the means of.")
    tokens_per_step: float | None = Field(
        None,
        description="Typical completion tokens per step: the measured tokens per completion "
        "(capped at max_completion_length) x completions per step.",
    )
    step_seconds: float | None = Field(None, description="Expected wall time of one step.")
    total_seconds: float | None = Field(None, description="Expected wall time of all steps.")
    gpu_hours: float | None = Field(
        None, description="total_seconds x the devices the job holds (num_devices x num_nodes)."
    )


class CostEstimate(BaseModel):
    """What a job is expected to cost, from throughput the workers measured (docs/cost.md)."""

    model_key: str = Field(description="The model's shape, as throughput is filed under it.")
    devices: int = Field(description="Devices the job holds: num_devices x num_nodes.")
    train_steps: int
    completions_per_step: int | None = Field(
        None, description="prompts_per_step x num_generations; null for supervised jobs."
    )
    max_tokens: int | None = Field(
        None,
        description="Upper bound on completion tokens over the run: completions per step x "
        "max_completion_length x train_steps. Null for supervised jobs.",
    )
    workers: list[WorkerKindEstimate] = Field(
        default_factory=list,
        description="One per kind of running worker that could take the job.",
    )
    note: str | None = Field(None, description="Why the list is empty or partial.")
