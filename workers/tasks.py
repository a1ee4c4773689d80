"""Celery tasks: thin wrappers that take ids and call plain functions. The worker process's
start-up and shutdown around them: workers.lifecycle (imported here, so Celery's signals reach
it in every worker)."""

from __future__ import annotations

from service.work_queue.celery_app import EXPORT_TASK, TRAIN_JOB_TASK, celery_app
from workers.lifecycle import WORKER


@celery_app.task(name=TRAIN_JOB_TASK)
def train_job(job_id: str) -> None:
    from workers.training_job import run_training_job

    run_training_job(job_id, WORKER.warm_processes())


@celery_app.task(name=EXPORT_TASK)
def export(export_id: str) -> None:
    from workers.export import run_export

    run_export(export_id)
