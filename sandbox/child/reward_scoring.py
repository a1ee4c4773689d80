"""What the reward child knows of a loaded reward function and of the scores it returns.

Standard library only: it runs inside the sandbox, beside reward_child.py.
"""

from __future__ import annotations

import inspect
import math
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from .runtime import format_user_traceback, short_repr, to_score


class LoadedFunction:
    def __init__(self, name: str, function: Callable[..., Any], spec: dict[str, Any]) -> None:
        self.name = name
        self.function = function
        self.form: str = spec["form"]
        self.is_async = inspect.iscoroutinefunction(function)
        self.max_concurrency = max(1, int(spec.get("max_concurrency") or 1))
        sample_timeout = spec.get("sample_timeout_s")
        self.sample_timeout_s = float(sample_timeout) if sample_timeout else math.inf
        rate = spec.get("rate_limit_per_s")
        # The same limiter reward code gets from rft_reward (installed at startup).
        self.rate_limiter = sys.modules["rft_reward"].RateLimiter(float(rate)) if rate else None
        # Learned from the last batch: a slow plain function starts in the thread pool at once.
        self.slow = False
        self.takes_messages = False
        # A batch function without **kwargs gets only the keywords it names, so extra dataset
        # columns do not break a function written as f(prompts, completions).
        self.keywords: frozenset[str] | None = None
        try:
            parameters = list(inspect.signature(function).parameters.values())
        except (TypeError, ValueError):
            return
        # A per-sample function that names `messages` (or takes **kwargs) gets its sample's
        # conversation (sample_extras).
        self.takes_messages = any(
            p.name == "messages" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters
        )
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            self.keywords = frozenset(
                p.name
                for p in parameters
                if p.kind
                in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
            )


class SampleTimer:
    """Limits of the samples scored on the main thread: the call's deadline, and each
    sample's own limit from its start."""

    def __init__(self, deadline: float, sample_limit: float, now: float) -> None:
        self.deadline = deadline
        self.sample_limit = sample_limit
        self.sample_started = now
        self.expired: str | None = None

    def next_check(self, now: float) -> float:
        return min(self.deadline, self.sample_started + self.sample_limit) - now

    def expired_now(self) -> bool:
        """Whether the call or the current sample is over its limit (and which, in expired)."""
        now = time.monotonic()
        if now >= self.deadline - 0.0005:
            self.expired = "call"
        elif now - self.sample_started >= self.sample_limit - 0.0005:
            self.expired = "sample"
        return self.expired is not None


class SampleOutcomes:
    """Scores and errors of one per-sample call, filled in as samples finish in any order."""

    def __init__(self, count: int, deadline: float, call_message: str) -> None:
        self.deadline = deadline  # the call's, by time.monotonic()
        self.call_message = call_message  # the error of samples unfinished at the deadline
        self.scores: list[float | None] = [None] * count
        self.errors: list[dict[str, Any]] = []
        self.finished = [False] * count
        self._lock = threading.Lock()

    def value(self, index: int, value: Any) -> None:
        score, problem = to_score(value)
        with self._lock:
            self.scores[index] = score
            self.finished[index] = True
            if problem is not None:
                self.errors.append(invalid_return(problem, index))

    def error(self, index: int, error: BaseException) -> None:
        with self._lock:
            self.finished[index] = True
            self.errors.append(error_of("exception", error, index))

    def timeout(self, index: int, message: str) -> None:
        with self._lock:
            self.finished[index] = True
            self.errors.append(
                {"kind": "timeout", "message": message, "traceback": None, "sample_index": index}
            )

    def time_out_unfinished(self) -> None:
        for index, done in enumerate(self.finished):
            if not done:
                self.timeout(index, self.call_message)

    def sorted_errors(self) -> list[dict[str, Any]]:
        return sorted(self.errors, key=lambda error: error["sample_index"])


def sample_extras(loaded: LoadedFunction, batch: dict[str, Any]) -> Callable[[int], dict[str, Any]]:
    """The keyword arguments of sample i beyond (prompt, completion, example): `messages`
    for a function that takes them, in every job (the README's f(prompt, completion, example,
    messages) must run wherever it is scored, pre-flight included)."""
    if not loaded.takes_messages:
        return lambda index: {}
    trajectories = batch.get("trajectories")
    if trajectories:
        return lambda index: {"messages": trajectories[index]}
    # A job without tools: its completion is one assistant turn, as TRL passes a
    # conversational completion to a batch function.
    completions = batch["completions"]
    return lambda index: {"messages": [{"role": "assistant", "content": completions[index]}]}


def batch_arguments(batch: dict[str, Any]) -> dict[str, Any]:
    prompts = batch["prompts"]
    completions: list[Any] = batch["completions"]
    if batch.get("trajectories"):
        # Agent rollouts: the whole conversation, tool calls and results included, as TRL
        # passes a tool-using rollout's completion.
        completions = batch["trajectories"]
    elif prompts and isinstance(prompts[0], list):
        # TRL passes conversational completions as a one-message conversation.
        completions = [[{"role": "assistant", "content": text}] for text in completions]
    arguments: dict[str, Any] = {}
    examples: list[dict[str, Any]] = batch["examples"]
    for example in examples:
        for key in example:
            # TRL leaves these out of the columns: they arrive as prompts and completions.
            if key not in arguments and key not in ("prompt", "completion", "completion_ids"):
                arguments[key] = [row.get(key) for row in examples]
    arguments["prompts"] = prompts
    arguments["completions"] = completions
    return arguments


def to_batch_scores(values: Any, count: int) -> tuple[list[float | None], list[dict[str, Any]]]:
    nothing: list[float | None] = [None] * count
    if isinstance(values, str | bytes | dict) or not hasattr(values, "__iter__"):
        problem = f"returned {type(values).__name__} {short_repr(values)}, not a list of numbers"
        return nothing, [invalid_return(problem, None)]
    values = list(values)
    if len(values) != count:
        message = f"returned {len(values)} scores for {count} completions"
        return nothing, [
            {"kind": "wrong_length", "message": message, "traceback": None, "sample_index": None}
        ]
    scores: list[float | None] = []
    errors: list[dict[str, Any]] = []
    for index, value in enumerate(values):
        score, issue = to_score(value)
        scores.append(score)
        if issue is not None:
            errors.append(invalid_return(f"score {index} {issue}", index))
    return scores, errors


def invalid_return(message: str, index: int | None) -> dict[str, Any]:
    return {"kind": "invalid_return", "message": message, "traceback": None, "sample_index": index}


def error_of(kind: str, error: BaseException, index: int | None) -> dict[str, Any]:
    return {
        "kind": kind,
        "message": f"{type(error).__name__}: {error}"[:1000],
        "traceback": format_user_traceback(error),
        "sample_index": index,
    }
