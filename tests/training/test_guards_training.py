"""Real GRPO runs on the tiny model game a reward written to be gamed, and the right guard
catches it within a few steps: a reward that pays for length trips length_drift, one that a
repeated word satisfies trips repetition (the demo job, which games nothing, trips none:
test_run_grpo.py). No API, no database: the rules read the run's step records.

The random tiny model writes to max_completion_length from its first step, so there is no
drift to see; a short supervised warm-up first teaches it to answer in one word, as a real
instruction-tuned model answers briefly. GRPO then learns within a few steps what is paid."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sandbox.api import RewardFunctionSpec, RewardSandbox
from service.jobs.guard_settings import GuardSettings
from service.jobs.hyperparameters import Hyperparameters
from tests.tiny import TINY_HYPERPARAMETERS
from workers.guards import guard_trips, repeated_ngram_share
from workers.training.grpo import run_grpo
from workers.training.spec import TrainingSpec
from workers.training.step_records import RewardConfig, StepRecord

from .harness import WORDS, RecordingObserver, one_word_answers

PAYS_FOR_LENGTH = "def length(prompt, completion, example):\n    return len(completion) / 64\n"
# Measured (seed 0): the mean length goes from 4-10 tokens in the first 3 steps to the limit
# (16) from step 8 on, so the guard (3 steps in a row at its defaults) trips at step 10.
GRPO_STEPS = 12
# Pays for the most frequent word, however often it comes: one word said over and over wins.
PAYS_FOR_A_REPEATED_WORD = (
    "def repeated(prompt, completion, example):\n"
    "    words = completion.split()\n"
    "    return max([words.count(word) for word in words] or [0]) / 4\n"
)
# Measured (seed 0, lr 1e-2, an Intel host): the reward goes from 0.25 to above 1 by step 12;
# the completions become ' s s s s s s s s s s s s s s suestion s'. Repeated single words
# (repetition_ngram 1) reach a step mean of 0.35-0.5 from step 12, and the guard at 0.3 trips at
# step 14. Whole word 3-grams stay under 0.15 (the defaults do not trip in 30 steps): stray bytes
# glued to words ('s\x0e', 'sG') break them, and short answers (fewer than two 3-grams) count as 0.
REPEATED_WORD_STEPS = 18
# Which learning rate finds the repeated word within those steps depends on the CPU's float
# kernels: from step 5 the runs part ways. On an AMD EPYC host, lr 1e-2 and 2e-2 stay under a
# 0.1 share for all 18 steps, while 5e-3 reaches ' cat cat cat ...' (share 0.25 at step 11, 0.64
# at 14, reward 0.25 -> 2.4) and the guard trips at step 14. The test tries both rates in turn;
# one of them must end in a trip.
REPEATED_WORD_RATES = (5e-3, 1e-2)
WORD_REPETITION = GuardSettings(repetition_ngram=1, repetition_share=0.3)


def gamed_run(
    tmp_path: Path,
    model_cache_dir: Path,
    sandbox: RewardSandbox,
    name: str,
    source: str,
    *,
    steps: int,
    learning_rate: float,
) -> list[StepRecord]:
    spec = TrainingSpec(
        base_model="rft-tiny",
        dataset=[{"prompt": f"Say {w}:"} for w in WORDS],
        reward_config=RewardConfig(version=1, functions=[RewardFunctionSpec(name, source, 1.0, 1)]),
        hyperparameters=Hyperparameters.model_validate(
            {**TINY_HYPERPARAMETERS, "train_steps": steps, "seed": 0}
            | {"learning_rate": learning_rate}
        ),
        output_dir=tmp_path / "grpo",
        model_cache_dir=model_cache_dir,
        init_adapter=one_word_answers(tmp_path / "sft", model_cache_dir),
    )
    observer = RecordingObserver()
    run_grpo(spec, sandbox, observer)
    return observer.records


def test_a_reward_that_pays_for_length_trips_the_length_guard(
    tmp_path: Path, model_cache_dir: Path, make_sandbox: Callable[[], RewardSandbox]
) -> None:
    records = gamed_run(
        tmp_path, model_cache_dir, make_sandbox(), "length", PAYS_FOR_LENGTH,
        steps=GRPO_STEPS, learning_rate=5e-3,
    )  # fmt: skip

    limit = TINY_HYPERPARAMETERS["max_completion_length"]
    trips = guard_trips(records, GuardSettings(), max_completion_length=limit)
    length = [t for t in trips if t.kind == "length_drift"]
    assert length, [(r.step, [c.token_count for c in r.completions]) for r in records]
    trip = length[0]
    assert trip.step <= GRPO_STEPS
    assert trip.numbers["length_mean"] >= 0.9 * limit
    assert trip.numbers["early_length_mean"] <= trip.numbers["length_mean"] - 0.2 * limit
    assert 2 <= len(trip.examples) <= 3
    assert all(example["token_count"] == limit for example in trip.examples)
    # The right guard: the padded answers are not repetitive, and the repetition guard, over
    # the same recorded completions, stays quiet.
    assert "repetition" not in {t.kind for t in trips}, trips


def test_a_reward_a_repeated_word_satisfies_trips_the_repetition_guard(
    tmp_path: Path, model_cache_dir: Path, make_sandbox: Callable[[], RewardSandbox]
) -> None:
    def share(record: StepRecord) -> float:
        shares = [repeated_ngram_share(c.completion, 1) or 0.0 for c in record.completions]
        return sum(shares) / len(shares)

    limit = TINY_HYPERPARAMETERS["max_completion_length"]
    tried: dict[float, list[float]] = {}
    for learning_rate in REPEATED_WORD_RATES:
        run_dir = tmp_path / f"lr-{learning_rate}"
        run_dir.mkdir()
        records = gamed_run(
            run_dir, model_cache_dir, make_sandbox(), "repeated", PAYS_FOR_A_REPEATED_WORD,
            steps=REPEATED_WORD_STEPS, learning_rate=learning_rate,
        )  # fmt: skip
        shares = tried[learning_rate] = [round(share(record), 3) for record in records]
        trips = guard_trips(records, WORD_REPETITION, max_completion_length=limit)
        repetition = [t for t in trips if t.kind == "repetition"]
        if repetition:
            break
    assert repetition, f"repeated-word share per step, by learning rate: {tried}"
    trip = repetition[0]
    # The one-word answers the run starts from repeat nothing: the model learned to repeat.
    assert max(shares[:3]) < WORD_REPETITION.repetition_share, shares
    assert trip.step > 3
    assert trip.numbers["repeated_ngram_share"] >= WORD_REPETITION.repetition_share
    assert (records[trip.step - 1].reward_mean or 0.0) > 2 * (records[0].reward_mean or 0.0)
    # Its evidence: the step's most repetitive completions, as the model wrote them.
    completions = {c.completion for c in records[trip.step - 1].completions}
    assert trip.examples and all(e["completion"] in completions for e in trip.examples)
    assert all((repeated_ngram_share(e["completion"], 1) or 0.0) >= 0.5 for e in trip.examples)
