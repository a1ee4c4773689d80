"""Every SQL statement on a job's event log (``job_events``)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sqlalchemy import func, select

from service.keyset import after_key
from service.models import Job, JobEvent
from service.repository import Repository
from service.server_paths import hide_paths_in, hide_server_paths

# First key of the per-job advisory lock that orders event ids (the second is the job's hash).
EVENT_ORDER_LOCK_CLASS = 0x5246_5401


class EventRepository(Repository):
    def add_event(
        self,
        job_id: str,
        kind: str,
        message: str,
        *,
        step: int | None = None,
        data: dict[str, Any] | None = None,
    ) -> None:
        # Readers follow a job's events by id (`id > cursor`). Ids come from a sequence, so two
        # transactions adding events to one job could commit in the other order and a reader
        # could pass the later id before the earlier one is visible, skipping it for good. A
        # per-job lock held until commit makes each job's ids visible in id order.
        # Lock order: the job row first (KEY SHARE, what the event's foreign key takes anyway),
        # then the event lock. Taking the event lock first deadlocked against a transaction
        # that holds the row FOR UPDATE and then adds an event (a cancel just as the worker
        # recorded its first event: one of them failed with a 503).
        self.session.execute(
            select(Job.id).where(Job.id == job_id).with_for_update(read=True, key_share=True)
        )
        self.session.execute(
            select(func.pg_advisory_xact_lock(EVENT_ORDER_LOCK_CLASS, func.hashtext(job_id)))
        )
        self.session.add(
            JobEvent(
                job_id=job_id,
                kind=kind,
                message=hide_server_paths(message),
                step=step,
                data=hide_paths_in(data or {}),
            )
        )

    def list_events(self, job_id: str, *, after_id: int, limit: int) -> list[JobEvent]:
        statement = select(JobEvent).where(JobEvent.job_id == job_id)
        return list(self.session.scalars(after_key(statement, JobEvent.id, after_id, limit)))

    def list_events_of_kinds(self, job_id: str, kinds: Collection[str]) -> list[JobEvent]:
        """A job's events of these kinds, in id order."""
        return list(
            self.session.scalars(
                select(JobEvent)
                .where(JobEvent.job_id == job_id, JobEvent.kind.in_(list(kinds)))
                .order_by(JobEvent.id)
            )
        )
