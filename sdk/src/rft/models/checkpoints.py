"""A job's saved checkpoints."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


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
