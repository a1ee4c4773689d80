"""Sending work to the training workers. Imports only Celery, so the API can use it."""

from __future__ import annotations

from workers.celery_app import TRAIN_JOB_TASK, celery_app


def enqueue_training(job_id: str) -> None:
    celery_app.send_task(TRAIN_JOB_TASK, args=[job_id])
