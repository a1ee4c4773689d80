"""What a job is expected to cost, per kind of worker that could run it."""

from __future__ import annotations

from pydantic import BaseModel, Field


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
