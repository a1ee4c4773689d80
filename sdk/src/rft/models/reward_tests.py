"""What testing reward functions on samples returns (``reward_functions.test``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


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
