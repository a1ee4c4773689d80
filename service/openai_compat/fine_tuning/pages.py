"""OpenAI's list pages (data, has_more, first_id, last_id)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from pydantic import BaseModel

from service.openai_compat.files.schemas import OpenAIPage

Item = TypeVar("Item", bound=BaseModel)


def page(items: Sequence[Item], has_more: bool) -> OpenAIPage[Item]:
    return OpenAIPage[Item](
        data=list(items),
        has_more=has_more,
        first_id=getattr(items[0], "id", None) if items else None,
        last_id=getattr(items[-1], "id", None) if items else None,
    )


def page_after(items: list[Item], limit: int, after: str | None) -> OpenAIPage[Item]:
    """One page of an ordered list, after the item whose id is ``after``."""
    if after is not None:
        ids = [getattr(item, "id", None) for item in items]
        items = items[ids.index(after) + 1 :] if after in ids else []
    return page(items[:limit], len(items) > limit)
