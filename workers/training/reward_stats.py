"""Reward statistics as steps and evaluations report them: mean and std over the scores that
exist, and one function's metrics."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from workers.training.step_records import FunctionStepMetrics


def mean_and_std(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    """Mean and sample std (as TRL logs reward_std) over the values that exist."""
    present = [v for v in values if v is not None and not math.isnan(v)]
    if not present:
        return None, None
    std = statistics.stdev(present) if len(present) > 1 else 0.0
    return statistics.fmean(present), std


def function_metrics(
    name: str, version: int, weight: float, scores: Sequence[float | None], errors: int
) -> FunctionStepMetrics:
    """One function's metrics over ``scores`` (None: no score), ``errors`` samples lost."""
    mean, std = mean_and_std(scores)
    return FunctionStepMetrics(
        name=name,
        version=version,
        weight=weight,
        mean=mean,
        std=std,
        scored=sum(1 for s in scores if s is not None),
        errors=errors,
    )
