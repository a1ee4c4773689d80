"""Who runs a job, and taking over from a worker that died.

A running job carries its worker's id and a heartbeat. Every worker process runs a reaper
that watches running jobs; a job whose heartbeat has not moved for a whole lease, as timed
by the reaper's own clock (so clock skew and database outages cannot fake a death), goes back
to the queue and resumes from its last checkpoint on whichever worker takes it.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, select, update
from sqlalchemy.exc import SQLAlchemyError

from service.db import after_commit, session_scope
from service.jobs.heartbeats import HeartbeatSilence
from service.jobs.repository import JobRepository
from service.jobs.service import transition
from service.jobs.status import JobStatus
from service.models import Job, JobNode
from workers.queue import enqueue_training

logger = logging.getLogger(__name__)


class JobHeartbeat:
    """Keeps a job's lease alive from a background thread while its worker trains."""

    def __init__(self, job_id: str, worker_id: str, interval_s: float) -> None:
        self.job_id = job_id
        self.worker_id = worker_id
        self.interval_s = interval_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{job_id}", daemon=True)

    def __enter__(self) -> JobHeartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)

    def beat(self) -> None:
        with session_scope() as session:
            session.execute(
                update(Job)
                .where(Job.id == self.job_id, Job.worker_id == self.worker_id)
                .values(heartbeat_at=datetime.now(UTC))
            )

    def _run(self) -> None:
        while not self._stopped.wait(self.interval_s):
            try:
                self.beat()
            except SQLAlchemyError as exc:
                # The database is away; the reaper cannot act meanwhile either. Try again.
                logger.warning("heartbeat of %s failed: %s", self.job_id, exc)


@dataclass
class LostWorkerReaper:
    lease_s: float
    queued_resend_after_s: float
    _silence: HeartbeatSilence = field(default_factory=HeartbeatSilence)

    def sweep(self, now: float | None = None) -> list[str]:
        """One pass: requeue jobs whose lease ran out, re-send stale queue messages."""
        now = time.monotonic() if now is None else now
        requeued = self._requeue_lost(now)
        self._resend_queued()
        return requeued

    def _requeue_lost(self, now: float) -> list[str]:
        with session_scope() as session:
            running = session.execute(
                select(Job.id, Job.heartbeat_at).where(Job.status == JobStatus.RUNNING.value)
            ).all()
        self._silence.keep_only(job_id for job_id, _ in running)
        expired = [
            (job_id, heartbeat)
            for job_id, heartbeat in running
            if self._silence.silent_for(job_id, heartbeat, now) >= self.lease_s
        ]
        requeued = []
        for job_id, heartbeat in expired:
            if self._requeue(job_id, heartbeat):
                requeued.append(job_id)
            self._silence.forget(job_id)
        return requeued

    def _requeue(self, job_id: str, heartbeat: datetime | None) -> bool:
        with session_scope() as session:
            job = JobRepository(session).get_any_tenant(job_id, for_update=True)
            # Re-checked under the lock: the owner may have beaten or finished meanwhile.
            if (
                job is None
                or job.status != JobStatus.RUNNING.value
                or job.heartbeat_at != heartbeat
            ):
                return False
            lost = job.worker_id
            transition(session, job, JobStatus.QUEUED)
            job.worker_id = None
            JobRepository(session).add_event(
                job.id,
                "worker_lost",
                f"worker {lost} stopped answering (no heartbeat for {self.lease_s:.0f} s); "
                f"the job resumes from its last checkpoint on another worker",
                step=job.steps_completed,
                data={"worker_id": lost},
            )
            # A job over several machines is placed afresh (all nodes again).
            session.execute(delete(JobNode).where(JobNode.job_id == job.id))
            num_devices, num_nodes = job.num_devices, job.num_nodes
            after_commit(session, lambda: enqueue_training(job_id, num_devices, num_nodes))
        logger.warning("requeued job %s: its worker was lost", job_id)
        return True

    def _resend_queued(self) -> None:
        cutoff = datetime.now(UTC) - timedelta(seconds=self.queued_resend_after_s)
        with session_scope() as session:
            stale = list(
                session.scalars(
                    select(Job)
                    .where(Job.status == JobStatus.QUEUED.value, Job.updated_at < cutoff)
                    .with_for_update(skip_locked=True)
                )
            )
            for job in stale:
                job.updated_at = datetime.now(UTC)
                after_commit(
                    session,
                    lambda queued=(job.id, job.num_devices, job.num_nodes): enqueue_training(
                        *queued
                    ),  # type: ignore[misc]
                )


class ReaperThread(threading.Thread):
    def __init__(self, reaper: LostWorkerReaper, interval_s: float) -> None:
        super().__init__(name="lost-worker-reaper", daemon=True)
        self.reaper = reaper
        self.interval_s = interval_s
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.interval_s):
            try:
                self.reaper.sweep()
            except Exception:
                logger.exception("reaper sweep failed; retrying")
