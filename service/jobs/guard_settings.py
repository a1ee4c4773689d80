"""A job's guards against reward hacking: which exist, their thresholds, which pause the job.

The API validates and stores these (``jobs.guards``); the worker's rules
(workers.guards) read them. Here, below both, so the API never imports the workers.
docs/guards.md explains each guard.
"""

from __future__ import annotations

from typing import Any, get_args

from pydantic import BaseModel, ConfigDict, Field

from rft.models.guards import GuardName

GUARD_NAMES: tuple[str, ...] = get_args(GuardName)


class GuardSettings(BaseModel):
    """Thresholds of every guard (each has a default) and the guards that pause the job."""

    model_config = ConfigDict(extra="forbid")

    pause_on: list[GuardName] = Field(
        default_factory=list,
        max_length=len(GUARD_NAMES),
        description="Guards that pause the job when they trip (as `rft jobs pause` does: the "
        "worker checkpoints and lets go; resume continues). The others only warn. A guard "
        "pauses a job once: after a resume it still warns, but lets the run go on.",
    )
    patience: int = Field(
        3,
        ge=1,
        le=1000,
        description="Consecutive steps a step-wise guard's condition must hold before it trips; "
        "it trips again only after the condition has stopped holding and come back.",
    )
    early_steps: int = Field(
        3,
        ge=1,
        le=1000,
        description="The run's first steps: their mean completion length and entropy are the "
        "baseline length_drift and entropy_shift compare against.",
    )
    divergence_evals: int = Field(
        3,
        ge=2,
        le=100,
        description="reward_divergence: compares the first and the last of this many latest "
        "validation runs (needs a validation set).",
    )
    divergence_min_change: float = Field(
        0.02,
        ge=0,
        le=1e6,
        description="reward_divergence: trips when, over those validation runs, the training "
        "reward rose by at least this much and the validation reward fell by at least this "
        "much (reward units).",
    )
    length_limit_share: float = Field(
        0.9,
        gt=0,
        le=1,
        description="length_drift: trips when the step's mean completion length is at least "
        "this share of max_completion_length ...",
    )
    length_min_rise: float = Field(
        0.2,
        ge=0,
        le=1,
        description="... and has risen by at least this share of max_completion_length above "
        "the mean of the first early_steps (a run that starts at the limit has not drifted: "
        "the truncation warning covers it).",
    )
    dominance_share: float = Field(
        0.8,
        gt=0.5,
        le=1,
        description="reward_dominance (two or more reward functions): trips when one function "
        "came to carry at least this share of the reward (|weight x mean| over all "
        "functions'; below it in the window's first half) while its mean rose and every "
        "other function's mean fell over dominance_window steps.",
    )
    dominance_window: int = Field(
        6,
        ge=2,
        le=1000,
        description="reward_dominance: the latest steps compared, first half against second.",
    )
    kl_factor: float = Field(
        4.0,
        gt=1,
        le=1e6,
        description="kl_shift (beta > 0, else no KL is logged): trips when the step's KL is at "
        "least this many times the median of the kl_window steps before it ...",
    )
    kl_min: float = Field(
        0.1,
        ge=0,
        le=1e6,
        description="... and at least this high (nats): small KLs early in a run multiply "
        "without meaning anything.",
    )
    kl_window: int = Field(
        5, ge=1, le=1000, description="kl_shift: the steps whose median KL is the baseline."
    )
    entropy_factor: float = Field(
        3.0,
        gt=1,
        le=1e6,
        description="entropy_shift: trips when the step's mean token entropy is below the first "
        "early_steps' mean divided by this (collapse) or above it times this (jump).",
    )
    repetition_ngram: int = Field(
        3,
        ge=1,
        le=20,
        description="repetition: the n of the word n-grams counted (words split on whitespace).",
    )
    repetition_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="repetition: trips when, averaged over the step's completions, at least "
        "this share of a completion's word n-grams repeat one earlier in it.",
    )
    agreement_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="group_agreement: trips when at least this share of the step's groups "
        "are one completion, word for word, num_generations times (nothing to learn from).",
    )

    @classmethod
    def from_stored(cls, stored: dict[str, Any] | None) -> GuardSettings:
        """A job's stored guards; a job stored before guards existed gets the defaults."""
        return cls.model_validate(stored or {})
