"""Signs that a run is not learning, read from its step records: pure functions, no database.

GRPO learns only from groups whose completions got different rewards (the advantage of a group
whose rewards are all equal is zero). A run where nearly every group is flat trains on nothing
while looking healthy. The usual signs of reward hacking are here too: one function's scores
stop varying while the others still do, completions collapse to a few tokens, or nearly all of
them run into max_completion_length.

Each warning fires once per episode: when its condition has held for ``patience`` consecutive
steps, and again only after the condition has stopped holding and come back.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from workers.training.step_records import CompletionRecord, StepRecord

NO_SIGNAL = "no_signal"
NO_SIGNAL_RUN = "no_signal_run"
FUNCTION_FLAT = "function_flat"
LENGTH_COLLAPSE = "length_collapse"
TRUNCATION = "truncation"


@dataclass(frozen=True)
class SignalSettings:
    # A step "has no signal" when at least this share of its groups got equal rewards.
    no_signal_threshold: float = 0.9
    # Consecutive steps a condition must hold before it is reported.
    patience: int = 3
    # Completion length collapsed: the step's mean is below this share of the early mean.
    length_collapse_share: float = 0.2
    # Steps whose mean length makes the "early mean" the collapse is measured against.
    early_steps: int = 3
    # Most completions truncated: at least this share hit max_completion_length.
    truncated_threshold: float = 0.9


@dataclass(frozen=True)
class StepSignals:
    step: int
    frac_reward_zero_std: float | None  # share of groups whose rewards did not vary
    function_std: dict[str, float | None]  # each function's std over the whole step
    completion_length_mean: float | None  # tokens
    truncated_share: float | None  # share of completions that hit max_completion_length


@dataclass(frozen=True)
class TrainingWarning:
    kind: str
    step: int
    message: str
    data: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "step": self.step, "message": self.message, **self.data}


def frac_reward_zero_std(completions: Sequence[CompletionRecord]) -> float | None:
    """Share of the step's groups (completions of one prompt) whose totals are all equal.

    A group with fewer than two scored completions gives no comparison either: it counts as
    flat. None when the step has no completions.
    """
    groups: dict[int, list[float]] = {}
    for completion in completions:
        totals = groups.setdefault(completion.prompt_index, [])
        if completion.total is not None:
            totals.append(completion.total)
    if not groups:
        return None
    flat = sum(1 for totals in groups.values() if len(totals) < 2 or max(totals) == min(totals))
    return flat / len(groups)


def step_signals(record: StepRecord, max_completion_length: int) -> StepSignals:
    lengths = [c.token_count for c in record.completions]
    return StepSignals(
        step=record.step,
        frac_reward_zero_std=frac_reward_zero_std(record.completions),
        function_std={
            name: metrics.std if metrics.scored >= 2 else None
            for name, metrics in record.functions.items()
        },
        completion_length_mean=statistics.fmean(lengths) if lengths else None,
        truncated_share=(
            sum(1 for n in lengths if n >= max_completion_length) / len(lengths)
            if lengths
            else None
        ),
    )


class SignalMonitor:
    """Watches a run's steps in order and says which warnings to raise, once per episode."""

    def __init__(self, settings: SignalSettings, *, max_completion_length: int) -> None:
        self.settings = settings
        self.max_completion_length = max_completion_length
        self._streaks: dict[str, int] = {}
        self._early_lengths: list[float] = []

    def observe_step(self, record: StepRecord) -> list[TrainingWarning]:
        return self.observe(step_signals(record, self.max_completion_length))

    def observe(self, signals: StepSignals) -> list[TrainingWarning]:
        s = self.settings
        conditions: dict[str, TrainingWarning | None] = {}

        frac = signals.frac_reward_zero_std
        conditions[NO_SIGNAL] = (
            TrainingWarning(
                NO_SIGNAL,
                signals.step,
                f"{s.patience} steps in a row with no learning signal: at least "
                f"{s.no_signal_threshold:.0%} of each step's groups got equal rewards "
                f"(step {signals.step}: {frac:.0%}). GRPO learns nothing from such groups: make "
                "the reward give partial credit, or sample more diverse completions "
                "(temperature, num_generations).",
                {"frac_reward_zero_std": frac, "patience": s.patience},
            )
            if frac is not None and frac >= s.no_signal_threshold
            else None
        )

        varying = {n for n, std in signals.function_std.items() if std is not None and std > 0}
        for name, std in signals.function_std.items():
            flat = std == 0 and bool(varying - {name})
            conditions[f"{FUNCTION_FLAT}:{name}"] = (
                TrainingWarning(
                    FUNCTION_FLAT,
                    signals.step,
                    f"reward function {name!r} gave every completion the same score for "
                    f"{s.patience} steps in a row while the others still vary: it no longer "
                    "tells completions apart (saturated, or the model found a way around it).",
                    {"function": name, "patience": s.patience},
                )
                if flat
                else None
            )

        length = signals.completion_length_mean
        early = statistics.fmean(self._early_lengths) if self._early_lengths else None
        collapsed = (
            length is not None
            and early is not None
            and len(self._early_lengths) >= s.early_steps
            and length < s.length_collapse_share * early
        )
        conditions[LENGTH_COLLAPSE] = (
            TrainingWarning(
                LENGTH_COLLAPSE,
                signals.step,
                f"completions collapsed to {length:.1f} tokens on average, under "
                f"{s.length_collapse_share:.0%} of the {early:.1f} of the first steps, for "
                f"{s.patience} steps in a row: a common sign of reward hacking.",
                {"completion_length_mean": length, "early_length_mean": early},
            )
            if collapsed and length is not None and early is not None
            else None
        )
        if length is not None and len(self._early_lengths) < s.early_steps:
            self._early_lengths.append(length)

        truncated = signals.truncated_share
        conditions[TRUNCATION] = (
            TrainingWarning(
                TRUNCATION,
                signals.step,
                f"{truncated:.0%} of completions hit max_completion_length for {s.patience} "
                "steps in a row: they are cut before they finish (raise the limit, or reward "
                "shorter answers).",
                {"truncated_share": truncated},
            )
            if truncated is not None and truncated >= s.truncated_threshold
            else None
        )

        warnings = []
        for key, warning in conditions.items():
            if warning is None:
                self._streaks[key] = 0  # the episode is over: a later one warns again
                continue
            self._streaks[key] = self._streaks.get(key, 0) + 1
            if self._streaks[key] == s.patience:
                warnings.append(warning)
        return warnings


def no_signal_run_warning(
    fractions: Sequence[float | None], last_step: int, settings: SignalSettings | None = None
) -> TrainingWarning | None:
    """The end-of-run verdict: did the run as a whole learn from (almost) nothing?

    ``fractions`` are every recorded step's frac_reward_zero_std; their mean is the share of
    all the run's groups that gave no signal (every step has the same number of groups).
    """
    threshold = (settings or SignalSettings()).no_signal_threshold
    present = [f for f in fractions if f is not None]
    if not present:
        return None
    share = statistics.fmean(present)
    if share < threshold:
        return None
    return TrainingWarning(
        NO_SIGNAL_RUN,
        last_step,
        f"the run learned from (almost) nothing: {share:.0%} of its groups over {len(present)} "
        "steps got equal rewards for every completion, so their advantages were zero and the "
        "adapter is close to the base model.",
        {"frac_reward_zero_std": share, "steps": len(present)},
    )
