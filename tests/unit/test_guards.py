"""Guards against reward hacking, rule by rule, on synthetic step records: each trips on its
gamed pattern (with the step, the numbers and example completions), not on a clean run, and
follows the job's thresholds."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from pydantic import ValidationError

from service.jobs.guard_settings import GUARD_NAMES, GuardSettings
from workers.guards import GuardMonitor, GuardTrip, guard_trips, repeated_ngram_share
from workers.training.step_records import (
    CompletionRecord,
    EvalRecord,
    FunctionStepMetrics,
    StepRecord,
)

LIMIT = 16
GROUPS, GENERATIONS = 2, 4
# A clean run's completions: different words in every group, nothing repeated.
VARIED = [f"word{i} other{i} thing{i} more{i}" for i in range(GROUPS * GENERATIONS)]


def completions(
    texts: Sequence[str], tokens: Sequence[int] | int = 8, scores: Sequence[dict] | None = None
) -> list[CompletionRecord]:
    counts = [tokens] * len(texts) if isinstance(tokens, int) else list(tokens)
    return [
        CompletionRecord(
            prompt_index=i // GENERATIONS,
            group_position=i % GENERATIONS,
            dataset_index=i // GENERATIONS,
            prompt="p",
            completion=text,
            scores=(scores[i] if scores else {"f": float(i % GENERATIONS)}),
            total=sum(v for v in (scores[i] if scores else {"f": float(i % GENERATIONS)}).values()),
            advantage=None,
            token_count=counts[i],
        )
        for i, text in enumerate(texts)
    ]


def step(
    number: int,
    *,
    texts: Sequence[str] = VARIED,
    tokens: Sequence[int] | int = 8,
    reward: float = 0.5,
    kl: float | None = None,
    entropy: float | None = 2.0,
    means: dict[str, float] | None = None,
    validation: float | None = None,
) -> StepRecord:
    means = means or {"f": reward}
    return StepRecord(
        step=number,
        config_version=1,
        reward_mean=reward,
        reward_std=0.1,
        loss=0.0,
        kl=kl,
        learning_rate=1e-3,
        duration_s=0.1,
        functions={
            name: FunctionStepMetrics(name, 1, 1.0, mean, 0.1, len(texts), 0)
            for name, mean in means.items()
        },
        completions=completions(texts, tokens),
        extra_metrics={} if entropy is None else {"entropy": entropy},
        evaluation=(
            None if validation is None else EvalRecord(number, 1, validation, 0.1, 2, 4, 0.1, {})
        ),
    )


def trips(records: Sequence[StepRecord], **settings: object) -> list[GuardTrip]:
    return guard_trips(records, GuardSettings.model_validate(settings), max_completion_length=LIMIT)


def kinds(found: Sequence[GuardTrip]) -> list[tuple[int, str]]:
    return [(t.step, t.kind) for t in found]


def clean_run(steps: int = 12) -> list[StepRecord]:
    return [
        step(n, reward=0.3 + 0.01 * n, kl=0.01 + 0.001 * n, validation=0.3 + 0.01 * n)
        for n in range(1, steps + 1)
    ]


def test_a_clean_run_trips_no_guard() -> None:
    assert trips(clean_run()) == []


def test_length_drift_trips_when_completions_grow_to_the_limit() -> None:
    lengths = [6, 6, 6, 9, 12, 15, 16, 16, 16]
    found = trips([step(n, tokens=t) for n, t in enumerate(lengths, start=1)])
    assert kinds(found) == [(8, "length_drift")]  # >= 14.4 tokens at steps 6, 7, 8
    trip = found[0]
    assert trip.numbers["length_mean"] == 16 and trip.numbers["early_length_mean"] == 6
    assert trip.numbers["max_completion_length"] == LIMIT
    assert 2 <= len(trip.examples) <= 3
    assert all(e["token_count"] == 16 and e["completion"] for e in trip.examples)
    assert "16.0 tokens" in trip.message


def test_length_drift_needs_a_rise_not_just_long_completions() -> None:
    # At the limit from the first step: truncation, not drift.
    assert trips([step(n, tokens=16) for n in range(1, 10)]) == []


def test_length_drift_follows_its_thresholds() -> None:
    lengths = [6, 6, 6, 12, 12, 12, 12]
    assert trips([step(n, tokens=t) for n, t in enumerate(lengths, start=1)]) == []
    found = trips(
        [step(n, tokens=t) for n, t in enumerate(lengths, start=1)],
        length_limit_share=0.7,
        patience=2,
    )
    assert kinds(found) == [(5, "length_drift")]


def test_repetition_trips_on_a_repeated_word() -> None:
    gamed = ["yes yes yes yes yes yes"] * (GROUPS * GENERATIONS)
    records = [step(n) for n in range(1, 4)] + [step(n, texts=gamed) for n in range(4, 8)]
    found = trips(records)
    assert "repetition" in {t.kind for t in found}
    trip = next(t for t in found if t.kind == "repetition")
    assert trip.step == 6
    assert trip.numbers["repeated_ngram_share"] > 0.7
    assert trip.examples[0]["completion"] == gamed[0]


def test_repeated_ngram_share() -> None:
    assert repeated_ngram_share("a b c d e", 3) == 0.0
    assert repeated_ngram_share("a a a a a", 3) == pytest.approx(2 / 3)
    assert repeated_ngram_share("a b", 3) is None  # no n-gram to repeat


def test_group_agreement_trips_when_every_sample_of_a_group_is_the_same() -> None:
    same = ["the answer"] * GENERATIONS + VARIED[GENERATIONS:]
    found = trips([step(n, texts=same) for n in range(1, 5)], patience=2)
    assert ("group_agreement" in {t.kind for t in found}) is True
    trip = next(t for t in found if t.kind == "group_agreement")
    assert trip.step == 2 and trip.numbers["agreeing_group_share"] == 0.5
    assert [e["completion"] for e in trip.examples] == ["the answer"]
    # Above the threshold: one group in two does not trip.
    assert trips([step(n, texts=same) for n in range(1, 5)], agreement_share=0.6) == []


def test_reward_dominance_trips_when_one_function_gains_and_the_others_fall() -> None:
    records = [
        step(n, means={"length": 0.2 + 0.1 * n, "correct": 0.3 - 0.02 * n}) for n in range(1, 12)
    ]
    found = [t for t in trips(records) if t.kind == "reward_dominance"]
    assert found, trips(records)
    trip = found[0]
    assert trip.numbers["function"] == "length" and trip.numbers["share"] >= 0.8
    assert trip.numbers["means_after"]["correct"] < trip.numbers["means_before"]["correct"]
    # Both rising: no dominance trip however lopsided.
    rising = [step(n, means={"length": 0.9 + 0.01 * n, "correct": 0.01 * n}) for n in range(1, 12)]
    assert [t for t in trips(rising) if t.kind == "reward_dominance"] == []


def test_kl_shift_trips_on_a_jump_above_the_floor() -> None:
    kls = [0.02, 0.02, 0.03, 0.02, 0.03, 0.5, 0.6, 0.7]
    found = trips([step(n, kl=k) for n, k in enumerate(kls, start=1)], patience=1)
    assert kinds(found) == [(6, "kl_shift")]
    assert found[0].numbers["kl"] == 0.5 and found[0].numbers["baseline_kl"] == 0.02
    # Under kl_min a jump of the same factor means nothing.
    assert trips([step(n, kl=k / 10) for n, k in enumerate(kls, start=1)], patience=1) == []


def test_entropy_shift_trips_on_a_collapse() -> None:
    entropies = [2.0, 2.1, 1.9, 1.5, 0.6, 0.5, 0.4]
    found = trips([step(n, entropy=e) for n, e in enumerate(entropies, start=1)], patience=2)
    assert kinds(found) == [(6, "entropy_shift")]
    assert found[0].numbers["direction"] == "collapsed"
    assert found[0].numbers["early_entropy"] == pytest.approx(2.0)


def test_reward_divergence_trips_at_the_evaluation_that_shows_it() -> None:
    records = []
    for n in range(1, 10):
        validation = {3: 0.5, 6: 0.45, 9: 0.4}.get(n)
        records.append(step(n, reward=0.3 + 0.05 * n, validation=validation))
    found = trips(records)
    assert kinds(found) == [(9, "reward_divergence")]
    trip = found[0]
    assert trip.numbers["validation_reward"] == [0.5, 0.45, 0.4]
    assert trip.numbers["eval_steps"] == [3, 6, 9]
    assert trip.numbers["training_reward"][-1] > trip.numbers["training_reward"][0]
    assert len(trip.examples) == 3
    # A smaller fall than divergence_min_change is noise.
    assert trips(records, divergence_min_change=0.2) == []


def test_a_guard_trips_once_per_episode_and_again_after_it_ends() -> None:
    gamed = ["yes yes yes yes yes"] * (GROUPS * GENERATIONS)
    pattern = [gamed] * 4 + [VARIED] * 2 + [gamed] * 3
    found = trips([step(n, texts=t) for n, t in enumerate(pattern, start=1)], patience=2)
    assert [t.step for t in found if t.kind == "repetition"] == [2, 8]


def test_pause_on_marks_the_trip_and_pauses_a_job_once() -> None:
    gamed = ["yes yes yes yes yes"] * (GROUPS * GENERATIONS)
    pattern = [gamed] * 2 + [VARIED] + [gamed] * 2
    settings = GuardSettings(pause_on=["repetition"], patience=2)
    monitor = GuardMonitor(settings, max_completion_length=LIMIT)
    found = [
        t
        for n, texts in enumerate(pattern, start=1)
        for t in monitor.observe_step(step(n, texts=texts))
        if t.kind == "repetition"
    ]
    # group_agreement tripped too (every group is one text): it is not in pause_on.
    assert [(t.step, t.pauses_job) for t in found] == [(2, True), (5, False)]
    assert "pausing" in found[0].message and found[0].as_json()["paused_job"] is True
    resumed = GuardMonitor(settings, max_completion_length=LIMIT, already_paused={"repetition"})
    later = [
        t
        for n in (1, 2)
        for t in resumed.observe_step(step(n, texts=gamed))
        if t.kind == "repetition"
    ]
    assert [t.pauses_job for t in later] == [False]


@pytest.mark.parametrize(
    ("settings", "complaint"),
    [
        ({"pause_on": ["length"]}, "pause_on"),
        ({"patience": 0}, "patience"),
        ({"length_limit_share": 1.5}, "length_limit_share"),
        ({"dominance_share": 0.4}, "dominance_share"),
        ({"kl_factor": 1.0}, "kl_factor"),
        ({"unknown_threshold": 1}, "unknown_threshold"),
    ],
)
def test_absurd_settings_are_refused(settings: dict, complaint: str) -> None:
    with pytest.raises(ValidationError, match=complaint):
        GuardSettings.model_validate(settings)


def test_every_named_guard_has_a_rule() -> None:
    from workers.guards import RULES

    assert set(RULES) == set(GUARD_NAMES)
