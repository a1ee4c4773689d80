"""The guards against reward hacking: their thresholds and their trips."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

GuardName = Literal[
    "reward_divergence",
    "length_drift",
    "reward_dominance",
    "kl_shift",
    "entropy_shift",
    "repetition",
    "group_agreement",
]


class Guards(BaseModel):
    """A job's guards against reward hacking (the server's docs/guards.md); a field left None
    is the server's default. Read back on ``Job.guards`` with every value filled in."""

    # A newer server may add thresholds: an older client keeps them.
    model_config = ConfigDict(extra="allow")

    pause_on: list[GuardName] | None = Field(
        None, description="Guards that pause the job when they trip (resume continues)."
    )
    patience: int | None = Field(
        None, ge=1, description="Consecutive steps a guard's condition must hold (3)."
    )
    early_steps: int | None = Field(
        None, ge=1, description="First steps whose length and entropy are the baseline (3)."
    )
    divergence_evals: int | None = Field(
        None, ge=2, description="reward_divergence: validation runs compared (3)."
    )
    divergence_min_change: float | None = Field(
        None, ge=0, description="reward_divergence: least rise and fall, reward units (0.02)."
    )
    length_limit_share: float | None = Field(
        None, gt=0, le=1, description="length_drift: mean length / max_completion_length (0.9)."
    )
    length_min_rise: float | None = Field(
        None, ge=0, le=1, description="length_drift: least rise over the first steps (0.2)."
    )
    dominance_share: float | None = Field(
        None, gt=0.5, le=1, description="reward_dominance: one function's share (0.8)."
    )
    dominance_window: int | None = Field(
        None, ge=2, description="reward_dominance: steps compared (6)."
    )
    kl_factor: float | None = Field(
        None, gt=1, description="kl_shift: KL over the recent median (4)."
    )
    kl_min: float | None = Field(None, ge=0, description="kl_shift: least KL that trips (0.1).")
    kl_window: int | None = Field(None, ge=1, description="kl_shift: steps of the median (5).")
    entropy_factor: float | None = Field(
        None, gt=1, description="entropy_shift: collapse or jump factor (3)."
    )
    repetition_ngram: int | None = Field(None, ge=1, description="repetition: n of n-grams (3).")
    repetition_share: float | None = Field(
        None, gt=0, le=1, description="repetition: repeated n-gram share (0.5)."
    )
    agreement_share: float | None = Field(
        None, gt=0, le=1, description="group_agreement: share of identical groups (0.5)."
    )


class GuardTrip(BaseModel):
    """A guard that tripped: one of ``Job.warnings`` (``Job.guard_trips``), with evidence."""

    kind: str
    step: int
    message: str
    numbers: dict[str, Any] = Field(default_factory=dict)
    # Two or three of the step's completions: {"completion", "scores", "total", ...}.
    examples: list[dict[str, Any]] = Field(default_factory=list)
    paused_job: bool = False
