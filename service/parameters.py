"""Query and path parameters that several endpoints share, bounded by the Postgres columns
they are compared with: a number past a column's range used to fail inside the query (500)
instead of being refused (422) with the range."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

INT32_MAX = 2**31 - 1  # Postgres integer: step numbers
INT64_MAX = 2**63 - 1  # Postgres bigint: row ids used as cursors

StepFilter = Annotated[int | None, Query(ge=1, le=INT32_MAX, description="Only this step.")]
AfterStep = Annotated[
    int, Query(ge=0, le=INT32_MAX, description="Return the steps after this one.")
]
AfterRowId = Annotated[
    int, Query(ge=0, le=INT64_MAX, description="The next_cursor of the previous page.")
]
CheckpointStep = Annotated[int, Path(ge=0, le=INT32_MAX, description="The checkpoint's step.")]
FunctionFilter = Annotated[
    str | None, Query(max_length=100, description="Only this reward function (its name).")
]
