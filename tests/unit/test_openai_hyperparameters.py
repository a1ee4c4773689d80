"""OpenAI's reinforcement and supervised hyperparameters as ours (docs/openai-compat.md's
tables)."""

from __future__ import annotations

import pytest

from service.jobs.hyperparameters import PRESETS, SFT_DEFAULTS, SFT_LEARNING_RATE, Hyperparameters
from service.models import Job
from service.openai_compat.fine_tuning.schemas import (
    ReinforcementHyperparameters,
    SupervisedHyperparameters,
)
from service.openai_compat.fine_tuning.service import (
    InvalidJobRequest,
    our_hyperparameters,
    our_supervised_hyperparameters,
    their_supervised_hyperparameters,
)


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
        ({"batch_size": 0, "n_epochs": 1}, "prompts_per_step"),
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


def test_supervised_hyperparameters_map_onto_sft_and_back() -> None:
    ours = our_supervised_hyperparameters(
        SupervisedHyperparameters(n_epochs=3, batch_size=4, learning_rate_multiplier=0.5),
        model="org/m",
        seed=2,
        rows=10,
    )
    assert ours.batch_size == 4
    assert ours.train_steps == 8  # ceil(3 epochs x 10 rows / 4 a step)
    assert ours.learning_rate == pytest.approx(SFT_LEARNING_RATE * 0.5)
    assert ours.seed == 2
    job = Job(
        method="sft",
        base_model="org/m",
        hyperparameters=ours.with_sft_defaults().model_dump(mode="json"),
    )
    assert their_supervised_hyperparameters(job, 10) == SupervisedHyperparameters(
        n_epochs=3, batch_size=4, learning_rate_multiplier=0.5
    )
    # The tiny model keeps its preset's learning rate; "auto" keeps SFT's batch.
    tiny = our_supervised_hyperparameters(
        SupervisedHyperparameters(batch_size="auto"), model="rft-tiny", seed=None, rows=10
    )
    assert tiny.learning_rate == PRESETS["tiny-cpu"]["learning_rate"]
    assert tiny.with_sft_defaults().batch_size == SFT_DEFAULTS["batch_size"]
    with pytest.raises(InvalidJobRequest, match="batch_size"):
        our_supervised_hyperparameters(
            SupervisedHyperparameters(batch_size=0), model="org/m", seed=None, rows=10
        )


def test_rft_s_own_hyperparameters_ride_beside_openai_s() -> None:
    """What OpenAI has no name for (temperature, completion length, the schedule) is given by
    rft's name in the same object, and both built-in tiny models get the tiny preset."""
    ours = our_hyperparameters(
        ReinforcementHyperparameters.model_validate(
            {"batch_size": 4, "temperature": 0.7, "max_completion_length": 64}
        ),
        model="rft-tiny-tools",
        seed=None,
        rows=8,
    )
    assert (ours.preset, ours.prompts_per_step) == ("tiny-cpu", 4)
    assert (ours.temperature, ours.max_completion_length) == (0.7, 64)
    # Ours for a setting OpenAI's names leave "auto": n_epochs then counts our steps' prompts.
    by_ours = our_hyperparameters(
        ReinforcementHyperparameters.model_validate({"n_epochs": 2, "prompts_per_step": 4}),
        model="rft-tiny",
        seed=None,
        rows=8,
    )
    assert (by_ours.prompts_per_step, by_ours.train_steps) == (4, 4)
    sft = our_supervised_hyperparameters(
        SupervisedHyperparameters.model_validate(
            {
                "learning_rate": 4e-3,
                "lr_scheduler_type": "constant_with_warmup",
                "warmup_ratio": 0.1,
            }
        ),
        model="rft-tiny-tools",
        seed=None,
        rows=8,
    )
    assert (sft.learning_rate, sft.warmup_ratio) == (4e-3, 0.1)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"temprature": 0.7}, "temprature is not a hyperparameter"),
        ({"batch_size": 4, "prompts_per_step": 4}, r"batch_size \(OpenAI's\) and prompts_per_step"),
        ({"temperature": -1}, "temperature"),
        ({"warmup_ratio": 0.1}, "^hyperparameters: .*lr_scheduler_type 'constant' has no warmup"),
    ],
)
def test_a_misspelt_doubled_or_invalid_rft_name_is_a_400_naming_it(
    given: dict[str, float], message: str
) -> None:
    with pytest.raises(InvalidJobRequest, match=message):
        our_hyperparameters(
            ReinforcementHyperparameters.model_validate(given), model="rft-tiny", seed=None, rows=4
        )
    with pytest.raises(InvalidJobRequest, match=r"learning_rate_multiplier \(OpenAI's\)"):
        our_supervised_hyperparameters(
            SupervisedHyperparameters.model_validate(
                {"learning_rate": 1e-3, "learning_rate_multiplier": 2.0}
            ),
            model="org/m",
            seed=None,
            rows=4,
        )
