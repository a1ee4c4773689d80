"""Reward models on the worker: the built-in tiny one, and scores equal to TRL's own."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from sandbox.api import RewardCodeError, RewardFunctionSpec, RewardSandbox
from service.base_models.built_in.model_building import directory_digest
from service.base_models.built_in.tiny_model import ensure_tiny_model
from service.base_models.built_in.tiny_reward_model import (
    TINY_REWARD_MODEL_NAME,
    ensure_tiny_reward_model,
    resolve_reward_model,
)
from workers.training.reward_dispatch import DATASET_INDEX_COLUMN, RewardDispatcher
from workers.training.reward_models import RewardModelScorer
from workers.training.step_records import RewardConfig, RewardModelSpec

PLAIN_PROMPTS = ["Write a word about banana:", "Say something about a cat:"] * 3
CHAT_PROMPTS = [[{"role": "user", "content": prompt}] for prompt in PLAIN_PROMPTS]
TEXTS = ["banana papaya", "the dog is not", "", "aaaa aa", "one two three", "lava salsa java"]
CHAT_COMPLETIONS = [[{"role": "assistant", "content": text}] for text in TEXTS]


@pytest.fixture(scope="module")
def scorer(tmp_path_factory: pytest.TempPathFactory) -> RewardModelScorer:
    scorer = RewardModelScorer(tmp_path_factory.mktemp("models"), torch.device("cpu"))
    scorer.load([RewardModelSpec("letters", TINY_REWARD_MODEL_NAME, batch_size=64)])
    return scorer


def scores_of(scorer: RewardModelScorer, prompts: list[Any], completions: list[Any]) -> list[Any]:
    return scorer.score(prompts, completions)["letters"].scores


def test_the_tiny_reward_model_is_built_offline_and_prefers_the_letter_a(
    tmp_path: Path, scorer: RewardModelScorer
) -> None:
    first = ensure_tiny_reward_model(tmp_path / "one")
    assert directory_digest(first) == directory_digest(ensure_tiny_reward_model(tmp_path / "two"))
    assert resolve_reward_model(TINY_REWARD_MODEL_NAME, tmp_path / "one") == str(first)
    assert resolve_reward_model("org/reward", tmp_path) == "org/reward"

    # About the mean number of "a"s per token of prompt and completion: a completion with
    # more a's per token than its prompt raises the score, one with fewer lowers it.
    banana, dog, empty, a_run, numbers, lava = scores_of(scorer, ["Say a:"] * len(TEXTS), TEXTS)
    assert banana > empty and a_run > empty and lava > empty
    assert dog < empty and numbers < empty
    assert banana == pytest.approx(1.13, abs=0.01) and dog == pytest.approx(0.2, abs=0.01)
    chat_prompt = [{"role": "user", "content": "Say a:"}]
    chat = scores_of(scorer, [chat_prompt] * len(TEXTS), CHAT_COMPLETIONS)
    assert chat[0] > chat[2] > chat[1]


def trl_reward_model_scores(
    reward_model: Path, policy: Path, output_dir: Path, prompts: list[Any], completions: list[Any]
) -> list[float]:
    """TRL's own scores: a GRPOTrainer given the reward model's path loads it itself and scores
    in ``GRPOTrainer._calculate_rewards`` (trl/trainer/grpo_trainer.py: the chat template over
    prompt + completion via trl.data_utils.apply_chat_template, else prompt + completion;
    padding right, no special tokens, ``logits[:, 0]``)."""
    trainer = GRPOTrainer(
        model=str(policy),
        reward_funcs=[str(reward_model)],
        args=GRPOConfig(
            output_dir=str(output_dir),
            use_cpu=True,
            bf16=False,
            per_device_train_batch_size=2,
            num_generations=2,
            report_to="none",
            activation_checkpointing=False,
        ),
        train_dataset=Dataset.from_dict({"prompt": ["hi", "ho"]}),
    )
    inputs = [{"prompt": prompt} for prompt in prompts]
    rewards = trainer._calculate_rewards(inputs, prompts, completions, [[1]] * len(prompts))
    return [float(value) for value in rewards[:, 0].tolist()]


@pytest.mark.parametrize(
    ("prompts", "completions"),
    [(PLAIN_PROMPTS, TEXTS), (CHAT_PROMPTS, CHAT_COMPLETIONS)],
    ids=["text", "conversational"],
)
def test_scores_equal_trls_reward_model_scores(
    tmp_path: Path,
    model_cache_dir: Path,
    scorer: RewardModelScorer,
    prompts: list[Any],
    completions: list[Any],
) -> None:
    expected = trl_reward_model_scores(
        ensure_tiny_reward_model(model_cache_dir),
        ensure_tiny_model(model_cache_dir),
        tmp_path,
        prompts,
        completions,
    )
    # One batch, as TRL scores it: the very same numbers.
    assert scores_of(scorer, prompts, completions) == expected
    # In batches of 4 (two forward passes): the same up to padding's rounding.
    scorer.load([RewardModelSpec("letters", TINY_REWARD_MODEL_NAME, batch_size=4)])
    try:
        assert scores_of(scorer, prompts, completions) == pytest.approx(expected, abs=1e-5)
    finally:
        scorer.load([RewardModelSpec("letters", TINY_REWARD_MODEL_NAME, batch_size=64)])


def test_the_dispatcher_scores_reward_models_beside_functions(
    model_cache_dir: Path, make_sandbox: Callable[[], RewardSandbox]
) -> None:
    length = RewardFunctionSpec(
        "length", "def length(prompt, completion, example):\n    return len(completion)\n"
    )
    letters = RewardModelSpec("letters", TINY_REWARD_MODEL_NAME, weight=2.0, version=3)
    models = RewardModelScorer(model_cache_dir, torch.device("cpu"))
    rows = [{"prompt": prompt} for prompt in CHAT_PROMPTS]
    dispatcher = RewardDispatcher(
        make_sandbox(),
        RewardConfig(version=1, functions=[length], reward_models=[letters]),
        rows,
        reward_models=models,
    )
    dispatcher.load_initial()
    loaded = models._loaded[TINY_REWARD_MODEL_NAME]

    totals = dispatcher(
        prompts=CHAT_PROMPTS,
        completions=CHAT_COMPLETIONS,
        completion_ids=[[1]] * len(TEXTS),
        **{DATASET_INDEX_COLUMN: list(range(len(TEXTS)))},
        trainer_state=None,
    )

    generation = dispatcher.last_generation
    assert generation is not None
    assert generation.versions == {"length": 1, "letters": 3}
    assert generation.weights == {"length": 1.0, "letters": 2.0}
    scores = generation.results["letters"].scores
    assert all(isinstance(score, float) for score in scores)
    assert totals == pytest.approx(
        [len(text) + 2.0 * score for text, score in zip(TEXTS, scores, strict=True)]
    )

    # A new weight and version of the same model reuses the loaded model; a model that
    # cannot load is refused, naming the entry, and the config in force stays.
    dispatcher.apply_config(
        RewardConfig(
            version=2,
            functions=[],
            reward_models=[
                RewardModelSpec("letters", TINY_REWARD_MODEL_NAME, weight=0.5, version=4)
            ],
        )
    )
    assert models._loaded[TINY_REWARD_MODEL_NAME] is loaded
    assert dispatcher.reward_sources() == [("letters", 0.5, 4)]
    missing = RewardModelSpec("judge", str(model_cache_dir / "no-such-model"))
    with pytest.raises(RewardCodeError, match=r"'judge'.*could not be loaded"):
        dispatcher.apply_config(RewardConfig(version=3, functions=[], reward_models=[missing]))
    assert dispatcher.config.version == 2
    assert dispatcher.reward_sources() == [("letters", 0.5, 4)]
