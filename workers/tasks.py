"""Celery tasks: thin wrappers that take ids and call plain functions."""

from __future__ import annotations

from workers.celery_app import TRAIN_JOB_TASK, celery_app


@celery_app.task(name=TRAIN_JOB_TASK)
def train_job(job_id: str) -> None:
    from workers.training_job import run_training_job

    run_training_job(job_id)
