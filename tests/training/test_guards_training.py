"""A real GRPO run on the tiny model games a reward that pays for length, and the length guard
catches it within a few steps (the demo job, which games nothing, trips none:
test_run_grpo.py). No API, no database: the rules read the run's step records.

The random tiny model writes to max_completion_length from its first step, so there is no
drift to see; a short supervised warm-up first teaches it to answer in one word, as a real
instruction-tuned model answers briefly. GRPO then learns within a few steps that longer is
paid."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sandbox.api import RewardFunctionSpec, RewardSandbox
from service.jobs.guard_settings import GuardSettings
from service.jobs.hyperparameters import Hyperparameters
from tests.tiny import TINY_HYPERPARAMETERS
from workers.guards import guard_trips
from workers.training.grpo import run_grpo
from workers.training.spec import TrainingSpec
from workers.training.step_records import RewardConfig

from .harness import WORDS, RecordingObserver, one_word_answers

PAYS_FOR_LENGTH = "def length(prompt, completion, example):\n    return len(completion) / 64\n"
# Measured (seed 0): the mean length goes from 4-10 tokens in the first 3 steps to the limit
# (16) from step 8 on, so the guard (3 steps in a row at its defaults) trips at step 10.
GRPO_STEPS = 12


def test_a_reward_that_pays_for_length_trips_the_length_guard(
    tmp_path: Path, model_cache_dir: Path, make_sandbox: Callable[[], RewardSandbox]
) -> None:
    spec = TrainingSpec(
        base_model="rft-tiny",
        dataset=[{"prompt": f"Say {w}:"} for w in WORDS],
        reward_config=RewardConfig(
            version=1, functions=[RewardFunctionSpec("length", PAYS_FOR_LENGTH, 1.0, 1)]
        ),
        hyperparameters=Hyperparameters.model_validate(
            {**TINY_HYPERPARAMETERS, "train_steps": GRPO_STEPS, "seed": 0, "learning_rate": 5e-3}
        ),
        output_dir=tmp_path / "grpo",
        model_cache_dir=model_cache_dir,
        init_adapter=one_word_answers(tmp_path / "sft", model_cache_dir),
    )
    observer = RecordingObserver()
    run_grpo(spec, make_sandbox(), observer)

    limit = spec.hyperparameters.max_completion_length
    trips = guard_trips(observer.records, GuardSettings(), max_completion_length=limit)
    length = [t for t in trips if t.kind == "length_drift"]
    assert length, [(r.step, [c.token_count for c in r.completions]) for r in observer.records]
    trip = length[0]
    assert trip.step <= GRPO_STEPS
    assert trip.numbers["length_mean"] >= 0.9 * limit
    assert trip.numbers["early_length_mean"] <= trip.numbers["length_mean"] - 0.2 * limit
    assert 2 <= len(trip.examples) <= 3
    assert all(example["token_count"] == limit for example in trip.examples)
