"""The one reward function TRL sees: it scores each generation batch in the sandbox.

TRL gets a single callable so that the set of user functions can change between steps without
touching the trainer (TRL fixes its reward function list, names and weights at init).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from sandbox.api import FunctionResult, RewardCodeError, RewardSandbox, ScoringBatch
from workers.training.agents.session import AgentSession
from workers.training.agents.trajectories import final_answer
from workers.training.reward_models import RewardModelScorer
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
    # Agent jobs: each rollout turn by turn (workers.training.agents.trajectories.build_trajectory).
    trajectories: list[list[dict[str, Any]]] | None = None


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
        agents: AgentSession | None = None,
        reward_models: RewardModelScorer | None = None,
    ) -> None:
        self._sandbox = sandbox
        self.config = config
        # Entries that name a reward model: scored on this rank's device, not in the sandbox.
        self.reward_models = reward_models
        # Agent jobs: the tools and environments, whose get_reward scores beside the functions.
        self.agents = agents
        # The dataset's rows as uploaded. With them, each sample's `example` is its own row,
        # found by the index column: an Arrow dataset would give every row the first row's
        # columns, pad dicts with None keys and refuse a column of mixed types.
        self._rows = rows
        self.last_generation: ScoredGeneration | None = None

    def apply_config(self, config: RewardConfig) -> None:
        """Score the next batches with ``config``; RewardCodeError if its functions or reward
        models cannot load, AgentCodeError if its tools or environments cannot (the config in
        force then stays)."""
        agents = self.agents
        # New secrets restart the agent sandbox too (the observer staged them on both), so
        # its tools and environments see them from the same step as the reward functions.
        agent_code_changes = agents is not None and (
            config.tools != self.config.tools
            or config.environments != self.config.environments
            or config.secrets != self.config.secrets
        )
        if agents is not None and agent_code_changes:
            agents.load(config.tools, config.environments)
        functions_loaded = False
        try:
            self._sandbox.load(config.functions)
            functions_loaded = True
            self._load_reward_models(config)
        except BaseException:
            # Back to the config in force, its secrets too: a sandbox that restarted for the
            # new ones restarts again with the old.
            for sandbox in (self._sandbox, agents.sandbox if agents is not None else None):
                stage = getattr(sandbox, "stage_environment", None)
                if stage is not None:
                    stage(self.config.secrets)
            if agents is not None and agent_code_changes:
                agents.load(self.config.tools, self.config.environments)
            if functions_loaded:
                self._sandbox.load(self.config.functions)
            raise
        self.config = config

    def _load_reward_models(self, config: RewardConfig) -> None:
        if config.reward_models and self.reward_models is None:
            raise RewardCodeError(
                config.reward_models[0].name, "this run was started without reward-model scoring"
            )
        if self.reward_models is not None:
            self.reward_models.load(config.reward_models)

    @contextlib.contextmanager
    def scoring_rows(self, rows: Sequence[dict[str, Any]]) -> Iterator[None]:
        """Within the block, the dataset index of a sample points into ``rows`` (an
        evaluation's validation rows), for the reward functions' examples and the
        environments' resets alike."""
        saved = self._rows
        self._rows = rows
        if self.agents is not None:
            self.agents.rows = rows
        try:
            yield
        finally:
            self._rows = saved
            if self.agents is not None:
                self.agents.rows = saved

    @property
    def sandbox(self) -> RewardSandbox:
        return self._sandbox

    def load_initial(self) -> None:
        if self.agents is not None:
            self.agents.load(self.config.tools, self.config.environments)
        self._sandbox.load(self.config.functions)
        self._load_reward_models(self.config)

    def reward_sources(self) -> list[tuple[str, float, int]]:
        """(name, weight, version) of everything that scores: the reward functions, the
        reward models, then the environments whose get_reward owns (part of) the reward."""
        config = self.config
        sources = [(spec.name, spec.weight, spec.version) for spec in config.functions]
        sources += [(spec.name, spec.weight, spec.version) for spec in config.reward_models]
        if self.agents is not None:
            sources += [
                (spec.name, spec.weight, spec.version) for spec in self.agents.rewarded_environments
            ]
        return sources

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
        trajectories = self.agents.last_trajectories if self.agents is not None else None
        if trajectories is not None and len(trajectories) == len(completions):
            # A rollout is scored on its final answer; the whole conversation is its record.
            texts = [final_answer(trajectory) for trajectory in trajectories]
        else:
            trajectories = None
            texts = [completion_text(c) for c in completions]
        examples = [self._rows[index] for index in dataset_indices]  # read-only: serialised
        # The step being generated: TRL's global_step counts finished optimizer steps.
        step = trainer_state.global_step + 1 if trainer_state is not None else 0
        results = self._sandbox.score(
            ScoringBatch(
                prompts=list(prompts),
                completions=texts,
                examples=examples,
                step=step,
                trajectories=trajectories,
            )
        )
        if self.reward_models is not None:
            # TRL's own prompts and completions: a reward model reads them as TRL renders them.
            results.update(self.reward_models.score(prompts, completions))
        if self.agents is not None:
            results.update(self.agents.environment_rewards(kwargs.get("environments"), len(texts)))

        sources = self.reward_sources()
        names = [name for name, _, _ in sources]
        weights = [weight for _, weight, _ in sources]
        totals = trl_weighted_totals(
            [[function_score(results, name, i) for name in names] for i in range(len(texts))],
            weights,
        )
        self.last_generation = ScoredGeneration(
            step=step,
            config_version=config.version,
            weights=dict(zip(names, weights, strict=True)),
            versions={name: version for name, _, version in sources},
            prompts=list(prompts),
            completions=texts,
            token_counts=[len(ids) for ids in completion_ids],
            dataset_indices=dataset_indices,
            results=results,
            totals=totals,
            trajectories=trajectories,
        )
        return totals


def score_samples(
    dispatcher: RewardDispatcher,
    *,
    prompts: list[Any],
    completions: list[str],
    examples: list[dict[str, Any]],
    step: int,
) -> tuple[dict[str, FunctionResult], list[float | None]]:
    """Score samples outside training (validation) with the dispatcher's config: each
    function's and reward model's results, and the weighted totals as training computes them."""
    results = dispatcher.sandbox.score(
        ScoringBatch(prompts=prompts, completions=completions, examples=examples, step=step)
    )
    if dispatcher.reward_models is not None:
        results.update(dispatcher.reward_models.score(prompts, completions))
    sources = dispatcher.reward_sources()
    totals = trl_weighted_totals(
        [
            [function_score(results, name, i) for name, _, _ in sources]
            for i in range(len(completions))
        ],
        [weight for _, weight, _ in sources],
    )
    return results, totals


def function_score(results: dict[str, FunctionResult], name: str, index: int) -> float | None:
    """Function ``name``'s score for sample ``index``; None when it gave none (or did not run)."""
    result = results.get(name)
    if result is None or index >= len(result.scores):
        return None
    return result.scores[index]
