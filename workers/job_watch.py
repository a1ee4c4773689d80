"""The job row as the training loop needs it (status, owner, config version), kept current by
a background thread, so no training step waits on the database to learn of a cancel, a pause
or a new reward config.

The API sends a Postgres NOTIFY on the "rft_jobs" channel whenever it changes a job; the
watcher LISTENs and re-reads the row at once, and re-reads it every ``fallback_poll_s`` too, so
a notification lost with a dropped connection delays a change by that much at most.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import psycopg
from sqlalchemy.exc import SQLAlchemyError

from service.db import session_scope, to_libpq_url
from service.jobs.repository import JOB_CHANNEL, JobRepository
from workers.periodic import BackgroundThread

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobState:
    status: str
    worker_id: str | None
    config_version: int


class JobWatcher(BackgroundThread):
    def __init__(self, job_id: str, database_url: str, *, fallback_poll_s: float = 1.0) -> None:
        super().__init__(f"watch-{job_id}", self._run)
        self.job_id = job_id
        self.conninfo = to_libpq_url(database_url)
        self.fallback_poll_s = fallback_poll_s
        self._state: JobState | None = None

    @property
    def state(self) -> JobState | None:
        """The last state read; None only if the row was never readable (or is gone)."""
        return self._state

    def refresh(self) -> None:
        with session_scope() as session:
            row = JobRepository(session).status_of(self.job_id)
        self._state = JobState(*row) if row is not None else None

    def _run(self) -> None:
        backoff = 0.2
        while not self.stopped.is_set():
            try:
                with psycopg.connect(self.conninfo, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(f"LISTEN {JOB_CHANNEL}")
                    # After LISTEN: a change made before it is seen by this read, any later one
                    # by a notification.
                    self.refresh()
                    backoff = 0.2
                    while not self.stopped.is_set():
                        # Wake on the first notice (any job's: a one-row read costs less than
                        # telling them apart) or on the fallback period, then re-read.
                        for _ in conn.notifies(timeout=self.fallback_poll_s, stop_after=1):
                            pass
                        self.refresh()
            except (psycopg.Error, SQLAlchemyError) as exc:
                logger.warning("watching job %s: %s; reconnecting", self.job_id, exc)
                self.stopped.wait(backoff)
                backoff = min(backoff * 2, 5.0)
