"""Cursor pages: what every list endpoint returns."""

from __future__ import annotations

from typing import Generic, TypeVar

from pydantic import BaseModel

Item = TypeVar("Item")


class Page(BaseModel, Generic[Item]):
    data: list[Item]
    has_more: bool
    next_cursor: str | None = None
