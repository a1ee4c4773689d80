"""Every SQL statement on exports (``exports``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, select, update

from service.exports.status import ExportStatus
from service.models import Export
from service.repository import Repository


class ExportRepository(Repository):
    def get(self, job_id: str, export_id: str, *, for_update: bool = False) -> Export | None:
        query = select(Export).where(Export.id == export_id, Export.job_id == job_id)
        if for_update:
            query = query.with_for_update()
        return self.session.scalar(query)

    def get_any_job(self, export_id: str, *, for_update: bool = False) -> Export | None:
        """For workers, which have the id from the queue and no tenant."""
        return self.session.get(Export, export_id, with_for_update=for_update)

    def delete(self, export: Export) -> None:
        self.session.execute(delete(Export).where(Export.id == export.id))

    def get_by_idempotency_key(self, job_id: str, key: str) -> Export | None:
        return self.session.scalar(
            select(Export).where(Export.job_id == job_id, Export.idempotency_key == key)
        )

    def list_for_job(self, job_id: str) -> list[Export]:
        return list(
            self.session.scalars(
                select(Export)
                .where(Export.job_id == job_id)
                .order_by(Export.created_at.desc(), Export.id)
            )
        )

    def merged_archives(
        self, job_id: str, checkpoint_step: int | None, dtype: str, statuses: set[ExportStatus]
    ) -> list[Export]:
        """The job's merged-archive exports of one adapter and dtype in ``statuses``, newest
        first."""
        step = (
            Export.checkpoint_step.is_(None)
            if checkpoint_step is None
            else Export.checkpoint_step == checkpoint_step
        )
        return list(
            self.session.scalars(
                select(Export)
                .where(
                    Export.job_id == job_id,
                    Export.kind == "merged",
                    Export.hub_repo.is_(None),
                    Export.dtype == dtype,
                    Export.status.in_([status.value for status in statuses]),
                    step,
                )
                .order_by(Export.created_at.desc(), Export.id)
            )
        )

    def report(self, export_id: str, worker_id: str, stage: str, progress: float) -> bool:
        """Progress of a running export (and its heartbeat), only while ``worker_id`` holds
        it; whether it still does."""
        result = self.session.execute(
            update(Export)
            .where(
                Export.id == export_id,
                Export.worker_id == worker_id,
                Export.status == ExportStatus.RUNNING.value,
            )
            .values(stage=stage, progress=progress, heartbeat_at=datetime.now(UTC))
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]

    def beat(self, export_id: str, worker_id: str) -> None:
        self.session.execute(
            update(Export)
            .where(Export.id == export_id, Export.worker_id == worker_id)
            .values(heartbeat_at=datetime.now(UTC))
        )

    def held_heartbeats(self) -> list[tuple[str, datetime | None]]:
        """(export id, heartbeat) of every running export."""
        return [
            (row[0], row[1])
            for row in self.session.execute(
                select(Export.id, Export.heartbeat_at).where(
                    Export.status == ExportStatus.RUNNING.value
                )
            )
        ]

    def queued_since(self, seconds: float) -> list[Export]:
        """Queued exports untouched for ``seconds`` (locked; others' locked rows skipped)."""
        cutoff = datetime.now(UTC) - timedelta(seconds=seconds)
        return list(
            self.session.scalars(
                select(Export)
                .where(Export.status == ExportStatus.QUEUED.value, Export.updated_at < cutoff)
                .with_for_update(skip_locked=True)
            )
        )
