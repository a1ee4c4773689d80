"""Keyset pagination for the lists shown newest first (jobs, datasets): ordered by
(created_at, id) descending, each page starting just after the previous page's last row, so a
deep page costs what the first one does and rows added meanwhile shift nothing."""

from __future__ import annotations

from typing import TypeVar

from sqlalchemy import Select, tuple_

from service.models import Dataset, Job

Row = TypeVar("Row", Job, Dataset)


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
