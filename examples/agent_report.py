"""What the agent examples (agent_lookup.py, agent_own_tool.py) print once their GRPO job has
ended: how the reward moved, and one rollout of the last step, turn by turn.

It sits beside them: `python examples/<name>.py` puts this folder on the import path.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import rft


def print_reward_trend(steps: Sequence[rft.Step]) -> int:
    """Prints the mean reward of the first and of the last quarter of ``steps``; returns how
    many steps a quarter is."""
    quarter = max(1, len(steps) // 4)
    first = statistics.mean(s.reward_mean or 0.0 for s in steps[:quarter])
    last = statistics.mean(s.reward_mean or 0.0 for s in steps[-quarter:])
    print(f"mean reward: first {quarter} steps {first:.2f}, last {quarter} steps {last:.2f}")
    return quarter


def print_last_rollout(client: rft.Client, job_id: str, steps: Sequence[rft.Step]) -> None:
    """One rollout of the last step, turn by turn (the tool calls, what they returned, the
    answer)."""
    completion = next(iter(client.jobs.completions(job_id, step=steps[-1].step)))
    for line in rft.trajectory_lines(completion.trajectory or []):
        print(f"  {line}")
