"""Every SQL statement on a job's checkpoints (``checkpoints``)."""

from __future__ import annotations

from sqlalchemy import select

from service.models import Checkpoint
from service.repository import Repository


class CheckpointRepository(Repository):
    def save(self, job_id: str, step: int, path: str, size_bytes: int) -> None:
        """Record (or replace: a re-run step after a resume) the checkpoint saved at ``step``."""
        self.session.merge(Checkpoint(job_id=job_id, step=step, path=path, size_bytes=size_bytes))

    def latest_checkpoint(self, job_id: str) -> Checkpoint | None:
        return self.session.scalar(
            select(Checkpoint)
            .where(Checkpoint.job_id == job_id)
            .order_by(Checkpoint.step.desc())
            .limit(1)
        )

    def list_checkpoints(self, job_id: str) -> list[Checkpoint]:
        return list(
            self.session.scalars(
                select(Checkpoint).where(Checkpoint.job_id == job_id).order_by(Checkpoint.step)
            )
        )

    def get_checkpoint(self, job_id: str, step: int) -> Checkpoint | None:
        return self.session.get(Checkpoint, (job_id, step))
