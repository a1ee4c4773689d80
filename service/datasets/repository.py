from __future__ import annotations

from typing import Any

from sqlalchemy import select

from service.bulk import copy_into, copy_json, copy_line
from service.keyset import newest_first
from service.models import Dataset, DatasetRow
from service.repository import Repository


class DatasetRepository(Repository):
    def add(self, dataset: Dataset, rows: list[dict[str, Any]]) -> Dataset:
        self.session.add(dataset)
        self.session.flush()
        copy_into(
            self.session,
            "dataset_rows",
            ["dataset_id", "row_index", "data"],
            (copy_line(dataset.id, index, copy_json(row)) for index, row in enumerate(rows)),
        )
        return dataset

    def get(self, tenant_id: str, dataset_id: str) -> Dataset | None:
        return self.session.scalar(
            select(Dataset).where(Dataset.id == dataset_id, Dataset.tenant_id == tenant_id)
        )

    def list_datasets(self, tenant_id: str, *, limit: int, after: str | None) -> list[Dataset]:
        statement = select(Dataset).where(Dataset.tenant_id == tenant_id)
        anchor = self.get(tenant_id, after) if after else None
        return list(self.session.scalars(newest_first(statement, Dataset, anchor, limit)))

    def rows(self, dataset_id: str, *, limit: int | None = None) -> list[dict[str, Any]]:
        statement = (
            select(DatasetRow.data)
            .where(DatasetRow.dataset_id == dataset_id)
            .order_by(DatasetRow.row_index)
        )
        if limit is not None:
            statement = statement.limit(limit)
        return list(self.session.scalars(statement))

    def rows_at(self, dataset_id: str, indices: set[int]) -> dict[int, dict[str, Any]]:
        if not indices:
            return {}
        return {
            index: data
            for index, data in self.session.execute(
                select(DatasetRow.row_index, DatasetRow.data).where(
                    DatasetRow.dataset_id == dataset_id, DatasetRow.row_index.in_(indices)
                )
            ).tuples()
        }
