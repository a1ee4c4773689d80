"""Validation inside a real GRPO run: the adapter generates for held-out prompts at the eval
steps, the job's reward functions score them, and training goes exactly as it would without."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sandbox.api import RewardFunctionSpec, RewardSandbox
from service.demo import demo_dataset, demo_rewards_source
from workers.training.grpo import TrainingSpec, run_grpo
from workers.training.step_records import RewardConfig

from .harness import RecordingObserver

SpecFactory = Callable[..., TrainingSpec]
SandboxFactory = Callable[[], RewardSandbox]

ROW_VALUE = "def row_value(prompt, completion, example):\n    return float(example['value'])\n"


def config() -> RewardConfig:
    return RewardConfig(
        version=1,
        functions=[
            RewardFunctionSpec("letter_fraction", demo_rewards_source(), weight=1.0, version=1),
            # Weight 0: it shows which row each sample was scored with, without moving totals.
            RewardFunctionSpec("row_value", ROW_VALUE, weight=0.0, version=1),
        ],
    )


def test_validation_runs_at_its_steps_and_leaves_training_unchanged(
    make_spec: SpecFactory, make_sandbox: SandboxFactory
) -> None:
    training_rows = [{**row, "value": 0} for row in demo_dataset()[:8]]
    validation_rows = [
        {"prompt": "Write about apples:", "value": 1, "target_letter": "a"},
        {
            "prompt": [{"role": "user", "content": "Name a fruit:"}],
            "value": 2,
            "target_letter": "e",
        },
        {"prompt": "Count to three:", "value": 3, "target_letter": "o"},
        {"prompt": "Not evaluated (past eval_max_prompts):", "value": 100, "target_letter": "a"},
    ]
    settings = {
        "train_steps": 3,
        "eval_every": 2,
        # Sampled, to show that its draws leave training's random numbers alone.
        "eval_temperature": 0.7,
        "eval_samples": 2,
        "eval_max_prompts": 3,
        "checkpoint_every": 10,
    }

    plain = RecordingObserver()
    run_grpo(
        make_spec(reward_config=config(), dataset=training_rows, **settings), make_sandbox(), plain
    )
    spec = make_spec(reward_config=config(), dataset=training_rows, **settings)
    spec.validation = validation_rows
    observer = RecordingObserver()
    outcome = run_grpo(spec, make_sandbox(), observer)
    assert outcome.steps_completed == 3

    # Every eval_every steps and after the last; the step records carry them.
    evaluated = {r.step: r.evaluation for r in observer.records if r.evaluation is not None}
    assert sorted(evaluated) == [2, 3]
    assert all(r.evaluation is None for r in plain.records)
    for step, evaluation in evaluated.items():
        assert evaluation is not None
        assert evaluation.step == step and evaluation.config_version == 1
        assert (evaluation.prompts, evaluation.samples) == (3, 6)
        # Each sample was scored with its own validation row (values 1, 2, 3, twice each).
        row_value = evaluation.functions["row_value"]
        assert row_value.mean == pytest.approx(2.0) and row_value.scored == 6
        letters = evaluation.functions["letter_fraction"]
        assert letters.scored == 6 and letters.errors == 0
        assert letters.mean is not None and 0.0 <= letters.mean <= 1.0
        # The total weighs the functions as training does (row_value has weight 0).
        assert evaluation.reward_mean == pytest.approx(letters.mean, abs=1e-6)

    # Every evaluated step is checkpointed, so the best one can be downloaded.
    assert [step for step, _ in observer.checkpoints] == [2, 3]
    # Validation changes nothing in training: same seed, same rewards and losses.
    assert [r.reward_mean for r in observer.records] == [r.reward_mean for r in plain.records]
    assert [r.loss for r in observer.records] == [r.loss for r in plain.records]


def test_validation_rows_need_a_prompt(make_spec: SpecFactory) -> None:
    spec = make_spec(train_steps=1)
    with pytest.raises(ValueError, match="validation: every row needs a 'prompt'"):
        TrainingSpec(
            base_model=spec.base_model,
            dataset=spec.dataset,
            reward_config=spec.reward_config,
            hyperparameters=spec.hyperparameters,
            output_dir=spec.output_dir,
            model_cache_dir=spec.model_cache_dir,
            validation=[{"question": "no prompt"}],
        )
