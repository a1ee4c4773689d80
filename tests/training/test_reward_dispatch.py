from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sandbox.api import RewardFunctionSpec, RewardSandbox
from service.jobs.hyperparameters import Hyperparameters
from workers.training.grpo import TrainingSpec
from workers.training.reward_dispatch import (
    DATASET_INDEX_COLUMN,
    RewardDispatcher,
    completion_text,
    trl_weighted_totals,
)
from workers.training.step_records import RewardConfig

from .harness import reward_sandbox

SOURCE = """
def length(prompt, completion, example):
    return float(len(completion))


def picky(prompt, completion, example):
    if completion == "boom":
        raise ValueError("no")
    if completion == "skip":
        return None
    return example["bonus"]
"""


def test_completion_text_of_plain_and_conversational_completions() -> None:
    assert completion_text("abc") == "abc"
    assert completion_text([{"role": "assistant", "content": "abc"}]) == "abc"
    blocks = [{"role": "assistant", "content": [{"type": "text", "text": "x"}]}]
    assert completion_text(blocks) == "x"


@pytest.mark.parametrize(
    ("scores", "weights", "expected"),
    [
        ([1.0, 2.0], [1.0, 0.5], 2.0),
        ([None, 2.0], [1.0, 0.5], 1.0),
        ([None, None], [1.0, 0.5], None),
        ([0.0, None], [1.0, 0.5], 0.0),
    ],
)
def test_trl_weighted_totals(
    scores: list[float | None], weights: list[float], expected: float | None
) -> None:
    assert trl_weighted_totals([scores], weights) == [expected]


def test_totals_use_trls_float32_arithmetic() -> None:
    import torch

    scores = [[0.1234567, 0.7654321], [None, 0.3]]
    weights = [1.0, 0.02]
    table = torch.tensor([[0.1234567, 0.7654321], [float("nan"), 0.3]], dtype=torch.float32)
    expected = (table * torch.tensor(weights).unsqueeze(0)).nansum(dim=1).tolist()
    assert trl_weighted_totals(scores, weights) == expected


def test_dispatcher_scores_in_trl_shape_and_keeps_the_batch() -> None:
    sandbox = reward_sandbox()
    try:
        _check_dispatcher(sandbox)
    finally:
        sandbox.close()


def _check_dispatcher(sandbox: RewardSandbox) -> None:
    config = RewardConfig(
        version=3,
        functions=[
            RewardFunctionSpec("length", SOURCE, weight=0.5, version=2),
            RewardFunctionSpec("picky", SOURCE, weight=2.0, version=5),
        ],
    )
    # Rows as uploaded: only row 7 has `bonus`, and `extra` differs in type between rows (an
    # Arrow dataset would drop one and refuse the other).
    rows: list[dict[str, Any]] = [{"prompt": "hi", "extra": i} for i in range(8)]
    rows[7] = {"prompt": "hi", "bonus": 1.0, "extra": {"nested": ["x"]}}
    dispatcher = RewardDispatcher(sandbox, config, rows)
    dispatcher.load_initial()
    prompt = [{"role": "user", "content": "hi"}]
    completions = [[{"role": "assistant", "content": text}] for text in ("ab", "boom", "skip")]

    totals = dispatcher(
        prompts=[prompt] * 3,
        completions=completions,
        completion_ids=[[1, 2], [3], [4, 5, 6]],
        **{DATASET_INDEX_COLUMN: [7, 7, 7]},
        trainer_state=None,
        log_metric=print,
    )

    # length only where picky raised or gave None; both where both scored.
    assert totals == [0.5 * 2 + 2.0 * 1.0, 0.5 * 4, 0.5 * 4]
    generation = dispatcher.last_generation
    assert generation is not None
    assert generation.config_version == 3
    assert generation.completions == ["ab", "boom", "skip"]
    assert generation.token_counts == [2, 1, 3]
    assert generation.dataset_indices == [7, 7, 7]
    assert generation.versions == {"length": 2, "picky": 5}
    assert generation.results["picky"].scores == [1.0, None, None]
    assert generation.results["picky"].failed_samples == 1


def test_training_spec_rejects_unusable_input(tmp_path: Path) -> None:
    config = RewardConfig(version=1, functions=[RewardFunctionSpec("length", SOURCE)])
    good = {"prompt": "hi"}

    def spec(rows: list[dict[str, Any]], reward_config: RewardConfig = config) -> TrainingSpec:
        return TrainingSpec(
            base_model="rft-tiny",
            dataset=rows,
            reward_config=reward_config,
            hyperparameters=Hyperparameters.model_validate({"prompts_per_step": 2}),
            output_dir=tmp_path,
            model_cache_dir=tmp_path,
        )

    spec([good, good])
    with pytest.raises(ValueError, match="no rows"):
        spec([])
    with pytest.raises(ValueError, match="no 'prompt'"):
        spec([good, {"question": "hi"}])
    with pytest.raises(ValueError, match="fewer than prompts_per_step"):
        spec([good])
    with pytest.raises(ValueError, match="at least one reward function"):
        spec([good, good], RewardConfig(version=1, functions=[]))
