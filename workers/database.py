"""How a worker talks to the database: one transaction at a time, retried while Postgres is
away. The statements themselves live in the repositories (service.*.repository) and the
job's moves in service.jobs.ownership; a worker only says what to run and what it is for."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from service.db import session_scope

logger = logging.getLogger(__name__)

T = TypeVar("T")


def with_database_retries(
    action: Callable[[], T], *, what: str, give_up_after_s: float = 600.0
) -> T:
    """Run ``action``, retrying while the database is unreachable (a restart, a failover).

    A training run is worth far more than a few minutes of waiting for Postgres to return.
    """
    deadline = time.monotonic() + give_up_after_s
    delay = 0.2
    while True:
        try:
            return action()
        except OperationalError as exc:
            if time.monotonic() > deadline:
                raise
            logger.warning("%s: database unavailable (%s); retrying in %.1fs", what, exc, delay)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


def in_transaction(action: Callable[[Session], T], *, what: str) -> T:
    """``action`` in one transaction (committed, then its after-commit actions run), the
    whole transaction retried while the database is unreachable."""

    def attempt() -> T:
        with session_scope() as session:
            return action(session)

    return with_database_retries(attempt, what=what)
