from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field


class Checkpoint(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    step: int
    size_bytes: int
    created_at: datetime
    download_path: str
    eval_reward: float | None = Field(
        None, description="Validation reward mean of the adapter at this step, if evaluated."
    )
    is_best: bool = Field(
        False,
        description="Among the job's keep_best checkpoints with the highest eval_reward.",
    )


class CheckpointList(BaseModel):
    data: list[Checkpoint]
    final_adapter_path: str | None
