"""Short plain-text readings of API results for the terminal: a config dry run, a chat prompt
(an agent's trajectory: ``rft.trajectory_lines``).

The full results stay one flag away (``--json``); these say what a person decides on.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from rft.agents import content_text
from rft.models import DryRunResult, JobConfig, RewardFunction, RewardModel

# A changed score smaller than this is rounding noise, not a change.
SCORE_TOLERANCE = 1e-9
MAX_ERRORS_SHOWN = 3


def prompt_as_text(prompt: Any, *, max_chars: int | None = None) -> str:
    """A prompt as a person reads it: a string as is, chat messages as ``role: content`` lines."""
    if isinstance(prompt, str):
        text = prompt
    elif isinstance(prompt, list):
        lines = []
        for message in prompt:
            if isinstance(message, dict) and "role" in message:
                lines.append(f"{message['role']}: {content_text(message.get('content'))}")
            else:
                lines.append(str(message))
        text = "\n".join(lines)
    else:
        text = str(prompt)
    if max_chars is not None and len(text) > max_chars:
        text = text[: max_chars - 1] + "…"
    return text


def config_changes(current: JobConfig, proposed: JobConfig) -> list[str]:
    """One line per reward function added, removed, or with new code or weight; sampling."""
    lines = []
    for name in sorted(set(current.reward_functions) | set(proposed.reward_functions)):
        before = current.reward_functions.get(name)
        after = proposed.reward_functions.get(name)
        if before is None and after is not None:
            lines.append(f"{name}: added (weight {after.weight:g})")
        elif after is None:
            lines.append(f"{name}: removed")
        elif before is not None:
            changes = []
            if isinstance(after, RewardModel):
                if not isinstance(before, RewardModel) or before.model != after.model:
                    changes.append(f"model {after.model}")
            elif not isinstance(before, RewardFunction) or before.source != after.source:
                changes.append("new code")
            if before.weight != after.weight:
                changes.append(f"weight {before.weight:g} → {after.weight:g}")
            if changes:
                lines.append(f"{name}: {', '.join(changes)}")
    for setting in ("temperature", "top_p"):
        before_value, after_value = getattr(current, setting), getattr(proposed, setting)
        if after_value is not None and before_value != after_value:
            lines.append(f"{setting}: {before_value} → {after_value}")
    return lines


def _mean(values: Iterable[float | None]) -> float | None:
    numbers = [value for value in values if value is not None and math.isfinite(value)]
    return sum(numbers) / len(numbers) if numbers else None


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _changed(before: float | None, after: float | None) -> bool:
    if before is None or after is None:
        return before is not after
    return abs(before - after) > SCORE_TOLERANCE


def dry_run_summary(current: JobConfig, proposed: JobConfig, result: DryRunResult) -> list[str]:
    """A dozen lines instead of every rescored completion."""
    if result.step is None:
        return ["dry run: no step recorded yet, nothing to rescore; nothing was changed"]
    completions = result.completions
    lines = [f"dry run on step {result.step} ({len(completions)} completions); nothing was changed"]
    changes = config_changes(current, proposed)
    lines.append("changes:" if changes else "changes: none (same functions, weights and sampling)")
    lines.extend(f"  {change}" for change in changes)

    names = sorted({name for c in completions for name in (*c.old_scores, *c.new_scores)})
    if names:
        lines.append("scores (mean before → after, completions changed):")
    for name in names:
        old = [c.old_scores.get(name) for c in completions]
        new = [c.new_scores.get(name) for c in completions]
        moved = sum(_changed(before, after) for before, after in zip(old, new, strict=True))
        lines.append(
            f"  {name}: {_number(_mean(old))} → {_number(_mean(new))}, {moved} of "
            f"{len(completions)} changed"
        )
    old_total = _mean(c.old_total for c in completions)
    new_total = _mean(c.new_total for c in completions)
    lines.append(f"total reward (mean): {_number(old_total)} → {_number(new_total)}")
    lines.append(
        f"advantage sign flips: {result.advantage_sign_changes} of {len(completions)} completions"
    )
    for name, messages in sorted(result.errors.items()):
        lines.append(f"errors in {name}: {len(messages)}")
        lines.extend(f"  {message}" for message in messages[:MAX_ERRORS_SHOWN])
        if len(messages) > MAX_ERRORS_SHOWN:
            lines.append(f"  … and {len(messages) - MAX_ERRORS_SHOWN} more (--json shows all)")
    return lines

    # A tool's result can be a whole web page: the terminal shows its start.
    return lines
