"""Cursor pages that iterate: ``for job in client.jobs.list(): ...`` fetches pages as needed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Generic, TypeVar

from rft.models import Page

Item = TypeVar("Item")


class PageIterator(Generic[Item]):
    """Every item of a listing, one page request at a time (nothing is fetched until used)."""

    def __init__(self, fetch_page: Callable[[str | None], Page[Item]]) -> None:
        self._fetch_page = fetch_page

    def pages(self) -> Iterator[Page[Item]]:
        cursor: str | None = None
        while True:
            page = self._fetch_page(cursor)
            yield page
            if not page.has_more or page.next_cursor is None:
                return
            cursor = page.next_cursor

    def __iter__(self) -> Iterator[Item]:
        for page in self.pages():
            yield from page.data

    def to_list(self) -> list[Item]:
        return list(self)


class AsyncPageIterator(Generic[Item]):
    def __init__(self, fetch_page: Callable[[str | None], Awaitable[Page[Item]]]) -> None:
        self._fetch_page = fetch_page

    async def pages(self) -> AsyncIterator[Page[Item]]:
        cursor: str | None = None
        while True:
            page = await self._fetch_page(cursor)
            yield page
            if not page.has_more or page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def __aiter__(self) -> AsyncIterator[Item]:
        async for page in self.pages():
            for item in page.data:
                yield item

    async def to_list(self) -> list[Item]:
        return [item async for item in self]
