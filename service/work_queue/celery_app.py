"""The Celery application. The database is the source of truth for a job; the queue only
says "go", so a lost or repeated message cannot corrupt a run."""

from __future__ import annotations

from celery import Celery
from kombu import Queue

from service.settings import get_settings

TRAIN_JOB_TASK = "rft.train_job"
EXPORT_TASK = "rft.export"

# Exports (merging an adapter into its base model, hub pushes: workers.export) wait here. Every
# worker takes them between jobs; `rft-server worker --exports-only` runs one that takes
# nothing else (a machine with memory for the largest base model, no GPU needed).
EXPORTS_QUEUE = "exports"

# Messages queued before jobs had sizes; every worker still drains it (they are 1-device jobs).
LEGACY_QUEUE = "training"


def devices_queue(num_devices: int) -> str:
    """Where jobs asking for ``num_devices`` devices wait (see service.work_queue.queue)."""
    return f"devices-{num_devices}"


def worker_queues(worker_devices: int) -> list[str]:
    """The queues a worker that can give one job ``worker_devices`` devices consumes."""
    training = [devices_queue(count) for count in range(1, worker_devices + 1)]
    return [*training, LEGACY_QUEUE, EXPORTS_QUEUE]


# Training tasks run for hours. With acks_late a message stays unacknowledged while it runs,
# and Redis redelivers unacknowledged messages after the visibility timeout: keep that far
# beyond any run, and let the job's heartbeat (not redelivery) detect a lost worker.
VISIBILITY_TIMEOUT_S = 7 * 24 * 3600


def create_celery_app() -> Celery:
    settings = get_settings()
    broker = settings.redis_url or "redis://127.0.0.1:6379/0"
    app = Celery("rft", broker=broker, include=["workers.tasks"])
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=False,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        broker_transport_options={"visibility_timeout": VISIBILITY_TIMEOUT_S},
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        # Keep the real stdout (the worker's log): vLLM redirects it at the file-descriptor
        # level while it starts, and Celery's logging proxy has no file descriptor.
        worker_redirect_stdouts=False,
        task_default_queue="training",
        # What a worker started without --queues consumes: the queues of the job sizes it
        # can hold (service.work_queue.queue). The API sends each job to its size's queue.
        task_queues=[Queue(name) for name in worker_queues(settings.resolved_worker_devices)],
    )
    return app


celery_app = create_celery_app()
