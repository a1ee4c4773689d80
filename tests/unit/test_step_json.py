"""The steps page written from rows equals, once parsed, what pydantic makes of Page[Step]."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from service.jobs.schemas import Step
from service.jobs.step_json import steps_page_json
from service.pagination import Page, paginate

FUNCTIONS = {
    "fmt": {
        "version": 2,
        "weight": 0.5,
        "mean": 1e-05,
        "std": None,
        "scored": 7,
        "errors": 1,
        "error_rate": 0.125,
    },
    "len": {
        "version": 1,
        "weight": 1.0,
        "mean": None,
        "std": None,
        "scored": 0,
        "errors": 8,
        "error_rate": 1.0,
    },
}


def row(step: int, **values: Any) -> dict[str, Any]:
    return {
        "job_id": "job_x",
        "step": step,
        "config_version": 2,
        "reward_mean": 0.123456789012345,
        "reward_std": None,
        "loss": -3.5e-09,
        "kl": 0.0,
        "learning_rate": 1e-05,
        "duration_s": 12.0,
        "frac_reward_zero_std": 0.75,
        "reward_functions": FUNCTIONS,
        "created_at": datetime(2026, 11, 21, 7, 30, 1, 250000, tzinfo=UTC),
    } | values


ROWS = [
    row(1),
    row(2, reward_mean=float("nan"), loss=float("inf"), kl=-float("inf")),
    row(3, created_at=datetime(2026, 11, 21, 8, 0, 0, tzinfo=timezone(timedelta(hours=2)))),
    row(4, reward_mean=1e300, reward_std=5e-324, reward_functions={}),
    row(5, frac_reward_zero_std=None),
    row(6, agent_metrics={"tool_calls_per_rollout": 1.5, "tools": {"add": {"calls": 3}}}),
]


def as_stored(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """reward_functions and agent_metrics as Postgres hands them to list_steps: JSON text
    (agent_metrics null for single-answer jobs)."""
    return [
        r
        | {
            "reward_functions": json.dumps(r["reward_functions"]),
            "agent_metrics": None
            if r.get("agent_metrics") is None
            else json.dumps(r["agent_metrics"]),
        }
        for r in rows
    ]


@pytest.mark.parametrize("limit", [1, 4, 5, 10])
def test_same_document_as_pydantic(limit: int) -> None:
    expected = paginate(ROWS, limit, Step, lambda item: item.step)
    written = steps_page_json(as_stored(ROWS), limit)  # type: ignore[arg-type]
    assert json.loads(written) == json.loads(Page[Step].model_validate(expected).model_dump_json())
    assert list(json.loads(written)["data"][0]) == list(Step.model_fields)


def test_empty_page() -> None:
    assert json.loads(steps_page_json([], 10)) == {
        "data": [],
        "has_more": False,
        "next_cursor": None,
    }
