"""A worker process's life beside its tasks: what it starts when Celery says it is ready (its
metrics endpoint, the lost-worker reaper, the webhook dispatcher, the advert of the devices it
gives a job, the warm spare) and stops when it shuts down. One ``WorkerProcess`` per process:
``WORKER``; Celery's signals call it, the tasks (workers.tasks) ask it for the warm processes."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from typing import TYPE_CHECKING, Any

from celery.signals import worker_ready, worker_shutting_down

from service.work_queue.celery_app import EXPORTS_QUEUE

if TYPE_CHECKING:
    from service.settings import Settings
    from workers.training.launch import WarmProcesses

logger = logging.getLogger(__name__)


def takes_training_jobs(consumer: Any) -> bool:
    """Whether this worker consumes a training queue (not `rft-server worker --exports-only`)."""
    amqp = getattr(getattr(consumer, "app", None), "amqp", None)
    # Empty: no --queues given, so every queue of task_queues (training ones among them).
    consumed = set(amqp.queues.consume_from or {}) if amqp is not None else set()
    return consumed != {EXPORTS_QUEUE}


class WorkerProcess:
    """What this worker process runs beside its tasks, and stops at its end."""

    def __init__(self) -> None:
        # Its warm training processes (the spare, a kept vLLM engine's holder): handed to
        # every training job (workers.training.launch.WarmProcesses).
        self._warm: WarmProcesses | None = None
        self._background: list[Any] = []  # threads with a `stopped` event: reaper, dispatcher
        self._adverts: list[tuple[threading.Event, str, str]] = []

    def warm_processes(self) -> WarmProcesses:
        """The worker's WarmProcesses, made at their first use."""
        if self._warm is None:
            from workers.training.launch import WarmProcesses

            self._warm = WarmProcesses()
        return self._warm

    def start(self, consumer: Any) -> None:
        from service.settings import get_settings
        from workers.lease import LostWorkerReaper, ReaperThread
        from workers.metrics import serve_metrics
        from workers.webhooks import WebhookDispatcherThread

        settings = get_settings()
        serve_metrics(settings.worker_metrics_port, settings.worker_metrics_host)
        reaper = LostWorkerReaper(
            lease_s=settings.worker_lease_s, queued_resend_after_s=settings.queued_resend_after_s
        )
        for thread in (
            ReaperThread(reaper, interval_s=max(0.5, settings.worker_lease_s / 6)),
            WebhookDispatcherThread(settings),
        ):
            thread.start()
            self._background.append(thread)
        if not takes_training_jobs(consumer):
            logger.info("this worker takes exports only")
            return
        self._advertise_capacity(settings, consumer)
        # What the first job's task imports (~0.6 s), now rather than while a job waits.
        import workers.training_job  # noqa: F401

        # Every worker takes 1-device jobs (queue devices-1), so every worker keeps a spare.
        if threading.current_thread() is threading.main_thread():
            # A warm training process for the first job (imports take seconds); started from
            # the main thread, which lives as long as the worker (its death signal follows it).
            self.warm_processes().start_spare()

    def stop(self) -> None:
        from service.work_queue.queue import withdraw_capacity

        for thread in self._background:
            thread.stopped.set()
        for stopped, redis_url, name in self._adverts:
            stopped.set()
            with contextlib.suppress(Exception):
                withdraw_capacity(redis_url, name)
        if self._warm is not None:
            self._warm.stop()

    def _advertise_capacity(self, settings: Settings, consumer: Any) -> None:
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
        self._adverts.append((stopped, redis_url, name))
        logger.info(
            "this worker gives a job up to %d devices (queues devices-1..%d)", devices, devices
        )


WORKER = WorkerProcess()


@worker_ready.connect
def _worker_ready(sender: Any = None, **_: Any) -> None:
    WORKER.start(sender)


@worker_shutting_down.connect
def _worker_shutting_down(**_: Any) -> None:
    WORKER.stop()
