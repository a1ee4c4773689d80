"""Warnings from step records: no learning signal, a flat function, collapsed or cut lengths."""

from __future__ import annotations

from workers.training.step_records import CompletionRecord, FunctionStepMetrics, StepRecord
from workers.training_signals import (
    FUNCTION_FLAT,
    LENGTH_COLLAPSE,
    NO_SIGNAL,
    NO_SIGNAL_RUN,
    TRUNCATION,
    SignalMonitor,
    SignalSettings,
    StepSignals,
    frac_reward_zero_std,
    no_signal_run_warning,
    step_signals,
)

SETTINGS = SignalSettings(no_signal_threshold=0.9, patience=3)


def completion(prompt_index: int, total: float | None, tokens: int = 8) -> CompletionRecord:
    return CompletionRecord(
        prompt_index=prompt_index,
        group_position=0,
        dataset_index=prompt_index,
        prompt="p",
        completion="c",
        scores={"f": total},
        total=total,
        advantage=None,
        token_count=tokens,
    )


def signals(
    step: int,
    *,
    frac: float | None = 0.0,
    stds: dict[str, float | None] | None = None,
    length: float | None = 10.0,
    truncated: float | None = 0.0,
) -> StepSignals:
    return StepSignals(step, frac, stds or {"f": 0.5}, length, truncated)


def kinds(monitor: SignalMonitor, steps: list[StepSignals]) -> list[tuple[int, str]]:
    return [(w.step, w.kind) for s in steps for w in monitor.observe(s)]


def monitor() -> SignalMonitor:
    return SignalMonitor(SETTINGS, max_completion_length=16)


def test_frac_reward_zero_std_counts_groups_whose_totals_are_equal() -> None:
    step = [
        completion(0, 1.0),
        completion(0, 1.0),  # group 0: flat
        completion(1, 0.0),
        completion(1, 1.0),  # group 1: varies
        completion(2, 0.5),
        completion(2, None),  # group 2: one score, nothing to compare: flat
        completion(3, None),
        completion(3, None),  # group 3: no scores at all: flat
    ]
    assert frac_reward_zero_std(step) == 0.75
    assert frac_reward_zero_std([]) is None


def test_step_signals_from_a_record() -> None:
    record = StepRecord(
        step=4,
        config_version=1,
        reward_mean=0.0,
        reward_std=0.0,
        loss=0.0,
        kl=None,
        learning_rate=None,
        duration_s=1.0,
        functions={
            "f": FunctionStepMetrics("f", 1, 1.0, 0.0, 0.0, scored=4, errors=0),
            "g": FunctionStepMetrics("g", 1, 1.0, None, None, scored=1, errors=3),
        },
        completions=[completion(0, 0.0, 16), completion(0, 0.0, 16), completion(1, 0.0, 4)],
    )
    got = step_signals(record, max_completion_length=16)
    assert got.frac_reward_zero_std == 1.0
    assert got.function_std == {"f": 0.0, "g": None}  # one score has no std
    assert got.completion_length_mean == 12.0
    assert got.truncated_share == 2 / 3


def test_no_signal_warns_once_per_episode_after_patience_steps() -> None:
    m = monitor()
    steps = [signals(i, frac=1.0) for i in range(1, 7)]  # six flat steps: one warning
    steps += [signals(7, frac=0.5)]  # signal comes back: the episode ends
    steps += [signals(i, frac=0.95) for i in range(8, 11)]  # a second episode
    steps += [signals(11, frac=None)]  # a step without completions breaks a streak too
    assert kinds(m, steps) == [(3, NO_SIGNAL), (10, NO_SIGNAL)]


def test_below_the_threshold_or_shorter_than_patience_is_quiet() -> None:
    m = monitor()
    steps = [signals(1, frac=0.85), signals(2, frac=0.85), signals(3, frac=0.85)]
    steps += [signals(4, frac=1.0), signals(5, frac=1.0), signals(6, frac=0.0)]
    assert kinds(m, steps) == []


def test_a_function_that_stops_varying_while_others_vary() -> None:
    m = monitor()
    steps = [signals(i, stds={"fmt": 0.0, "answer": 0.4}) for i in range(1, 4)]
    warnings = [w for s in steps for w in m.observe(s)]
    assert [(w.step, w.kind, w.data["function"]) for w in warnings] == [(3, FUNCTION_FLAT, "fmt")]
    assert "'fmt'" in warnings[0].message
    # All functions flat is the no-signal warning's business, and one function alone has no
    # others to compare with.
    m = monitor()
    assert kinds(m, [signals(i, stds={"fmt": 0.0, "answer": 0.0}) for i in range(1, 5)]) == []
    m = monitor()
    assert kinds(m, [signals(i, stds={"fmt": 0.0}) for i in range(1, 5)]) == []
    # A function with too few scores for a std is not "flat".
    m = monitor()
    assert kinds(m, [signals(i, stds={"fmt": None, "answer": 0.3}) for i in range(1, 5)]) == []


def test_completion_length_collapse() -> None:
    m = monitor()
    early = [signals(i, length=100.0) for i in range(1, 4)]
    later = [signals(i, length=15.0) for i in range(4, 7)]  # 15% of the early 100 tokens
    warnings = [w for s in early + later for w in m.observe(s)]
    assert [(w.step, w.kind) for w in warnings] == [(6, LENGTH_COLLAPSE)]
    assert warnings[0].data == {"completion_length_mean": 15.0, "early_length_mean": 100.0}
    # Shorter, but not collapsed (25% of the early mean), says nothing.
    m = monitor()
    assert kinds(m, early + [signals(i, length=25.0) for i in range(4, 10)]) == []


def test_most_completions_cut_at_the_limit() -> None:
    m = monitor()
    steps = [signals(i, truncated=0.95) for i in range(1, 5)]
    assert kinds(m, steps) == [(3, TRUNCATION)]
    m = monitor()
    assert kinds(m, [signals(i, truncated=0.8) for i in range(1, 5)]) == []


def test_the_run_verdict_is_the_share_of_all_groups_without_signal() -> None:
    verdict = no_signal_run_warning([1.0, 1.0, 0.9, None], last_step=4, settings=SETTINGS)
    assert verdict is not None and verdict.kind == NO_SIGNAL_RUN and verdict.step == 4
    assert verdict.data["steps"] == 3
    assert "learned from (almost) nothing" in verdict.message
    assert no_signal_run_warning([1.0, 1.0, 0.5], last_step=3, settings=SETTINGS) is None
    assert no_signal_run_warning([None], last_step=1, settings=SETTINGS) is None
