"""Who runs a job, and taking over from a worker that died.

A running (or pausing) job carries its worker's id and a heartbeat. Every worker process runs
a reaper that watches those jobs; a job whose heartbeat has not moved for a whole lease, as timed
by the reaper's own clock (so clock skew and database outages cannot fake a death), goes back
to the queue (service.jobs.ownership.requeue) and resumes from its last checkpoint on
whichever worker takes it; a pausing one is paused.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from service.db import after_commit, session_scope
from service.exports import ownership as export_ownership
from service.exports.repository import ExportRepository
from service.jobs import ownership
from service.jobs.heartbeats import HeartbeatSilence
from service.jobs.repository import JobRepository
from workers.queue import enqueue_export, enqueue_training

logger = logging.getLogger(__name__)


class Heartbeat:
    """Keeps a lease alive from a background thread while its worker works on what it holds."""

    def __init__(self, name: str, beat: Callable[[Session], None], interval_s: float) -> None:
        self.name = name
        self._beat = beat
        self.interval_s = interval_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{name}", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)

    def beat(self) -> None:
        with session_scope() as session:
            self._beat(session)

    def _run(self) -> None:
        while not self._stopped.wait(self.interval_s):
            try:
                self.beat()
            except SQLAlchemyError as exc:
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


@dataclass
class LostWorkerReaper:
    lease_s: float
    queued_resend_after_s: float
    _silence: HeartbeatSilence = field(default_factory=HeartbeatSilence)
    _export_silence: HeartbeatSilence = field(default_factory=HeartbeatSilence)

    def sweep(self, now: float | None = None) -> list[str]:
        """One pass: requeue jobs and exports whose lease ran out, re-send stale queue
        messages. Returns the requeued jobs' ids."""
        now = time.monotonic() if now is None else now
        requeued = self._requeue_lost(now)
        self._resend_queued()
        self._requeue_lost_exports(now)
        self._resend_queued_exports()
        return requeued

    def _requeue_lost(self, now: float) -> list[str]:
        with session_scope() as session:
            held = JobRepository(session).held_heartbeats()
        self._silence.keep_only(job_id for job_id, _ in held)
        expired = [
            (job_id, heartbeat)
            for job_id, heartbeat in held
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
            job = JobRepository(session).get_any_tenant(job_id)
            lost = job.worker_id if job is not None else None
            moved = ownership.requeue(
                session,
                job_id,
                ownership.ExpiredLease(heartbeat),
                kind="worker_lost",
                why=f"worker {lost} stopped answering (no heartbeat for {self.lease_s:.0f} s)",
                then="the job resumes from its last checkpoint on another worker",
                data={"worker_id": lost},
            )
        if moved:
            logger.warning("requeued job %s: its worker was lost", job_id)
        return moved

    def _resend_queued(self) -> None:
        with session_scope() as session:
            for job in JobRepository(session).queued_since(self.queued_resend_after_s):
                job.updated_at = datetime.now(UTC)
                after_commit(
                    session,
                    lambda queued=(job.id, job.num_devices, job.num_nodes): enqueue_training(
                        *queued
                    ),  # type: ignore[misc]
                )

    def _requeue_lost_exports(self, now: float) -> list[str]:
        with session_scope() as session:
            held = ExportRepository(session).held_heartbeats()
        self._export_silence.keep_only(export_id for export_id, _ in held)
        requeued = []
        for export_id, heartbeat in held:
            if self._export_silence.silent_for(export_id, heartbeat, now) < self.lease_s:
                continue
            with session_scope() as session:
                moved = export_ownership.requeue(
                    session,
                    export_id,
                    ownership.ExpiredLease(heartbeat),
                    why=f"the worker building it stopped answering (no heartbeat for "
                    f"{self.lease_s:.0f} s)",
                )
            if moved:
                logger.warning("requeued export %s: its worker was lost", export_id)
                requeued.append(export_id)
            self._export_silence.forget(export_id)
        return requeued

    def _resend_queued_exports(self) -> None:
        with session_scope() as session:
            for export in ExportRepository(session).queued_since(self.queued_resend_after_s):
                export.updated_at = datetime.now(UTC)
                after_commit(session, lambda export_id=export.id: enqueue_export(export_id))  # type: ignore[misc]


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
