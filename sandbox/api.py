"""The contract between the training loop and the code that runs reward functions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

# How many samples of one per-sample function are scored at once by default: enough to hide
# the latency of a remote judge at a typical batch size; 1 scores them one after another.
DEFAULT_MAX_CONCURRENCY = 32
MAX_CONCURRENCY_LIMIT = 256


class RewardForm(StrEnum):
    """The two shapes of reward function users already write."""

    # Predibase style: f(prompt, completion, example) -> float, called once per sample.
    SAMPLE = "sample"
    # TRL style: f(prompts, completions, **kwargs) -> list[float], called once per batch.
    BATCH = "batch"


class RewardErrorKind(StrEnum):
    EXCEPTION = "exception"
    TIMEOUT = "timeout"
    KILLED = "killed"  # the process died (memory limit, signal)
    INVALID_RETURN = "invalid_return"  # not a number, NaN or inf
    WRONG_LENGTH = "wrong_length"  # a batch function returned the wrong number of scores
    SANDBOX = "sandbox"  # our side failed to run the function at all


@dataclass(frozen=True)
class RewardFunctionSpec:
    name: str
    source: str
    weight: float = 1.0
    version: int = 1
    # Samples scored at once: async functions are awaited together, plain ones run in the
    # sandbox's thread pool once they prove slow (cheap ones stay sequential). 1: one by one.
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    # Wall limit of one sample of a per-sample function; None: the sandbox's default.
    sample_timeout_s: float | None = None
    # Most calls started per second (per-sample: samples; batch: calls); None: no limit.
    rate_limit_per_s: float | None = None


@dataclass(frozen=True)
class ScoringBatch:
    """One generation batch: sample i is (prompts[i], completions[i], examples[i])."""

    prompts: list[Any]  # a string, or a list of chat messages
    completions: list[str]  # completion text
    examples: list[dict[str, Any]]  # the dataset row of each sample, prompt included
    step: int = 0
    # Agent jobs: each rollout's messages (assistant turns, tool calls and results). A batch
    # function gets them as its completions (TRL's conversational form); a per-sample function
    # gets them as ``messages`` when it takes that argument; ``completions`` is the final answer.
    # None (jobs without tools): such a function's ``messages`` is its completion as one
    # assistant turn.
    trajectories: list[list[dict[str, Any]]] | None = None


@dataclass
class RewardError:
    kind: RewardErrorKind
    message: str
    traceback: str | None = None
    # None when the error concerns the whole call (timeout, wrong length, a batch exception).
    sample_index: int | None = None


@dataclass
class FunctionResult:
    name: str
    version: int
    # One entry per sample; None where the function failed or itself returned None.
    scores: list[float | None]
    errors: list[RewardError] = field(default_factory=list)
    logs: str = ""  # the function's stdout and stderr for this batch, bounded
    logs_truncated: bool = False
    duration_s: float = 0.0

    @property
    def failed_samples(self) -> int:
        """How many samples got no score because of an error."""
        if any(e.sample_index is None for e in self.errors):
            return len(self.scores)
        return len({e.sample_index for e in self.errors})


class RewardCodeError(ValueError):
    """Reward code that cannot run at all: it does not parse, or defines no usable function."""

    def __init__(self, function_name: str, message: str) -> None:
        super().__init__(f"reward function {function_name!r}: {message}")
        self.function_name = function_name
        self.message = message


class RewardSandbox(Protocol):
    """Scores batches with a set of reward functions, outside the caller's process."""

    def load(self, functions: Sequence[RewardFunctionSpec]) -> None:
        """Replace the loaded functions. Raises RewardCodeError for code that cannot load."""

    def score(self, batch: ScoringBatch) -> dict[str, FunctionResult]:
        """Score every sample with every loaded function; never raises for user-code faults."""

    def close(self) -> None:
        """Stop every process this sandbox started."""
