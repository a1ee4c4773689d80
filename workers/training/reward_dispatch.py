"""The one reward function TRL sees: it scores each generation batch in the sandbox.

TRL gets a single callable so that the set of user functions can change between steps without
touching the trainer (TRL fixes its reward function list, names and weights at init).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from sandbox.api import FunctionResult, RewardSandbox, ScoringBatch
from workers.training.step_records import RewardConfig

REWARD_FUNCTION_NAME = "rft_reward"
# Added to every dataset row so a completion can be traced back to its row; never shown to users.
DATASET_INDEX_COLUMN = "__rft_dataset_index__"


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
    dataset_indices: list[int]
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


def trl_weighted_totals(
    scores: Sequence[Sequence[float | None]], weights: Sequence[float]
) -> list[float | None]:
    """Totals computed exactly as TRL weighs several reward functions: a float32 nansum of
    weight * score, with rows no function scored left as None (TRL: NaN, advantage 0).

    Doing the same float32 arithmetic keeps a service run identical, step for step, to a plain
    TRL script given the same functions and reward_weights; a float64 sum flips a sampled
    token within a few dozen steps.

    ``scores[i][f]`` is function f's score for sample i.
    """
    if not scores:
        return []
    table = torch.tensor(
        [[math.nan if s is None else s for s in row] for row in scores], dtype=torch.float32
    )
    weighted = table * torch.tensor(list(weights), dtype=torch.float32).unsqueeze(0)
    totals = weighted.nansum(dim=1).tolist()
    unscorable = torch.isnan(table).all(dim=1).tolist()
    return [None if empty else total for total, empty in zip(totals, unscorable, strict=True)]


class RewardDispatcher:
    """Callable in TRL's reward-function shape; scores with whatever config is current."""

    __name__ = REWARD_FUNCTION_NAME  # TRL names the reward by its callable's __name__

    def __init__(
        self,
        sandbox: RewardSandbox,
        config: RewardConfig,
        rows: Sequence[dict[str, Any]],
    ) -> None:
        self._sandbox = sandbox
        self.config = config
        # The dataset's rows as uploaded. With them, each sample's `example` is its own row,
        # found by the index column: an Arrow dataset would give every row the first row's
        # columns, pad dicts with None keys and refuse a column of mixed types.
        self._rows = rows
        self.last_generation: ScoredGeneration | None = None

    def apply_config(self, config: RewardConfig) -> None:
        """Score the next batches with ``config``; RewardCodeError if its functions cannot load."""
        self._sandbox.load(config.functions)
        self.config = config

    @property
    def sandbox(self) -> RewardSandbox:
        return self._sandbox

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
        if DATASET_INDEX_COLUMN not in kwargs:
            raise ValueError(f"the training dataset has no {DATASET_INDEX_COLUMN} column")
        dataset_indices: list[int] = [int(index) for index in kwargs[DATASET_INDEX_COLUMN]]
        texts = [completion_text(c) for c in completions]
        examples = [self._rows[index] for index in dataset_indices]  # read-only: serialised
        # The step being generated: TRL's global_step counts finished optimizer steps.
        step = trainer_state.global_step + 1 if trainer_state is not None else 0
        results = self._sandbox.score(
            ScoringBatch(prompts=list(prompts), completions=texts, examples=examples, step=step)
        )

        names = [spec.name for spec in config.functions]
        weights = [spec.weight for spec in config.functions]
        totals = trl_weighted_totals(
            [[function_score(results, name, i) for name in names] for i in range(len(texts))],
            weights,
        )
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


def score_samples(
    sandbox: RewardSandbox,
    config: RewardConfig,
    *,
    prompts: list[Any],
    completions: list[str],
    examples: list[dict[str, Any]],
    step: int,
) -> tuple[dict[str, FunctionResult], list[float | None]]:
    """Score samples outside training (validation) with ``config``: each function's results,
    and the weighted totals as training computes them."""
    results = sandbox.score(
        ScoringBatch(prompts=prompts, completions=completions, examples=examples, step=step)
    )
    names = [spec.name for spec in config.functions]
    totals = trl_weighted_totals(
        [[function_score(results, name, i) for name in names] for i in range(len(completions))],
        [spec.weight for spec in config.functions],
    )
    return results, totals


def function_score(results: dict[str, FunctionResult], name: str, index: int) -> float | None:
    """Function ``name``'s score for sample ``index``; None when it gave none (or did not run)."""
    result = results.get(name)
    if result is None or index >= len(result.scores):
        return None
    return result.scores[index]
