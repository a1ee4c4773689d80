"""The one reward function TRL sees: it scores each generation batch in the sandbox.

TRL gets a single callable so that the set of user functions can change between steps without
touching the trainer (TRL fixes its reward function list, names and weights at init).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sandbox.api import FunctionResult, RewardSandbox, ScoringBatch
from workers.training.records import RewardConfig

REWARD_FUNCTION_NAME = "rft_reward"
# Added to every dataset row so a completion can be traced back to its row; never shown to users.
DATASET_INDEX_COLUMN = "__rft_dataset_index__"

# Keyword arguments TRL passes to reward functions that are not dataset columns.
_TRL_CONTROL_KWARGS = frozenset({"trainer_state", "log_extra", "log_metric", "environments"})


@dataclass
class ScoredGeneration:
    """Everything about one generation batch that the step record needs, in TRL's sample order."""

    step: int  # the 1-based optimizer step this batch trains
    config_version: int
    weights: dict[str, float]
    versions: dict[str, int]
    prompts: list[Any]
    completions: list[str]
    token_counts: list[int]
    dataset_indices: list[int | None]
    results: dict[str, FunctionResult]
    totals: list[float | None]


def completion_text(completion: Any) -> str:
    """Text of a completion: TRL passes conversational ones as a list of assistant messages."""
    if isinstance(completion, str):
        return completion
    return "".join(_message_text(message) for message in completion)


def _message_text(message: dict[str, Any]) -> str:
    content = message.get("content", "")
    if isinstance(content, str):
        return content
    # Content blocks ([{"type": "text", "text": ...}]) as multimodal templates produce.
    return "".join(block.get("text", "") for block in content if isinstance(block, dict))


def weighted_total(scores: Sequence[float | None], weights: Sequence[float]) -> float | None:
    """Sum of weight * score over the functions that gave a score; None when none did.

    None (not 0) keeps an unscorable sample out of its group's baseline: TRL turns it into NaN
    and gives it advantage 0.
    """
    present = [w * s for s, w in zip(scores, weights, strict=True) if s is not None]
    return math.fsum(present) if present else None


class RewardDispatcher:
    """Callable in TRL's reward-function shape; scores with whatever config is current."""

    __name__ = REWARD_FUNCTION_NAME  # TRL names the reward by its callable's __name__

    def __init__(self, sandbox: RewardSandbox, config: RewardConfig) -> None:
        self._sandbox = sandbox
        self.config = config
        self.last_generation: ScoredGeneration | None = None

    def apply_config(self, config: RewardConfig) -> None:
        """Score the next batches with ``config``; RewardCodeError if its functions cannot load."""
        self._sandbox.load(config.functions)
        self.config = config

    def load_initial(self) -> None:
        self._sandbox.load(self.config.functions)

    def __call__(
        self,
        prompts: list[Any],
        completions: list[Any],
        completion_ids: list[list[int]],
        **kwargs: Any,
    ) -> list[float | None]:
        config = self.config
        trainer_state = kwargs.get("trainer_state")
        columns = {k: v for k, v in kwargs.items() if k not in _TRL_CONTROL_KWARGS}
        dataset_indices: list[int | None] = list(
            columns.pop(DATASET_INDEX_COLUMN, [None] * len(prompts))
        )
        texts = [completion_text(c) for c in completions]
        examples = [
            {"prompt": prompt, **{name: values[i] for name, values in columns.items()}}
            for i, prompt in enumerate(prompts)
        ]
        # The step being generated: TRL's global_step counts finished optimizer steps.
        step = trainer_state.global_step + 1 if trainer_state is not None else 0
        results = self._sandbox.score(
            ScoringBatch(prompts=list(prompts), completions=texts, examples=examples, step=step)
        )

        names = [spec.name for spec in config.functions]
        weights = [spec.weight for spec in config.functions]
        totals = [
            weighted_total([function_score(results, name, i) for name in names], weights)
            for i in range(len(texts))
        ]
        self.last_generation = ScoredGeneration(
            step=step,
            config_version=config.version,
            weights=dict(zip(names, weights, strict=True)),
            versions={spec.name: spec.version for spec in config.functions},
            prompts=list(prompts),
            completions=texts,
            token_counts=[len(ids) for ids in completion_ids],
            dataset_indices=dataset_indices,
            results=results,
            totals=totals,
        )
        return totals


def function_score(results: dict[str, FunctionResult], name: str, index: int) -> float | None:
    """Function ``name``'s score for sample ``index``; None when it gave none (or did not run)."""
    result = results.get(name)
    if result is None or index >= len(result.scores):
        return None
    return result.scores[index]
