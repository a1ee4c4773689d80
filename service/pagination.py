from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any, Generic, TypeVar

from fastapi import Query
from pydantic import BaseModel

Item = TypeVar("Item")
Model = TypeVar("Model", bound=BaseModel)

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000

PageLimit = Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE, description="Items per page.")]


class Page(BaseModel, Generic[Item]):
    """One page of a list; pass ``next_cursor`` as ``after`` to get the next one."""

    data: list[Item]
    has_more: bool
    next_cursor: str | None = None


def paginate(
    rows: Sequence[Any], limit: int, schema: type[Model], cursor: Callable[[Model], object]
) -> Page[Model]:
    """A page from ``limit + 1`` rows: the extra row only says whether more exist."""
    items = [schema.model_validate(row) for row in rows[:limit]]
    has_more = len(rows) > limit
    return Page[Model](
        data=items, has_more=has_more, next_cursor=str(cursor(items[-1])) if has_more else None
    )
