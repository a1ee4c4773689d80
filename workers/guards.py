"""Guards against reward hacking, read from a run's step records: pure rules, no database.

A run whose reward rises can still be a model that learned to game its reward: pad to the
length limit, repeat a phrase, satisfy one function while the others fall, or collapse to
one answer. Each rule below looks at the steps recorded so far (a ``GuardHistory``) and says
whether its condition holds at the latest step, with the numbers and two or three of that
step's completions as evidence. ``GuardMonitor`` applies them step by step, with patience and
episodes as workers.training_signals does: a guard trips when its condition has held for
``patience`` consecutive steps, and again only after it stopped holding and came back.

The thresholds are the job's (service.jobs.guard_settings); docs/guards.md explains them.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from service.jobs.guard_settings import GuardSettings
from workers.training.step_records import CompletionRecord, StepRecord

# Evidence: this many completions, each cut to this many characters.
EXAMPLES = 3
EXAMPLE_CHARS = 300


@dataclass(frozen=True)
class GuardTrip:
    kind: str  # the guard's name (service.jobs.guard_settings.GUARD_NAMES)
    step: int
    message: str
    numbers: dict[str, Any]
    examples: list[dict[str, Any]]
    # Set by the monitor: the job's guards.pause_on names this guard (and it has not paused
    # the job before).
    pauses_job: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "step": self.step,
            "message": self.message,
            "guard": True,
            "numbers": self.numbers,
            "examples": self.examples,
            "paused_job": self.pauses_job,
        }


@dataclass(frozen=True)
class StepSummary:
    """What the rules need of one recorded step; the completions only of the latest."""

    step: int
    reward_mean: float | None
    kl: float | None
    entropy: float | None
    length_mean: float | None  # tokens
    function_means: dict[str, float | None]
    function_weights: dict[str, float]


@dataclass(frozen=True)
class EvalPoint:
    step: int
    reward_mean: float


@dataclass
class GuardHistory:
    """The run so far: every step's summary, the validation results, the latest step's record."""

    max_completion_length: int
    steps: list[StepSummary] = field(default_factory=list)
    evaluations: list[EvalPoint] = field(default_factory=list)
    latest: StepRecord | None = None

    def add(self, record: StepRecord) -> None:
        lengths = [c.token_count for c in record.completions]
        self.steps.append(
            StepSummary(
                step=record.step,
                reward_mean=record.reward_mean,
                kl=record.kl,
                entropy=record.extra_metrics.get("entropy"),
                length_mean=statistics.fmean(lengths) if lengths else None,
                function_means={name: m.mean for name, m in record.functions.items()},
                function_weights={name: m.weight for name, m in record.functions.items()},
            )
        )
        evaluation = record.evaluation
        if evaluation is not None and evaluation.reward_mean is not None:
            self.evaluations.append(EvalPoint(evaluation.step, evaluation.reward_mean))
        self.latest = record


Finding = tuple[str, dict[str, Any], list[CompletionRecord]]  # message, numbers, evidence
Rule = Callable[[GuardHistory, GuardSettings], Finding | None]


def example(completion: CompletionRecord, **why: Any) -> dict[str, Any]:
    text = completion.completion
    return {
        "prompt_index": completion.prompt_index,
        "group_position": completion.group_position,
        "completion": text if len(text) <= EXAMPLE_CHARS else text[:EXAMPLE_CHARS] + "…",
        "token_count": completion.token_count,
        "scores": completion.scores,
        "total": completion.total,
        **why,
    }


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def _highest_reward(completions: Sequence[CompletionRecord]) -> list[CompletionRecord]:
    return sorted(completions, key=lambda c: -(c.total if c.total is not None else -1e300))[
        :EXAMPLES
    ]


def _shares(carried: dict[str, float]) -> dict[str, float] | None:
    total = sum(carried.values())
    return None if total == 0 else {name: value / total for name, value in carried.items()}


# The rules: each looks at the latest step against what came before.


def reward_divergence(history: GuardHistory, s: GuardSettings) -> Finding | None:
    """Training reward rising while the validation reward falls: the model fits what is
    rewarded on the training prompts, not the task."""
    evals = history.evaluations[-s.divergence_evals :]
    latest = history.latest
    if len(evals) < s.divergence_evals or latest is None or evals[-1].step != latest.step:
        return None
    # The training reward at an evaluation: the mean over the steps since the one before, so
    # one noisy step does not decide it.
    train: list[float] = []
    previous = evals[0].step - 1
    for point in evals:
        window = [x.reward_mean for x in history.steps if previous < x.step <= point.step] or [
            x.reward_mean for x in history.steps if x.step == point.step
        ]
        mean = _mean(window)
        if mean is None:
            return None
        train.append(mean)
        previous = point.step
    rise = train[-1] - train[0]
    drop = evals[0].reward_mean - evals[-1].reward_mean
    if rise < s.divergence_min_change or drop < s.divergence_min_change:
        return None
    return (
        f"the training reward rose by {rise:.3g} while the validation reward fell by "
        f"{drop:.3g} over the evaluations at steps {evals[0].step}-{evals[-1].step}: the model "
        "is learning what the training prompts reward, not the task.",
        {
            "eval_steps": [p.step for p in evals],
            "validation_reward": [p.reward_mean for p in evals],
            "training_reward": train,
        },
        _highest_reward(latest.completions),
    )


def length_drift(history: GuardHistory, s: GuardSettings) -> Finding | None:
    """Completions drifting to max_completion_length: a reward that pays for length."""
    limit = history.max_completion_length
    if len(history.steps) <= s.early_steps or history.latest is None:
        return None
    early = _mean(x.length_mean for x in history.steps[: s.early_steps])
    now = history.steps[-1].length_mean
    if early is None or now is None:
        return None
    if now < s.length_limit_share * limit or now - early < s.length_min_rise * limit:
        return None
    longest = sorted(history.latest.completions, key=lambda c: -c.token_count)[:EXAMPLES]
    return (
        f"completions drifted to the length limit: {now:.1f} tokens on average (limit "
        f"{limit}), up from {early:.1f} in the first {s.early_steps} steps. A reward that grows "
        "with length is paying for padding.",
        {"length_mean": now, "early_length_mean": early, "max_completion_length": limit},
        longest,
    )


def reward_dominance(history: GuardHistory, s: GuardSettings) -> Finding | None:
    """One reward function carrying most of the reward while the others fall: the model
    games that one at the others' expense."""
    window = history.steps[-s.dominance_window :]
    if len(window) < s.dominance_window or history.latest is None:
        return None
    names = sorted(window[-1].function_means)
    if len(names) < 2:
        return None
    half = len(window) // 2
    first, second = window[:half], window[half:]
    before = {n: _mean(x.function_means.get(n) for x in first) for n in names}
    after = {n: _mean(x.function_means.get(n) for x in second) for n in names}
    if any(before[n] is None or after[n] is None for n in names):
        return None
    weights = window[-1].function_weights
    share_before = _shares({n: abs(weights.get(n, 1.0) * before[n]) for n in names})  # type: ignore[operator]
    share_after = _shares({n: abs(weights.get(n, 1.0) * after[n]) for n in names})  # type: ignore[operator]
    if share_after is None:
        return None
    dominant = max(names, key=lambda n: share_after[n])
    share = share_after[dominant]
    others = [n for n in names if n != dominant]
    # It took over: a function that carried most of the reward from the start does so by
    # the weights the user chose, not by a game the model found.
    took_over = share_before is None or share_before[dominant] < s.dominance_share
    rose = after[dominant] > before[dominant]  # type: ignore[operator]
    others_fell = all(after[n] < before[n] for n in others)  # type: ignore[operator]
    if share < s.dominance_share or not took_over or not rose or not others_fell:
        return None
    best = sorted(
        history.latest.completions,
        key=lambda c: -(c.scores.get(dominant) or 0.0),
    )[:EXAMPLES]
    return (
        f"reward function {dominant!r} took over: it carries {share:.0%} of the reward, up "
        f"from {share_before[dominant] if share_before else 0:.0%}, and rose over the last "
        f"{len(window)} steps while {', '.join(map(repr, others))} fell: the model is gaming "
        "one function at the others' expense.",
        {
            "function": dominant,
            "share": share,
            "share_before": None if share_before is None else share_before[dominant],
            "means_before": before,
            "means_after": after,
            "window": len(window),
        },
        best,
    )


def kl_shift(history: GuardHistory, s: GuardSettings) -> Finding | None:
    """The KL to the reference model jumping: the policy moved far in one step."""
    if history.latest is None or len(history.steps) < 2:
        return None
    kl = history.steps[-1].kl
    before = [x.kl for x in history.steps[-1 - s.kl_window : -1] if x.kl is not None]
    if kl is None or not before:
        return None
    baseline = statistics.median(before)
    if kl < s.kl_min or kl < s.kl_factor * baseline:
        return None
    return (
        f"the KL to the reference model jumped to {kl:.3g}, {s.kl_factor:g}x or more the "
        f"median {baseline:.3g} of the {len(before)} steps before: the policy moved far in "
        "one step (often towards a reward exploit).",
        {"kl": kl, "baseline_kl": baseline},
        _highest_reward(history.latest.completions),
    )


def entropy_shift(history: GuardHistory, s: GuardSettings) -> Finding | None:
    """Token entropy collapsing (the model settled on one way to answer) or jumping."""
    if len(history.steps) <= s.early_steps or history.latest is None:
        return None
    early = _mean(x.entropy for x in history.steps[: s.early_steps])
    now = history.steps[-1].entropy
    if early is None or now is None or early <= 0:
        return None
    if now <= early / s.entropy_factor:
        direction = "collapsed"
    elif now >= early * s.entropy_factor:
        direction = "jumped"
    else:
        return None
    return (
        f"token entropy {direction} to {now:.3g} from {early:.3g} in the first "
        f"{s.early_steps} steps (factor {s.entropy_factor:g}): "
        + (
            "the model answers one way whatever the prompt."
            if direction == "collapsed"
            else "the model's sampling turned erratic."
        ),
        {"entropy": now, "early_entropy": early, "direction": direction},
        _highest_reward(history.latest.completions),
    )


def repeated_ngram_share(text: str, n: int) -> float | None:
    """Share of the text's word n-grams that repeat one earlier in it; None when it has
    fewer than two n-grams (nothing can repeat)."""
    words = text.split()
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    if len(grams) < 2:
        return None
    return 1 - len(set(grams)) / len(grams)


def repetition(history: GuardHistory, s: GuardSettings) -> Finding | None:
    """The same word n-grams over and over: a reward a repeated word satisfies."""
    latest = history.latest
    if latest is None:
        return None
    shares = [
        (share, c)
        for c in latest.completions
        if (share := repeated_ngram_share(c.completion, s.repetition_ngram)) is not None
    ]
    if not shares:
        return None
    # Completions too short for two n-grams repeat nothing: they count as 0.
    mean = sum(share for share, _ in shares) / len(latest.completions)
    if mean < s.repetition_share:
        return None
    worst = sorted(shares, key=lambda pair: -pair[0])[:EXAMPLES]
    return (
        f"completions repeat themselves: on average {mean:.0%} of their word "
        f"{s.repetition_ngram}-grams repeat an earlier one. A reward that a repeated word or "
        "phrase satisfies is being gamed.",
        {"repeated_ngram_share": mean, "ngram": s.repetition_ngram},
        [c for _, c in worst],
    )


def group_agreement(history: GuardHistory, s: GuardSettings) -> Finding | None:
    """Every completion of a group the same text: the group teaches nothing (zero advantage)."""
    latest = history.latest
    if latest is None:
        return None
    groups: dict[int, list[CompletionRecord]] = {}
    for c in latest.completions:
        groups.setdefault(c.prompt_index, []).append(c)
    if not groups:
        return None
    agreeing = [
        group[0]
        for group in groups.values()
        if len(group) >= 2 and len({" ".join(c.completion.split()) for c in group}) == 1
    ]
    share = len(agreeing) / len(groups)
    if share < s.agreement_share:
        return None
    return (
        f"{share:.0%} of the step's groups are one completion repeated for every sample: the "
        "model collapsed to a single answer, and those groups carry no learning signal.",
        {"agreeing_group_share": share, "groups": len(groups)},
        agreeing[:EXAMPLES],
    )


RULES: dict[str, Rule] = {
    "reward_divergence": reward_divergence,
    "length_drift": length_drift,
    "reward_dominance": reward_dominance,
    "kl_shift": kl_shift,
    "entropy_shift": entropy_shift,
    "repetition": repetition,
    "group_agreement": group_agreement,
}
# Judged at evaluations only: each one is evidence enough (they are several steps apart).
AT_ONCE = frozenset({"reward_divergence"})


class GuardMonitor:
    """Watches a run's steps in order and says which guards trip, once per episode."""

    def __init__(
        self,
        settings: GuardSettings,
        *,
        max_completion_length: int,
        already_paused: Iterable[str] = (),
    ) -> None:
        self.settings = settings
        self.history = GuardHistory(max_completion_length)
        self._streaks: dict[str, int] = {}
        # A guard pauses a job once: after its user resumed, it only warns.
        self._paused = set(already_paused)

    def observe_step(self, record: StepRecord) -> list[GuardTrip]:
        self.history.add(record)
        trips = []
        for name, rule in RULES.items():
            finding = rule(self.history, self.settings)
            if finding is None:
                self._streaks[name] = 0  # the episode is over: a later one trips again
                continue
            self._streaks[name] = self._streaks.get(name, 0) + 1
            needed = 1 if name in AT_ONCE else self.settings.patience
            if self._streaks[name] != needed:
                continue
            message, numbers, evidence = finding
            pauses = name in self.settings.pause_on and name not in self._paused
            if pauses:
                self._paused.add(name)
            trips.append(
                GuardTrip(
                    kind=name,
                    step=record.step,
                    message=message
                    + (f" (held for {needed} steps)" if needed > 1 else "")
                    + (" The job is pausing (guards.pause_on)." if pauses else ""),
                    numbers={**numbers, "patience": needed},
                    examples=[example(c) for c in evidence],
                    pauses_job=pauses,
                )
            )
        return trips


def guard_trips(
    records: Iterable[StepRecord], settings: GuardSettings, *, max_completion_length: int
) -> list[GuardTrip]:
    """Every trip over a whole recorded run, in order (for tests and after-the-fact checks)."""
    monitor = GuardMonitor(settings, max_completion_length=max_completion_length)
    return [trip for record in records for trip in monitor.observe_step(record)]
