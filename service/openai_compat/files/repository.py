from __future__ import annotations

from sqlalchemy import delete, exists, or_, select

from service.models import Dataset, Job
from service.repository import Repository


class FileRepository(Repository):
    """What files need beyond DatasetRepository: whether a job uses one, and deleting it."""

    def used_by_a_job(self, dataset_id: str) -> bool:
        return bool(
            self.session.scalar(
                select(
                    exists().where(
                        or_(Job.dataset_id == dataset_id, Job.validation_dataset_id == dataset_id)
                    )
                )
            )
        )

    def delete(self, dataset: Dataset) -> None:
        # Its rows go with it (ON DELETE CASCADE).
        self.session.execute(delete(Dataset).where(Dataset.id == dataset.id))
