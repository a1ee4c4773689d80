"""Celery tasks: thin wrappers that take ids and call plain functions."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from typing import TYPE_CHECKING, Any

from celery.signals import worker_ready, worker_shutting_down

from service.work_queue.celery_app import EXPORT_TASK, EXPORTS_QUEUE, TRAIN_JOB_TASK, celery_app

if TYPE_CHECKING:
    from workers.training.launch import WarmProcesses

logger = logging.getLogger(__name__)
# This worker's warm training processes (its spare, a kept vLLM engine's holder): started when
# the worker is ready, handed to every training job, stopped when it shuts down.
_warm_processes: WarmProcesses | None = None
_reaper_threads: list[Any] = []
_capacity_adverts: list[tuple[threading.Event, str, str]] = []


@celery_app.task(name=TRAIN_JOB_TASK)
def train_job(job_id: str) -> None:
    from workers.training_job import run_training_job

    run_training_job(job_id, _warm_training_processes())


def _warm_training_processes() -> WarmProcesses:
    """The worker's WarmProcesses (workers.training.launch), made at its first use."""
    global _warm_processes
    if _warm_processes is None:
        from workers.training.launch import WarmProcesses

        _warm_processes = WarmProcesses()
    return _warm_processes


@celery_app.task(name=EXPORT_TASK)
def export(export_id: str) -> None:
    from workers.export import run_export

    run_export(export_id)


def takes_training_jobs(consumer: Any) -> bool:
    """Whether this worker consumes a training queue (not `rft-server worker --exports-only`)."""
    amqp = getattr(getattr(consumer, "app", None), "amqp", None)
    # Empty: no --queues given, so every queue of task_queues (training ones among them).
    consumed = set(amqp.queues.consume_from or {}) if amqp is not None else set()
    return consumed != {EXPORTS_QUEUE}


@worker_ready.connect
def start_reaper(sender: Any = None, **_: Any) -> None:
    from service.settings import get_settings
    from workers.lease import LostWorkerReaper, ReaperThread
    from workers.metrics import serve_metrics

    settings = get_settings()
    serve_metrics(settings.worker_metrics_port, settings.worker_metrics_host)
    reaper = LostWorkerReaper(
        lease_s=settings.worker_lease_s, queued_resend_after_s=settings.queued_resend_after_s
    )
    thread = ReaperThread(reaper, interval_s=max(0.5, settings.worker_lease_s / 6))
    thread.start()
    _reaper_threads.append(thread)
    from workers.webhooks import WebhookDispatcherThread

    dispatcher = WebhookDispatcherThread(settings)
    dispatcher.start()
    _reaper_threads.append(dispatcher)
    if not takes_training_jobs(sender):
        logger.info("this worker takes exports only")
        return
    _advertise_capacity(settings, sender)
    # What the first job's task imports (~0.6 s), now rather than while a job waits.
    import workers.training_job  # noqa: F401

    # Every worker takes 1-device jobs (queue devices-1), so every worker keeps a spare.
    if threading.current_thread() is threading.main_thread():
        # A warm training process for the first job (imports take seconds); started from
        # the main thread, which lives as long as the worker (its death signal follows it).
        _warm_training_processes().start_spare()


def _advertise_capacity(settings: Any, consumer: Any) -> None:
    """Keep this worker's device count in Redis while it runs (the API reads the largest)."""
    from service.work_queue.queue import advertise_capacity
    from workers.advertised_devices import (
        device_kind,
        generates_with_vllm_colocated,
        generation_backend,
        gpu_memory_gib,
    )
    from workers.training.cuda import usable_cuda_devices

    # CUDA GPUs torch can use (the API refuses fsdp while no worker has them).
    accelerator = "cuda" if usable_cuda_devices() > 0 else "cpu"
    # Read once: what the API needs to refuse a job whose vLLM and trainer cannot share a GPU.
    memory = gpu_memory_gib() if accelerator == "cuda" else None
    vllm = accelerator == "cuda" and generates_with_vllm_colocated(settings)
    kind = device_kind(accelerator)
    backend = generation_backend(settings, accelerator)
    redis_url = settings.require_redis_url()
    name = f"{getattr(consumer, 'hostname', None) or socket.gethostname()}:{os.getpid()}"
    devices = settings.resolved_worker_devices
    ttl_s = settings.worker_capacity_ttl_s
    stopped = threading.Event()

    def refresh() -> None:
        while not stopped.is_set():
            try:
                advertise_capacity(
                    redis_url,
                    name,
                    devices,
                    ttl_s,
                    accelerator,
                    gpu_memory_gib=memory,
                    vllm=vllm,
                    device_kind=kind,
                    generation_backend=backend,
                )
            except Exception as exc:  # Redis away: the queue is too; try again
                logger.warning("could not advertise this worker's devices: %s", exc)
            stopped.wait(ttl_s / 3)

    threading.Thread(target=refresh, name="capacity-advert", daemon=True).start()
    _capacity_adverts.append((stopped, redis_url, name))
    logger.info("this worker gives a job up to %d devices (queues devices-1..%d)", devices, devices)


@worker_shutting_down.connect
def stop_reaper(**_: Any) -> None:
    for thread in _reaper_threads:
        thread.stopped.set()
    from service.work_queue.queue import withdraw_capacity

    for stopped, redis_url, name in _capacity_adverts:
        stopped.set()
        with contextlib.suppress(Exception):
            withdraw_capacity(redis_url, name)
    if _warm_processes is not None:
        _warm_processes.stop()
