"""Whether a job's datasets hold what its method trains on, checked at creation (400 naming the
dataset and the row): GRPO needs prompts; SFT needs examples (service.datasets.supervised),
in its validation set too, and a batch that splits evenly over the job's devices."""

from __future__ import annotations

from sqlalchemy.orm import Session

from service.datasets.repository import DatasetRepository
from service.datasets.supervised import NotAnSftExample, sft_examples
from service.errors import BadRequest
from service.jobs.schemas import JobCreate
from service.models import Dataset


class DatasetUnfitForMethod(BadRequest):
    """A dataset of the job holds no rows its method can train on (400)."""

    def __init__(self, detail: str, *, dataset_id: str) -> None:
        super().__init__(detail)
        self.dataset_id = dataset_id


def check_datasets_fit_method(
    session: Session, tenant_id: str, payload: JobCreate, dataset: Dataset
) -> None:
    """``dataset`` is the job's training set (the tenant's: read by the caller); the
    validation set, if any, is looked up here by id (the caller checks that it is the tenant's)."""
    datasets = DatasetRepository(session)
    validation = (
        datasets.get(tenant_id, payload.validation_dataset_id)
        if payload.validation_dataset_id is not None
        else None
    )
    if payload.method == "grpo":
        for checked in (dataset, validation):
            if checked is not None and "prompt" not in checked.columns:
                raise DatasetUnfitForMethod(
                    f"dataset {checked.id!r} has no prompts (its rows are conversations, in "
                    "'messages'): GRPO samples completions for prompts; train on "
                    "conversations with method 'sft'",
                    dataset_id=checked.id,
                )
        return
    _check_examples(datasets, dataset)
    if validation is not None:
        _check_examples(datasets, validation)
    batch_size = payload.hyperparameters.batch_size
    ranks = payload.num_devices * payload.num_nodes
    if batch_size is not None and batch_size % ranks != 0:
        raise BadRequest(
            f"batch_size={batch_size} cannot be split evenly over the job's {ranks} devices "
            "(num_devices x num_nodes): make it a multiple of that"
        )


def _check_examples(datasets: DatasetRepository, dataset: Dataset) -> None:
    try:
        sft_examples(datasets.rows(dataset.id))
    except NotAnSftExample as exc:
        raise DatasetUnfitForMethod(
            f"dataset {dataset.id!r} cannot train method 'sft': {exc}", dataset_id=dataset.id
        ) from None
