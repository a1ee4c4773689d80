"""Keyset pagination: each page starts just after the previous page's last row, so a deep page
costs what the first one does and rows added meanwhile shift nothing. Lists shown newest first
(jobs, datasets) go by (created_at, id) descending; a job's own records (events, evaluations,
reward logs and errors) by one ascending key."""

from __future__ import annotations

from typing import TypeVar

from sqlalchemy import Select, tuple_
from sqlalchemy.orm import InstrumentedAttribute

from service.models import Dataset, Job

Row = TypeVar("Row", Job, Dataset)
Record = TypeVar("Record")


def newest_first(
    statement: Select[Row], table: type[Row], after: Row | None, limit: int
) -> Select[Row]:
    """``limit`` of ``statement``'s rows, newest first, from just after ``after`` (the previous
    page's last row; None: from the newest)."""
    if after is not None:
        statement = statement.where(
            tuple_(table.created_at, table.id) < tuple_(after.created_at, after.id)
        )
    return statement.order_by(table.created_at.desc(), table.id.desc()).limit(limit)


def after_key(
    statement: Select[Record], key: InstrumentedAttribute[int], after: int, limit: int
) -> Select[Record]:
    """``limit`` of ``statement``'s rows in ``key`` order, from just after ``after``."""
    return statement.where(key > after).order_by(key).limit(limit)
