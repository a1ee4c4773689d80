"""Celery tasks: thin wrappers that take ids and call plain functions."""

from __future__ import annotations

import threading
from typing import Any

from celery.signals import worker_ready, worker_shutting_down

from workers.celery_app import TRAIN_JOB_TASK, celery_app

_reaper_threads: list[Any] = []


@celery_app.task(name=TRAIN_JOB_TASK)
def train_job(job_id: str) -> None:
    from workers.training_job import run_training_job

    run_training_job(job_id)


@worker_ready.connect
def start_reaper(**_: Any) -> None:
    from service.settings import get_settings
    from workers.lease import LostWorkerReaper, ReaperThread
    from workers.metrics import serve_metrics

    settings = get_settings()
    serve_metrics(settings.worker_metrics_port)
    reaper = LostWorkerReaper(
        lease_s=settings.worker_lease_s, queued_resend_after_s=settings.queued_resend_after_s
    )
    thread = ReaperThread(reaper, interval_s=max(0.5, settings.worker_lease_s / 6))
    thread.start()
    _reaper_threads.append(thread)
    one_process_jobs = settings.training_processes_per_job == 1
    if one_process_jobs and threading.current_thread() is threading.main_thread():
        from workers.training.launch import start_spare

        # A warm training process for the first job (imports take seconds); started from
        # the main thread, which lives as long as the worker (its death signal follows it).
        start_spare()


@worker_shutting_down.connect
def stop_reaper(**_: Any) -> None:
    for thread in _reaper_threads:
        thread.stopped.set()
    from workers.training.launch import stop_spare

    stop_spare()
