"""Every SQL statement on cost: measured throughput, the stretches jobs hold devices, and the
per-tenant usage read from them and from the steps."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Date, cast, func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert

from service.models import GpuUsage, Job, Step, Throughput, utcnow
from service.repository import Repository


class ThroughputRepository(Repository):
    def add_measurement(
        self,
        key: tuple[str, str, str],
        *,
        device_seconds_per_token: float,
        tokens_per_completion: float,
        step_seconds: float,
    ) -> None:
        """Fold one step into the running means of ``key`` (device kind, model key, backend):
        one upsert, so two workers measuring the same key at once both count."""
        device_kind, model_key, backend = key
        table = Throughput.__table__
        n = table.c.steps

        def mean(column: str, value: float) -> object:
            return table.c[column] + (value - table.c[column]) / (n + 1)

        self.session.execute(
            pg_insert(Throughput)
            .values(
                device_kind=device_kind,
                model_key=model_key,
                generation_backend=backend,
                steps=1,
                device_seconds_per_token=device_seconds_per_token,
                tokens_per_completion=tokens_per_completion,
                step_seconds=step_seconds,
                updated_at=utcnow(),
            )
            .on_conflict_do_update(
                index_elements=[table.c.device_kind, table.c.model_key, table.c.generation_backend],
                set_={
                    "steps": n + 1,
                    "device_seconds_per_token": mean(
                        "device_seconds_per_token", device_seconds_per_token
                    ),
                    "tokens_per_completion": mean("tokens_per_completion", tokens_per_completion),
                    "step_seconds": mean("step_seconds", step_seconds),
                    "updated_at": utcnow(),
                },
            )
        )

    def get(self, device_kind: str, model_key: str, backend: str) -> Throughput | None:
        return self.session.get(Throughput, (device_kind, model_key, backend))


class UsageRepository(Repository):
    def open_stretch(self, job: Job, devices: int, now: datetime) -> None:
        self.session.add(
            GpuUsage(tenant_id=job.tenant_id, job_id=job.id, devices=devices, started_at=now)
        )

    def close_stretch(self, job_id: str, now: datetime) -> None:
        self.session.execute(
            update(GpuUsage)
            .where(GpuUsage.job_id == job_id, GpuUsage.ended_at.is_(None))
            .values(ended_at=now)
        )

    def stretches(self, tenant_id: str, start: datetime, end: datetime) -> Sequence[GpuUsage]:
        """The tenant's stretches that overlap [start, end) (open ones too)."""
        return self.session.scalars(
            select(GpuUsage)
            .where(
                GpuUsage.tenant_id == tenant_id,
                GpuUsage.started_at < end,
                func.coalesce(GpuUsage.ended_at, func.now()) > start,
            )
            .order_by(GpuUsage.started_at, GpuUsage.id)
        ).all()

    def tokens(
        self, tenant_id: str, start: datetime, end: datetime, *, by_day: bool
    ) -> list[tuple[object, int]]:
        """Completion tokens of the tenant's steps recorded in [start, end), by UTC day (a
        date) or by job id."""
        day = cast(func.timezone("UTC", Step.created_at), Date)
        group = day if by_day else Step.job_id
        rows = self.session.execute(
            select(group, func.coalesce(func.sum(Step.completion_tokens), 0))
            .join(Job, Job.id == Step.job_id)
            .where(Job.tenant_id == tenant_id, Step.created_at >= start, Step.created_at < end)
            .group_by(group)
        )
        return [(key, int(total or 0)) for key, total in rows]

    def recent_step_seconds(self, job_id: str, *, up_to_step: int, limit: int) -> list[float]:
        """The durations of the job's last ``limit`` stored steps up to ``up_to_step``."""
        return list(
            self.session.scalars(
                select(Step.duration_s)
                .where(Step.job_id == job_id, Step.step <= up_to_step)
                .order_by(Step.step.desc())
                .limit(limit)
            )
        )

    def jobs_with_steps_by_day(
        self, tenant_id: str, start: datetime, end: datetime
    ) -> dict[object, set[str]]:
        day = cast(func.timezone("UTC", Step.created_at), Date)
        rows = self.session.execute(
            select(day, Step.job_id)
            .join(Job, Job.id == Step.job_id)
            .where(Job.tenant_id == tenant_id, Step.created_at >= start, Step.created_at < end)
            .distinct()
        )
        found: dict[object, set[str]] = {}
        for key, job_id in rows:
            found.setdefault(key, set()).add(job_id)
        return found
