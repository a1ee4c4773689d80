"""Helpers for reward functions that call remote judges: ``from rft_reward import retry,
rate_limited``.

Shipped into every reward sandbox (standard library only), so reward code imports it like any
module. Both decorators work on plain and ``async def`` functions, per-sample or batch::

    from rft_reward import rate_limited, retry

    @retry(attempts=4, base_delay_s=0.5)  # transient API errors: back off and try again
    @rate_limited(5, key="judge")  # at most 5 judge calls per second, shared by every
    async def judge(prompt, completion, example):  # function of the job using key "judge"
        ...

Retries and waits count against the sample's time limit (and the call's): a sample that runs
out of time loses only its own score.
"""

from __future__ import annotations

import functools
import inspect
import random
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["RateLimiter", "rate_limited", "retry", "retry_delay"]

F = TypeVar("F", bound=Callable[..., Any])


def retry_delay(
    error: BaseException, attempt: int, base_delay_s: float, max_delay_s: float
) -> float:
    """Seconds to wait before retry number `attempt` (1-based) after `error`.

    A server's own hint wins: an exception attribute ``retry_after`` (seconds), or a
    ``Retry-After`` header (seconds) on ``error.response`` as httpx, requests and the OpenAI
    client attach it. Otherwise exponential backoff with full jitter, capped at max_delay_s.
    """
    hint = getattr(error, "retry_after", None)
    if hint is None:
        headers = getattr(getattr(error, "response", None), "headers", None)
        if headers is not None:
            try:
                hint = headers.get("retry-after")
            except Exception:
                hint = None
    try:
        if hint is not None:
            return min(max(float(hint), 0.0), max_delay_s)
    except (TypeError, ValueError):
        pass  # an HTTP date, or garbage: fall back to backoff
    return random.uniform(0, min(max_delay_s, base_delay_s * 2 ** (attempt - 1)))


def retry(
    function: F | None = None,
    *,
    attempts: int = 4,
    base_delay_s: float = 0.5,
    max_delay_s: float = 8.0,
    on: type[BaseException] | tuple[type[BaseException], ...] = Exception,
) -> Any:
    """Call again on `on` exceptions, up to `attempts` calls in all, with backoff between.

    Use as ``@retry`` or ``@retry(attempts=..., on=(TimeoutError, ConnectionError))``. The last
    error is raised when every attempt fails. Time limits are not exceptions of `on`: a sample
    out of time stops retrying.
    """
    if attempts < 1:
        raise ValueError("attempts must be at least 1")

    def decorate(wrapped: F) -> F:
        if inspect.iscoroutinefunction(wrapped):

            @functools.wraps(wrapped)
            async def call_async(*args: Any, **kwargs: Any) -> Any:
                for attempt in range(1, attempts + 1):
                    try:
                        return await wrapped(*args, **kwargs)
                    except on as error:
                        if attempt == attempts:
                            raise
                        await _sleep_async(retry_delay(error, attempt, base_delay_s, max_delay_s))
                raise AssertionError("unreachable")

            return call_async  # type: ignore[return-value]

        @functools.wraps(wrapped)
        def call(*args: Any, **kwargs: Any) -> Any:
            for attempt in range(1, attempts + 1):
                try:
                    return wrapped(*args, **kwargs)
                except on as error:
                    if attempt == attempts:
                        raise
                    time.sleep(retry_delay(error, attempt, base_delay_s, max_delay_s))
            raise AssertionError("unreachable")

        return call  # type: ignore[return-value]

    return decorate(function) if function is not None else decorate


class RateLimiter:
    """At most `per_s` calls start per second, evenly spaced; shared by threads and tasks."""

    def __init__(self, per_s: float) -> None:
        if not per_s > 0:
            raise ValueError("per_s must be positive")
        self.interval = 1.0 / per_s
        self._next_start = 0.0
        self._lock = threading.Lock()

    def reserve(self) -> float:
        """Take the next start slot; return how long to wait for it."""
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next_start)
            self._next_start = start + self.interval
            return start - now

    def wait(self) -> None:
        time.sleep(self.reserve())

    async def wait_async(self) -> None:
        await _sleep_async(self.reserve())


async def _sleep_async(seconds: float) -> None:
    # Imported on first use: every sandbox process loads this module at start, and importing
    # asyncio costs ~30 ms, paid by each start of a job that never awaits.
    import asyncio

    await asyncio.sleep(seconds)


_shared_limiters: dict[str, RateLimiter] = {}
_shared_lock = threading.Lock()


def rate_limited(per_s: float, *, key: str | None = None) -> Callable[[F], F]:
    """Let at most `per_s` calls of the decorated function start per second.

    Functions decorated with the same `key` share one budget (one judge API used by several
    reward functions of a job); the budget is per sandbox process.
    """
    limiter = RateLimiter(per_s)
    if key is not None:
        with _shared_lock:
            limiter = _shared_limiters.setdefault(key, limiter)

    def decorate(wrapped: F) -> F:
        if inspect.iscoroutinefunction(wrapped):

            @functools.wraps(wrapped)
            async def call_async(*args: Any, **kwargs: Any) -> Any:
                await limiter.wait_async()
                return await wrapped(*args, **kwargs)

            return call_async  # type: ignore[return-value]

        @functools.wraps(wrapped)
        def call(*args: Any, **kwargs: Any) -> Any:
            limiter.wait()
            return wrapped(*args, **kwargs)

        return call  # type: ignore[return-value]

    return decorate
