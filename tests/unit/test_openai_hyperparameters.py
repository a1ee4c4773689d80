"""OpenAI's reinforcement hyperparameters as ours (docs/openai-compat.md's table)."""

from __future__ import annotations

import pytest

from service.jobs.hyperparameters import PRESETS, Hyperparameters
from service.openai_compat.fine_tuning.schemas import ReinforcementHyperparameters
from service.openai_compat.fine_tuning.service import InvalidJobRequest, our_hyperparameters


def test_the_tiny_model_gets_its_preset_and_auto_keeps_ours() -> None:
    ours = our_hyperparameters(
        ReinforcementHyperparameters(n_epochs="auto", batch_size="auto"),
        model="rft-tiny",
        seed=None,
        rows=10,
    )
    for name, value in PRESETS["tiny-cpu"].items():
        assert getattr(ours, name) == value, name
    assert ours.train_steps == Hyperparameters().train_steps
    other = our_hyperparameters(ReinforcementHyperparameters(), model="org/m", seed=3, rows=10)
    assert other.preset is None and other.learning_rate == Hyperparameters().learning_rate
    assert other.seed == 3


def test_each_mapping() -> None:
    ours = our_hyperparameters(
        ReinforcementHyperparameters(
            n_epochs=3,
            batch_size=4,
            learning_rate_multiplier=0.5,
            compute_multiplier=1.5,
            eval_interval=5,
            eval_samples=2,
        ),
        model="rft-tiny",
        seed=9,
        rows=10,
    )
    assert ours.prompts_per_step == 4
    assert ours.train_steps == 8  # ceil(3 epochs x 10 rows / 4 a step)
    assert ours.learning_rate == pytest.approx(PRESETS["tiny-cpu"]["learning_rate"] * 0.5)
    assert ours.num_generations == 12  # 1.5 x the preset's 8
    assert (ours.eval_every, ours.eval_samples, ours.seed) == (5, 2, 9)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"n_epochs": 0}, "n_epochs"),
        ({"batch_size": 0}, "prompts_per_step"),
        ({"compute_multiplier": 1e300}, "compute_multiplier"),
        ({"learning_rate_multiplier": 1e9}, "learning_rate"),
        ({"eval_interval": -1}, "eval_every"),
    ],
)
def test_out_of_range_values_are_400s_naming_the_field(
    given: dict[str, float], message: str
) -> None:
    with pytest.raises(InvalidJobRequest, match=message):
        our_hyperparameters(
            ReinforcementHyperparameters.model_validate(given), model="rft-tiny", seed=None, rows=4
        )
