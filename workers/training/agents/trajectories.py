"""A rollout turn by turn (TRL's messages with each call's record), the text a per-sample reward
scores, and a step's tool-use metrics."""

from __future__ import annotations

import collections
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sandbox.agent_api import ToolErrorKind, ToolOutcome


@dataclass
class CallRecord:
    """One tool call of a rollout, as the trajectory shows it."""

    tool: str
    arguments: Any
    outcome: ToolOutcome


def result_for_record(outcome: ToolOutcome) -> str:
    result = outcome.result
    return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)


def build_trajectory(
    messages: Sequence[dict[str, Any]],
    records: Sequence[CallRecord],
    *,
    truncated: bool,
    masked_tokens: int,
    known_tools: set[str],
) -> list[dict[str, Any]]:
    """A rollout turn by turn: TRL's messages, each tool result with its call's record."""
    pending = collections.deque(records)
    trajectory: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            turn: dict[str, Any] = {"role": "assistant", "content": _text(message.get("content"))}
            calls = [
                {
                    "name": (call.get("function") or {}).get("name", call.get("name", "")),
                    "arguments": (call.get("function") or {}).get("arguments"),
                }
                for call in message.get("tool_calls") or []
            ]
            if calls:
                turn["tool_calls"] = calls
            trajectory.append(turn)
        elif role == "tool":
            name = str(message.get("name", ""))
            record = pending.popleft() if pending and pending[0].tool == name else None
            entry: dict[str, Any] = {
                "role": "tool",
                "name": name,
                "content": _text(message.get("content")),
            }
            if record is not None:
                error = record.outcome.error
                entry["error"] = (
                    {"kind": error.kind.value, "message": error.message} if error else None
                )
                entry["duration_s"] = round(record.outcome.duration_s, 6)
            else:
                # TRL answered it without calling us: a tool the model invented, or arguments
                # that are not an object.
                kind = (
                    ToolErrorKind.BAD_ARGUMENTS
                    if name in known_tools
                    else ToolErrorKind.UNKNOWN_TOOL
                )
                entry["error"] = {"kind": kind.value, "message": entry["content"]}
                entry["duration_s"] = 0.0
            trajectory.append(entry)
    for record in pending:
        # Ran, but TRL dropped its result: the conversation would have passed
        # max_completion_length. The model never saw it; the environment's state did change.
        error = record.outcome.error
        trajectory.append(
            {
                "role": "tool",
                "name": record.tool,
                "content": "" if error else _text(result_for_record(record.outcome)),
                "error": {"kind": error.kind.value, "message": error.message} if error else None,
                "duration_s": round(record.outcome.duration_s, 6),
                "shown_to_model": False,
            }
        )
    if trajectory:
        last = trajectory[-1]
        # Ended on calls whose answers the model never saw: max_turns or the token budget
        # stopped it.
        unanswered = (last["role"] == "assistant" and bool(last.get("tool_calls"))) or (
            last.get("shown_to_model") is False
        )
        last["truncated"] = truncated or unanswered
        last["masked_tokens"] = masked_tokens
    return trajectory


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "") if isinstance(part, dict) else str(part) for part in content
        )
    return "" if content is None else str(content)


def final_answer(trajectory: Sequence[dict[str, Any]]) -> str:
    """The text of the rollout's last assistant turn: what a per-sample reward scores."""
    for message in reversed(trajectory):
        if message.get("role") == "assistant":
            return str(message.get("content", ""))
    return ""


def agent_metrics(trajectories: Sequence[Sequence[dict[str, Any]]]) -> dict[str, Any]:
    """A step's tool use: per rollout (calls, turns, truncated share) and per tool."""
    rollouts = max(1, len(trajectories))
    per_tool: dict[str, dict[str, Any]] = {}
    calls = turns = truncated = 0
    for trajectory in trajectories:
        turns += sum(1 for message in trajectory if message.get("role") == "assistant")
        truncated += bool(trajectory and trajectory[-1].get("truncated"))
        for message in trajectory:
            if message.get("role") != "tool":
                continue
            calls += 1
            stats = per_tool.setdefault(
                message["name"], {"calls": 0, "errors": 0, "duration_s": 0.0, "error_kinds": {}}
            )
            stats["calls"] += 1
            stats["duration_s"] += float(message.get("duration_s") or 0.0)
            error = message.get("error")
            if error:
                stats["errors"] += 1
                kinds = stats["error_kinds"]
                kinds[error["kind"]] = kinds.get(error["kind"], 0) + 1
    tools = {
        name: {
            "calls": stats["calls"],
            "errors": stats["errors"],
            "error_rate": stats["errors"] / stats["calls"],
            "mean_duration_s": stats["duration_s"] / stats["calls"],
            "error_kinds": stats["error_kinds"],
        }
        for name, stats in sorted(per_tool.items())
    }
    return {
        "tool_calls_per_rollout": calls / rollouts,
        "turns_per_rollout": turns / rollouts,
        "truncated_share": truncated / rollouts,
        "tools": tools,
    }
