"""Keeping a lease alive, and taking over from a worker that died.

A running (or pausing) job, and a running export, carries its worker's id and a heartbeat
(service.leases). The worker beats from a background thread (``Heartbeat``). Every worker
process runs a reaper that watches those rows; one whose heartbeat has not moved for a whole
lease, as timed by the reaper's own clock (so clock skew and database outages cannot fake a
death), goes back to the queue: a job resumes from its last checkpoint on whichever worker takes
it, a pausing one is paused (service.jobs.ownership.requeue); an export starts again, a few
times at most (service.exports.ownership.requeue). Each kind the reaper watches is a
``ReapedKind``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from service.db import after_commit, session_scope
from service.exports import ownership as export_ownership
from service.exports.repository import ExportRepository
from service.jobs import ownership
from service.jobs.heartbeats import HeartbeatSilence
from service.jobs.repository import JobRepository
from service.leases import ExpiredLease
from service.work_queue.queue import enqueue_export, enqueue_training
from workers.periodic import PeriodicThread

logger = logging.getLogger(__name__)


class Heartbeat(PeriodicThread):
    """Keeps a lease alive from a background thread while its worker works on what it holds."""

    def __init__(self, name: str, beat: Callable[[Session], None], interval_s: float) -> None:
        super().__init__(
            f"heartbeat-{name}", interval_s, self.beat, self._beat_failed, retried=SQLAlchemyError
        )
        self.name = name
        self._beat = beat

    def beat(self) -> None:
        with session_scope() as session:
            self._beat(session)

    def _beat_failed(self, exc: Exception) -> None:
        # The database is away; the reaper cannot act meanwhile either. Try again.
        logger.warning("heartbeat of %s failed: %s", self.name, exc)


class JobHeartbeat(Heartbeat):
    def __init__(self, job_id: str, worker_id: str, interval_s: float) -> None:
        super().__init__(
            job_id, lambda session: JobRepository(session).beat(job_id, worker_id), interval_s
        )


class ExportHeartbeat(Heartbeat):
    def __init__(self, export_id: str, worker_id: str, interval_s: float) -> None:
        super().__init__(
            export_id,
            lambda session: ExportRepository(session).beat(export_id, worker_id),
            interval_s,
        )


@dataclass(frozen=True)
class ReapedKind:
    """What the reaper watches of one kind of leased row (service.leases)."""

    name: str  # "job", "export": the logs say it
    # (id, heartbeat) of every row a worker holds.
    held_heartbeats: Callable[[Session], list[tuple[str, datetime | None]]]
    # Moves a row whose lease (of the given length) expired; whether it moved (False: someone
    # else ended or took it meanwhile).
    requeue_lost: Callable[[Session, str, ExpiredLease, float], bool]
    # Queued rows untouched for a while (locked), and the sending of one's message again (read
    # from the row now: it is sent once the transaction commits).
    queued_since: Callable[[Session, float], Sequence[Any]]
    send_again: Callable[[Any], Callable[[], None]]


def _requeue_lost_job(session: Session, job_id: str, claim: ExpiredLease, lease_s: float) -> bool:
    job = JobRepository(session).get_any_tenant(job_id)
    lost = job.worker_id if job is not None else None
    return ownership.requeue(
        session,
        job_id,
        claim,
        kind="worker_lost",
        why=f"worker {lost} stopped answering (no heartbeat for {lease_s:.0f} s)",
        then="the job resumes from its last checkpoint on another worker",
        data={"worker_id": lost},
    )


def _requeue_lost_export(
    session: Session, export_id: str, claim: ExpiredLease, lease_s: float
) -> bool:
    return export_ownership.requeue(
        session,
        export_id,
        claim,
        why=f"the worker building it stopped answering (no heartbeat for {lease_s:.0f} s)",
    )


JOBS = ReapedKind(
    name="job",
    held_heartbeats=lambda session: JobRepository(session).held_heartbeats(),
    requeue_lost=_requeue_lost_job,
    queued_since=lambda session, seconds: JobRepository(session).queued_since(seconds),
    send_again=lambda job: partial(enqueue_training, job.id, job.num_devices, job.num_nodes),
)
EXPORTS = ReapedKind(
    name="export",
    held_heartbeats=lambda session: ExportRepository(session).held_heartbeats(),
    requeue_lost=_requeue_lost_export,
    queued_since=lambda session, seconds: ExportRepository(session).queued_since(seconds),
    send_again=lambda export: partial(enqueue_export, export.id),
)


@dataclass
class LostWorkerReaper:
    lease_s: float
    queued_resend_after_s: float
    kinds: tuple[ReapedKind, ...] = (JOBS, EXPORTS)
    _silences: dict[str, HeartbeatSilence] = field(default_factory=dict)

    def sweep(self, now: float | None = None) -> list[str]:
        """One pass: requeue the rows whose lease ran out, re-send stale queue messages.
        Returns the requeued rows' ids."""
        now = time.monotonic() if now is None else now
        requeued = []
        for kind in self.kinds:
            requeued += self.requeue_lost(kind, now)
            self._resend_queued(kind)
        return requeued

    def requeue_lost(self, kind: ReapedKind, now: float) -> list[str]:
        """Requeue the rows of ``kind`` whose heartbeat stood still for a whole lease, timed
        by this reaper's clock from when it first saw that heartbeat."""
        silence = self._silences.setdefault(kind.name, HeartbeatSilence())
        with session_scope() as session:
            held = kind.held_heartbeats(session)
        silence.keep_only(row_id for row_id, _ in held)
        requeued = []
        for row_id, heartbeat in held:
            if silence.silent_for(row_id, heartbeat, now) < self.lease_s:
                continue
            with session_scope() as session:
                moved = kind.requeue_lost(session, row_id, ExpiredLease(heartbeat), self.lease_s)
            if moved:
                logger.warning("requeued %s %s: its worker was lost", kind.name, row_id)
                requeued.append(row_id)
            silence.forget(row_id)
        return requeued

    def _resend_queued(self, kind: ReapedKind) -> None:
        with session_scope() as session:
            for row in kind.queued_since(session, self.queued_resend_after_s):
                row.updated_at = datetime.now(UTC)
                after_commit(session, kind.send_again(row))


class ReaperThread(PeriodicThread):
    def __init__(self, reaper: LostWorkerReaper, interval_s: float) -> None:
        super().__init__(
            "lost-worker-reaper",
            interval_s,
            reaper.sweep,
            lambda _: logger.exception("reaper sweep failed; retrying"),
        )
        self.reaper = reaper
