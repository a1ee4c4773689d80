"""Cursor pages that iterate: ``for job in client.jobs.list(): ...`` fetches pages as needed.

A list method is one call of :func:`get_api_list` (or :func:`get_async_api_list`): the path,
the page model, which query parameter carries the cursor and where the listing starts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from rft.models import Page
from rft.transport import AsyncTransport, RequestOptions, SyncTransport

Item = TypeVar("Item")

# How to read, from a page, the cursor of the page after it (None: it was the last).
NextCursor = Callable[[Page[Any]], str | None]


def server_cursor(page: Page[Any]) -> str | None:
    """The cursor the server gave, while it says there is more."""
    return page.next_cursor if page.has_more else None


class PageIterator(Generic[Item]):
    """Every item of a listing, one page request at a time (nothing is fetched until used)."""

    def __init__(
        self,
        fetch_page: Callable[[str | None], Page[Item]],
        *,
        start: str | None = None,
        next_cursor: NextCursor = server_cursor,
    ) -> None:
        self._fetch_page = fetch_page
        self._start = start
        self._next_cursor = next_cursor

    def pages(self) -> Iterator[Page[Item]]:
        cursor = self._start
        while True:
            page = self._fetch_page(cursor)
            yield page
            cursor = self._next_cursor(page)
            if cursor is None:
                return

    def __iter__(self) -> Iterator[Item]:
        for page in self.pages():
            yield from page.data

    def to_list(self) -> list[Item]:
        return list(self)


class AsyncPageIterator(Generic[Item]):
    def __init__(
        self,
        fetch_page: Callable[[str | None], Awaitable[Page[Item]]],
        *,
        start: str | None = None,
        next_cursor: NextCursor = server_cursor,
    ) -> None:
        self._fetch_page = fetch_page
        self._start = start
        self._next_cursor = next_cursor

    async def pages(self) -> AsyncIterator[Page[Item]]:
        cursor = self._start
        while True:
            page = await self._fetch_page(cursor)
            yield page
            cursor = self._next_cursor(page)
            if cursor is None:
                return

    async def __aiter__(self) -> AsyncIterator[Item]:
        async for page in self.pages():
            for item in page.data:
                yield item

    async def to_list(self) -> list[Item]:
        return [item async for item in self]


def _page_options(
    path: str, cursor_param: str, cursor: str | None, params: Mapping[str, Any] | None
) -> RequestOptions:
    # A None value (no cursor yet, a filter not given) is left out of the query.
    return RequestOptions("GET", path, params={cursor_param: cursor, **(params or {})})


def get_api_list(
    transport: SyncTransport,
    path: str,
    *,
    page: type[Page[Item]],
    cursor_param: str = "after",
    start: str | None = None,
    params: Mapping[str, Any] | None = None,
    next_cursor: NextCursor = server_cursor,
) -> PageIterator[Item]:
    """The items of the paged listing at ``path``, each page read as ``page`` (``Page[Model]``).

    Each request sends the cursor as the ``cursor_param`` query parameter (``after`` for an id
    or opaque cursor, ``after_step`` for a step number): ``start`` first (None: from the
    beginning), then what ``next_cursor`` reads from the page before, until it gives None.
    ``params`` (filters, page size) ride on every request.
    """

    def fetch(cursor: str | None) -> Page[Item]:
        response = transport.request(_page_options(path, cursor_param, cursor, params))
        return page.model_validate(response.json())

    return PageIterator(fetch, start=start, next_cursor=next_cursor)


def get_async_api_list(
    transport: AsyncTransport,
    path: str,
    *,
    page: type[Page[Item]],
    cursor_param: str = "after",
    start: str | None = None,
    params: Mapping[str, Any] | None = None,
    next_cursor: NextCursor = server_cursor,
) -> AsyncPageIterator[Item]:
    """:func:`get_api_list` for the async client."""

    async def fetch(cursor: str | None) -> Page[Item]:
        response = await transport.request(_page_options(path, cursor_param, cursor, params))
        return page.model_validate(response.json())

    return AsyncPageIterator(fetch, start=start, next_cursor=next_cursor)
