from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from service.jobs.schemas import RewardFunctionsInput
from service.secrets import JobSecrets

MAX_TEST_SAMPLES = 256


class Sample(BaseModel):
    prompt: str | list[dict[str, Any]]
    completion: str
    example: dict[str, Any] = Field(
        default_factory=dict, description="The dataset row; the prompt is added when missing."
    )


class RewardFunctionTest(RewardFunctionsInput):
    """Functions to try, on given samples or on rows of a stored dataset."""

    model_config = ConfigDict(extra="forbid")

    samples: list[Sample] | None = Field(None, max_length=MAX_TEST_SAMPLES)
    dataset_id: str | None = None
    completions: list[str] | None = Field(
        None,
        max_length=MAX_TEST_SAMPLES,
        description="With dataset_id: completions to score, paired with the dataset's rows in "
        "order (repeating the rows when there are more completions).",
    )
    rows: int = Field(4, ge=1, le=MAX_TEST_SAMPLES, description="Dataset rows to use.")
    allow_network: bool = False
    secrets: JobSecrets = Field(
        default_factory=dict, description="Environment for the functions, as a job's secrets."
    )

    @model_validator(mode="after")
    def _one_source_of_samples(self) -> RewardFunctionTest:
        if (self.samples is None) == (self.dataset_id is None):
            raise ValueError("give either samples or dataset_id")
        if self.samples is not None and not self.samples:
            raise ValueError("samples is empty")
        return self


class RewardErrorOut(BaseModel):
    kind: str
    message: str
    traceback: str | None
    sample_index: int | None


class FunctionTestResult(BaseModel):
    form: str
    scores: list[float | None]
    errors: list[RewardErrorOut]
    error_rate: float
    logs: str
    logs_truncated: bool
    duration_s: float


class RewardFunctionTestResult(BaseModel):
    samples: list[Sample]
    results: dict[str, FunctionTestResult]
    totals: list[float | None] = Field(description="Weighted sum per sample, as in training.")
