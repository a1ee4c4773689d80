from __future__ import annotations

from typing import Annotated, Generic, TypeVar

from fastapi import Query
from pydantic import BaseModel

Item = TypeVar("Item")

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000

PageLimit = Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE, description="Items per page.")]


class Page(BaseModel, Generic[Item]):
    """One page of a list; pass ``next_cursor`` as ``after`` to get the next one."""

    data: list[Item]
    has_more: bool
    next_cursor: str | None = None
