"""`GET /steps` as JSON text built straight from the rows.

A long run's graphs read up to 1000 steps at a time, often. Going through dicts (psycopg
decoding each row's jsonb) and pydantic (`Page[Step]`) cost ~20 ms of a 25 ms request; this
writes the same document from the rows, passing each row's `reward_functions` through as the
JSON text Postgres holds. Same fields in the same order as `Step`; values equal once parsed
(pydantic's float and timestamp spellings may differ, e.g. 1e-5 vs 1e-05).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import RowMapping

# Step's fields before reward_functions and created_at, in the schema's order.
NUMBER_FIELDS = (
    "step",
    "config_version",
    "reward_mean",
    "reward_std",
    "loss",
    "kl",
    "learning_rate",
    "duration_s",
    "frac_reward_zero_std",
)


def _number(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, float):
        # As pydantic writes them: NaN and infinities have no JSON spelling, so null.
        return repr(value) if math.isfinite(value) else "null"
    return str(int(value))


def _timestamp(value: datetime) -> str:
    text = value.isoformat()  # keeps the value's own offset, as pydantic does
    return f'"{text[:-6]}Z"' if text.endswith("+00:00") else f'"{text}"'


def step_json(row: RowMapping | dict[str, Any]) -> str:
    """One step; ``row["reward_functions"]``, ``row["agent_metrics"]`` (null or missing
    for a single-answer job), ``row["metrics"]`` (null or missing for a GRPO job) and
    ``row["async_generation"]`` (null or missing without async generation) are JSON text
    (list_steps)."""
    numbers = ",".join(f'"{name}":{_number(row[name])}' for name in NUMBER_FIELDS)
    agent_metrics = row.get("agent_metrics")
    metrics = row.get("metrics")
    async_generation = row.get("async_generation")
    return (
        f'{{{numbers},"reward_functions":{row["reward_functions"]},'
        f'"agent_metrics":{"null" if agent_metrics is None else agent_metrics},'
        f'"metrics":{"null" if metrics is None else metrics},'
        f'"async_generation":{"null" if async_generation is None else async_generation},'
        f'"created_at":{_timestamp(row["created_at"])}}}'
    )


def steps_page_json(rows: Sequence[RowMapping], limit: int) -> str:
    """A `Page[Step]` from ``limit + 1`` rows: the extra row only says whether more exist."""
    page = rows[:limit]
    has_more = len(rows) > limit
    cursor = json.dumps(str(page[-1]["step"])) if has_more else "null"
    items = ",".join(step_json(row) for row in page)
    more = "true" if has_more else "false"
    return f'{{"data":[{items}],"has_more":{more},"next_cursor":{cursor}}}'
