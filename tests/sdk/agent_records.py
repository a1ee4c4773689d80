"""What the server sends for an agent job: a completion with its trajectory (a tool answering,
a tool timing out, the rollout cut off) and a step with agent metrics. Shared by the SDK and
dashboard tests."""

from typing import Any

TRAJECTORY: list[dict[str, Any]] = [
    {
        "role": "assistant",
        "content": "Let me compute.",
        "tool_calls": [{"name": "multiply", "arguments": {"a": 6, "b": 7}}],
    },
    {"role": "tool", "name": "multiply", "content": "42", "error": None, "duration_s": 0.01},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"name": "fetch_length", "arguments": {"url": "x"}}],
    },
    {
        "role": "tool",
        "name": "fetch_length",
        "content": "",
        "error": {"kind": "timeout", "message": "ran past 30 s"},
        "duration_s": 30.0,
    },
    # The worker marks the last message (and counts its masked tokens, unknown to the SDK).
    {"role": "assistant", "content": "It is 42.", "truncated": True, "masked_tokens": 0},
]

COMPLETION = {
    "id": 7,
    "step": 2,
    "config_version": 1,
    "prompt_index": 0,
    "group_position": 1,
    "dataset_index": 3,
    "prompt": [{"role": "user", "content": "What is 6 x 7?"}],
    "completion": "It is 42.",
    "scores": {"correct": 1.0},
    "total": 1.0,
    "advantage": 0.5,
    "token_count": 30,
    "trajectory": TRAJECTORY,
}

STEP = {
    "step": 2,
    "config_version": 1,
    "reward_mean": 0.5,
    "reward_std": 0.1,
    "loss": 0.01,
    "kl": 0.0,
    "learning_rate": 1e-5,
    "duration_s": 3.0,
    "reward_functions": {},
    "agent_metrics": {
        "tool_calls_per_rollout": 1.5,
        "turns_per_rollout": 2.5,
        "truncated_share": 0.25,
        "tools": {
            "multiply": {"calls": 6, "errors": 0, "error_rate": 0.0, "mean_duration_s": 0.01},
            "fetch_length": {
                "calls": 4,
                "errors": 1,
                "error_rate": 0.25,
                "mean_duration_s": 7.5,
                "error_kinds": {"timeout": 1},
            },
        },
    },
    "created_at": "2026-11-25T00:00:00Z",
}
