"""Engine and sessions. A request's session commits when the endpoint returns, else rolls back."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Annotated

from fastapi import Depends
from sqlalchemy import Engine, create_engine
from sqlalchemy.orm import Session, sessionmaker

from service.settings import get_settings

AFTER_COMMIT_KEY = "rft_after_commit"


def to_sqlalchemy_url(url: str) -> str:
    """Accept plain postgres:// URLs (as pgserver and most hosts print them) and pick psycopg 3."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def to_libpq_url(url: str) -> str:
    """The other way round, for a raw psycopg connection (the workers' LISTEN)."""
    for prefix in ("postgresql+psycopg://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix) :]
    return url


@lru_cache
def get_engine() -> Engine:
    settings = get_settings()
    return create_engine(
        to_sqlalchemy_url(settings.require_database_url()),
        pool_pre_ping=True,
        pool_size=settings.db_pool_size,
        max_overflow=settings.db_max_overflow,
        pool_timeout=settings.db_pool_timeout_s,
    )


@lru_cache
def get_sessionmaker() -> sessionmaker[Session]:
    return sessionmaker(get_engine(), expire_on_commit=False)


def after_commit(session: Session, action: Callable[[], None]) -> None:
    """Run ``action`` once the session's transaction has committed (e.g. queue a Celery task).

    Queuing inside the transaction could start a worker on a row it cannot see yet, or on a
    row that is then rolled back.
    """
    session.info.setdefault(AFTER_COMMIT_KEY, []).append(action)


@contextmanager
def session_scope() -> Iterator[Session]:
    """A unit of work: commit on success, roll back on error, then run after-commit actions."""
    session = get_sessionmaker()()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        actions = session.info.pop(AFTER_COMMIT_KEY, [])
        session.close()
    # Reached only after a successful commit.
    for action in actions:
        action()


def end_transaction(session: Session) -> None:
    """Commit what the request did so far and hand its connection back to the pool: for an
    endpoint that goes on with slow work needing no database (the session starts a new
    transaction if it is used again). Services leave this to their callers."""
    session.commit()


def get_session() -> Iterator[Session]:
    with session_scope() as session:
        yield session


# scope="function": commit before the response is sent, so a client that reads right after a
# write sees it, and a failed commit becomes an error response rather than a lost write.
SessionDep = Annotated[Session, Depends(get_session, scope="function")]
