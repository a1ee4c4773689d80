"""A RewardSandbox that runs per-sample functions in this process: trusted test code only.

Stands in for the real sandbox where it is not available; it follows the same contract for
what the training loop relies on (scores, None, per-sample errors).
"""

from __future__ import annotations

import math
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from sandbox.api import (
    FunctionResult,
    RewardCodeError,
    RewardError,
    RewardErrorKind,
    RewardFunctionSpec,
    ScoringBatch,
)


class InProcessSandbox:
    def __init__(self) -> None:
        self._functions: list[tuple[RewardFunctionSpec, Callable[..., Any]]] = []

    def load(self, functions: Sequence[RewardFunctionSpec]) -> None:
        loaded = []
        for spec in functions:
            namespace: dict[str, Any] = {}
            exec(compile(spec.source, f"<{spec.name}>", "exec"), namespace)
            function = namespace.get(spec.name)
            if not callable(function):
                raise RewardCodeError(spec.name, "no function of that name")
            loaded.append((spec, function))
        self._functions = loaded

    def score(self, batch: ScoringBatch) -> dict[str, FunctionResult]:
        results = {}
        for spec, function in self._functions:
            result = FunctionResult(name=spec.name, version=spec.version, scores=[])
            for index, sample in enumerate(
                zip(batch.prompts, batch.completions, batch.examples, strict=True)
            ):
                try:
                    value = function(*sample)
                except Exception as error:
                    result.scores.append(None)
                    result.errors.append(
                        RewardError(
                            RewardErrorKind.EXCEPTION,
                            repr(error),
                            traceback.format_exc(),
                            sample_index=index,
                        )
                    )
                    continue
                score = None if value is None else float(value)
                if score is not None and not math.isfinite(score):
                    score = None
                result.scores.append(score)
            results[spec.name] = result
        return results

    def close(self) -> None:
        self._functions = []
