"""The CLI's short readings of a dry run and of chat prompts (no server needed)."""

from __future__ import annotations

import rft
from rft.cli.summaries import dry_run_summary, prompt_as_text

SOURCE = "def f(prompt, completion, example):\n    return 1.0\n"


def rescored(index: int, old: float, new: float, flips: bool) -> rft.RescoredCompletion:
    return rft.RescoredCompletion(
        completion_id=index,
        prompt_index=0,
        group_position=index,
        old_scores={"f": old, "g": 0.5},
        new_scores={"f": new, "g": 0.5},
        old_total=old + 0.5,
        new_total=new + 0.5,
        old_advantage_sign=1,
        new_advantage_sign=-1 if flips else 1,
    )


def test_prompt_as_text_reads_chat_messages_as_lines() -> None:
    chat = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Say a"}]},
    ]
    assert prompt_as_text(chat) == "system: Be brief.\nuser: Say a"
    assert prompt_as_text("plain") == "plain"
    assert prompt_as_text("x" * 50, max_chars=10) == "x" * 9 + "…"


def test_dry_run_summary_names_changes_scores_flips_and_errors() -> None:
    current = rft.JobConfig(
        reward_functions={"f": rft.RewardFunction(SOURCE), "g": SOURCE, "old": SOURCE},
        temperature=1.0,
    )
    proposed = rft.JobConfig(
        reward_functions={
            "f": rft.RewardFunction(SOURCE + "# stricter\n", weight=2.0),
            "g": SOURCE,
            "new": SOURCE,
        },
        temperature=0.7,
    )
    completions = [rescored(i, old=1.0, new=0.0 if i < 3 else 1.0, flips=i < 2) for i in range(8)]
    result = rft.DryRunResult(
        step=4,
        completions=completions,
        advantage_sign_changes=2,
        errors={"new": [f"ValueError: bad {i}" for i in range(5)]},
    )
    lines = dry_run_summary(current, proposed, result)
    text = "\n".join(lines)
    assert lines[0] == "dry run on step 4 (8 completions); nothing was changed"
    assert "  f: new code, weight 1 → 2" in lines
    assert "  new: added (weight 1)" in lines and "  old: removed" in lines
    assert "  temperature: 1.0 → 0.7" in lines
    assert not any(line.startswith("  g: new code") or "g: weight" in line for line in lines)
    assert "  f: 1.000 → 0.625, 3 of 8 changed" in lines
    assert "  g: 0.500 → 0.500, 0 of 8 changed" in lines
    assert "total reward (mean): 1.500 → 1.125" in lines
    assert "advantage sign flips: 2 of 8 completions" in lines
    assert "errors in new: 5" in lines and "… and 2 more" in text
    assert len(lines) < 20


def test_dry_run_summary_before_any_step() -> None:
    empty = rft.DryRunResult(step=None, advantage_sign_changes=0)
    assert "no step recorded yet" in dry_run_summary(rft.JobConfig(), rft.JobConfig(), empty)[0]
