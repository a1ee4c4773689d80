"""Joining a job's placement (workers.placement), against the real database: seats in order,
no seat twice, none past num_nodes or for a job that is not queued, and a placement left by
workers that are gone is replaced (and said so) rather than waited on forever."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import delete, select, update

from service.db import session_scope
from service.events.repository import EventRepository
from service.models import Job, JobNode
from service.settings import get_settings
from workers import placement


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, ...]]:
    """What placement queues (job id, devices, messages): the queue is not under test here."""
    queued: list[tuple[object, ...]] = []
    monkeypatch.setattr(placement, "enqueue_training", lambda *args: queued.append(args))
    return queued


@pytest.fixture
def two_node_job(job_id: str) -> Iterator[str]:
    with session_scope() as session:
        session.execute(update(Job).where(Job.id == job_id).values(status="queued", num_nodes=2))
    yield job_id
    # Not left queued: the session's worker would take it (the reaper re-sends the messages
    # of jobs queued too long) and wait for a second node that never comes.
    with session_scope() as session:
        session.execute(delete(JobNode).where(JobNode.job_id == job_id))
        session.execute(update(Job).where(Job.id == job_id).values(status="cancelled"))


def nodes(job_id: str) -> list[tuple[int, str, str]]:
    with session_scope() as session:
        rows = session.scalars(
            select(JobNode).where(JobNode.job_id == job_id).order_by(JobNode.node_rank)
        )
        return [(row.node_rank, row.worker_id, row.placement_id) for row in rows]


def test_workers_take_seats_in_order_and_never_more_than_num_nodes(two_node_job: str) -> None:
    settings = get_settings()
    first = placement._join(two_node_job, "w1", settings)
    assert first is not None and first.node_rank == 0
    assert placement._join(two_node_job, "w1", settings) is None  # no second seat
    second = placement._join(two_node_job, "w2", settings)
    assert second is not None and second.node_rank == 1
    assert second.placement_id == first.placement_id
    assert placement._join(two_node_job, "w3", settings) is None  # full: an extra message
    assert [(rank, worker) for rank, worker, _ in nodes(two_node_job)] == [(0, "w1"), (1, "w2")]


def test_a_job_that_is_not_queued_takes_nobody(two_node_job: str) -> None:
    with session_scope() as session:
        session.execute(update(Job).where(Job.id == two_node_job).values(status="cancelled"))
    assert placement._join(two_node_job, "w1", get_settings()) is None
    assert nodes(two_node_job) == []


def test_a_placement_left_by_workers_that_are_gone_is_replaced_and_said_so(
    two_node_job: str, sent: list[tuple[object, ...]]
) -> None:
    settings = get_settings()
    old = placement._join(two_node_job, "gone", settings)
    assert old is not None
    too_long = settings.placement_timeout_s + settings.worker_lease_s + 5
    with session_scope() as session:
        session.execute(
            update(JobNode)
            .where(JobNode.job_id == two_node_job)
            .values(joined_at=datetime.now(UTC) - timedelta(seconds=too_long))
        )
    fresh = placement._join(two_node_job, "w1", settings)
    assert fresh is not None and fresh.node_rank == 0
    assert fresh.placement_id != old.placement_id
    assert nodes(two_node_job) == [(0, "w1", fresh.placement_id)]
    with session_scope() as session:
        events = EventRepository(session).list_events(two_node_job, after_id=0, limit=50)
        kinds = [event.kind for event in events]
    assert "placement_timeout" in kinds
    # The gone worker's message was spent: one message is queued again in its place.
    assert sent == [(two_node_job, 1, 1)]


def test_node_0_gives_up_a_half_placement_and_says_why(
    two_node_job: str, sent: list[tuple[object, ...]]
) -> None:
    """Only one of two workers was free within the timeout: node 0 abandons the placement
    (``_wait_until_placed`` calls ``_give_up`` at its deadline), the job stays queued with
    nothing run on half of it, and node 0's spent message is queued again."""
    settings = get_settings()
    seat = placement._join(two_node_job, "w1", settings)
    assert seat is not None
    placement._give_up(seat, settings)
    assert nodes(two_node_job) == []
    with session_scope() as session:
        job = session.get(Job, two_node_job)
        assert job is not None and (job.status, job.steps_completed) == ("queued", 0)
        events = EventRepository(session).list_events(two_node_job, after_id=0, limit=50)
    timeout = next(event for event in events if event.kind == "placement_timeout")
    assert "only 1 of 2 workers" in timeout.message
    assert sent == [(two_node_job, 1, 1)]
