"""Every SQL statement on the ``jobs`` table: the API's reads and writes, and the worker's
(the lease, where a step begins, warnings). A job's other tables have repositories of their
own: configs (service.job_configs), events (service.events), checkpoints (service.artifacts),
steps and completions (service.jobs.step_repository), nodes (service.jobs.node_repository)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, select, text, update

from service.jobs.status import OWNED_STATUSES, JobStatus
from service.keyset import newest_first
from service.models import Job
from service.repository import Repository

# Postgres NOTIFY channel the workers listen on for changes to their jobs.
JOB_CHANNEL = "rft_jobs"


class JobRepository(Repository):
    # jobs
    def get(self, tenant_id: str, job_id: str, *, for_update: bool = False) -> Job | None:
        statement = select(Job).where(Job.id == job_id, Job.tenant_id == tenant_id)
        if for_update:
            statement = statement.with_for_update()
        return self.session.scalar(statement)

    def get_any_tenant(self, job_id: str, *, for_update: bool = False) -> Job | None:
        """For workers, which act on a job id the API already checked."""
        statement = select(Job).where(Job.id == job_id)
        if for_update:
            statement = statement.with_for_update()
        return self.session.scalar(statement)

    def list_children(self, tenant_id: str, job_id: str) -> list[Job]:
        """The tenant's jobs started from ``job_id``'s weights (init_from), oldest first."""
        return list(
            self.session.scalars(
                select(Job)
                .where(Job.tenant_id == tenant_id, Job.parent_job_id == job_id)
                .order_by(Job.created_at, Job.id)
            )
        )

    def notify_changed(self, job_id: str) -> None:
        """Wake the job's worker (workers.job_watch): delivered when the transaction commits."""
        self.session.execute(select(func.pg_notify(JOB_CHANNEL, job_id)))

    def get_by_idempotency_key(self, tenant_id: str, key: str) -> Job | None:
        return self.session.scalar(
            select(Job).where(Job.tenant_id == tenant_id, Job.idempotency_key == key)
        )

    def list_jobs(
        self, tenant_id: str, *, limit: int, after: str | None, status: str | None
    ) -> list[Job]:
        statement = select(Job).where(Job.tenant_id == tenant_id)
        if status:
            statement = statement.where(Job.status == status)
        anchor = self.get(tenant_id, after) if after else None
        return list(self.session.scalars(newest_first(statement, Job, anchor, limit)))

    def count_by_status(self) -> dict[str, int]:
        """Every tenant's jobs, counted by status (the metrics endpoint)."""
        rows = self.session.execute(select(Job.status, func.count()).group_by(Job.status))
        return {status: count for status, count in rows}

    # the worker's statements
    def status_of(self, job_id: str) -> tuple[str, str | None, int] | None:
        """(status, worker_id, config_version): what the training loop acts on."""
        row = self.session.execute(
            select(Job.status, Job.worker_id, Job.config_version).where(Job.id == job_id)
        ).one_or_none()
        return None if row is None else (row[0], row[1], row[2])

    def num_nodes(self, job_id: str) -> int:
        return self.session.scalar(select(Job.num_nodes).where(Job.id == job_id)) or 1

    def begin_step(self, job_id: str, worker_id: str, step: int) -> tuple[int, str | None] | None:
        """Mark ``step`` as begun, under the row lock; (the newest config version, the job's
        sealed secrets as of it), or None when the job is gone or another worker holds it.

        A config update holds the same lock while it reads started_step to answer
        applies_from_step, so its answer is exactly the step where the version is picked up
        (service.job_configs.service.first_step_of_next_version).
        """
        # Not worth a WAL flush (measured: ~2 ms instead of ~9 on a busy 2-core machine, per
        # step): a crash loses only where a step began, and a resumed run writes that again.
        self.session.execute(text("SET LOCAL synchronous_commit TO off"))
        row = self.session.execute(
            update(Job)
            .where(Job.id == job_id, Job.worker_id == worker_id)
            .values(started_step=step)
            .returning(Job.config_version, Job.secrets_sealed)
        ).one_or_none()
        return None if row is None else (row[0], row[1])

    def beat(self, job_id: str, worker_id: str) -> None:
        """The lease's heartbeat: only while ``worker_id`` holds the job."""
        self.session.execute(
            update(Job)
            .where(Job.id == job_id, Job.worker_id == worker_id)
            .values(heartbeat_at=datetime.now(UTC))
        )

    def held_heartbeats(self) -> list[tuple[str, datetime | None]]:
        """(job id, heartbeat) of every job a worker holds (running or pausing)."""
        return [
            (row[0], row[1])
            for row in self.session.execute(
                select(Job.id, Job.heartbeat_at).where(
                    Job.status.in_([status.value for status in OWNED_STATUSES])
                )
            )
        ]

    def queued_since(self, seconds: float) -> list[Job]:
        """Queued jobs untouched for ``seconds`` (locked; others' locked rows skipped)."""
        cutoff = datetime.now(UTC) - timedelta(seconds=seconds)
        return list(
            self.session.scalars(
                select(Job)
                .where(Job.status == JobStatus.QUEUED.value, Job.updated_at < cutoff)
                .with_for_update(skip_locked=True)
            )
        )

    def add_warning(self, job_id: str, warning: dict[str, Any], identity: dict[str, Any]) -> bool:
        """Append ``warning`` to the job's list unless one with ``identity``'s keys is there;
        whether it was added."""
        added = self.session.execute(
            text(
                "UPDATE jobs SET warnings = warnings || CAST(:added AS jsonb) "
                "WHERE id = :id AND NOT warnings @> CAST(:identity AS jsonb) RETURNING id"
            ),
            {"added": json.dumps([warning]), "identity": json.dumps([identity]), "id": job_id},
        ).first()
        return added is not None
