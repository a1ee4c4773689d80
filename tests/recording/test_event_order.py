"""Event ids of one job become visible in id order, so `id > cursor` readers never skip one."""

from __future__ import annotations

import threading
import time

from sqlalchemy import select, text

from service.db import session_scope
from service.events.repository import EventRepository
from service.models import Job


def waiting_for_advisory_lock() -> int:
    with session_scope() as session:
        return int(
            session.scalar(
                text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
            )
            or 0
        )


def test_a_second_writer_waits_for_the_first_to_commit(job_id: str) -> None:
    later_ids: list[int] = []

    def second_writer() -> None:
        with session_scope() as session:
            repository = EventRepository(session)
            repository.add_event(job_id, "second", "added while the first is open")
            session.flush()
            later_ids.extend(
                event.id for event in repository.list_events(job_id, after_id=0, limit=10)
            )

    with session_scope() as first:
        EventRepository(first).add_event(job_id, "first", "open transaction")
        first.flush()
        writer = threading.Thread(target=second_writer)
        writer.start()
        # The second writer must be blocked on the job's event lock, not done already.
        deadline = time.monotonic() + 30
        while waiting_for_advisory_lock() == 0:
            assert writer.is_alive(), "the second writer did not wait for the first"
            assert time.monotonic() < deadline
            time.sleep(0.02)
    writer.join(timeout=30)

    with session_scope() as session:
        events = EventRepository(session).list_events(job_id, after_id=0, limit=10)
    assert [event.kind for event in events] == ["first", "second"]  # id order = commit order
    assert later_ids == [event.id for event in events]


def waiting_for_any_lock() -> int:
    with session_scope() as session:
        return int(session.scalar(text("SELECT count(*) FROM pg_locks WHERE NOT granted")) or 0)


def test_an_event_added_under_the_row_lock_never_deadlocks_with_a_plain_event(
    job_id: str,
) -> None:
    """A cancel holds the job row FOR UPDATE and then adds an event; meanwhile the worker adds
    an event of its own (its first one at start). Both must commit, in lock order."""
    failures: list[BaseException] = []

    def plain_writer() -> None:
        try:
            with session_scope() as session:
                EventRepository(session).add_event(job_id, "plain", "the worker's event")
        except BaseException as exc:
            failures.append(exc)

    with session_scope() as holder:
        holder.execute(select(Job).where(Job.id == job_id).with_for_update())
        writer = threading.Thread(target=plain_writer)
        writer.start()
        deadline = time.monotonic() + 30
        while waiting_for_any_lock() == 0:
            assert writer.is_alive(), "the plain writer did not wait for the row lock"
            assert time.monotonic() < deadline
            time.sleep(0.02)
        # Taking the event lock before the row lock, the plain writer would now hold it and
        # this add_event would close a cycle: Postgres aborts one of the two.
        EventRepository(holder).add_event(job_id, "after-row-lock", "the cancel's event")
        holder.flush()
    writer.join(timeout=30)

    assert not failures, failures
    with session_scope() as session:
        events = EventRepository(session).list_events(job_id, after_id=0, limit=10)
    assert [event.kind for event in events] == ["after-row-lock", "plain"]
