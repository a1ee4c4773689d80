"""Sending work to the training workers. Imports only Celery and Redis, so the API can use it.

A job goes to the queue of its size, ``devices-<num_devices>``; a worker that can give a job
D devices consumes ``devices-1`` .. ``devices-D``, so a job is only taken by a worker that can
hold it. Each worker also advertises D in Redis (a key per worker that expires unless
refreshed), so the API can refuse a job no running worker could hold.

A job over N machines (``num_nodes``) gets N messages in its queue: N workers take one each
and meet in the database (workers.placement).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

import redis
from redis.exceptions import RedisError

from service.work_queue.celery_app import (
    EXPORT_TASK,
    EXPORTS_QUEUE,
    TRAIN_JOB_TASK,
    celery_app,
    devices_queue,
)

logger = logging.getLogger(__name__)

_CAPACITY_KEY_PREFIX = "rft:worker-devices:"


def enqueue_training(job_id: str, num_devices: int = 1, num_nodes: int = 1) -> None:
    """Queue a job for as many workers as it spans machines (one message each)."""
    for _ in range(num_nodes):
        celery_app.send_task(TRAIN_JOB_TASK, args=[job_id], queue=devices_queue(num_devices))


def enqueue_export(export_id: str) -> None:
    """Queue an export (service.exports) for the next worker free to build it."""
    celery_app.send_task(EXPORT_TASK, args=[export_id], queue=EXPORTS_QUEUE)


@dataclass(frozen=True)
class WorkerCapacity:
    devices: int  # the most devices this worker gives one job
    accelerator: str  # "cuda" or "cpu"
    # The smallest of its GPUs' memory in GiB (None: CPU, or unknown), and whether its jobs
    # generate with vLLM on those GPUs: the API checks a job fits (service.gpu.job_fit).
    gpu_memory_gib: float | None = None
    vllm: bool = False
    # What its measured throughput is filed under (service.usage): "cpu" or "cuda:<GPU name>",
    # and "vllm" or "transformers"; the estimates at job creation read them.
    device_kind: str | None = None
    generation_backend: str | None = None


def advertise_capacity(
    redis_url: str,
    worker_name: str,
    devices: int,
    ttl_s: float,
    accelerator: str = "cpu",
    *,
    gpu_memory_gib: float | None = None,
    vllm: bool = False,
    device_kind: str | None = None,
    generation_backend: str | None = None,
) -> None:
    """Say (for ``ttl_s``) that this worker can give one job ``devices`` devices."""
    advert = json.dumps(
        {
            "devices": devices,
            "accelerator": accelerator,
            "gpu_memory_gib": gpu_memory_gib,
            "vllm": vllm,
            "device_kind": device_kind,
            "generation_backend": generation_backend,
        }
    )
    client = redis.Redis.from_url(redis_url)
    try:
        client.set(_CAPACITY_KEY_PREFIX + worker_name, advert, px=int(ttl_s * 1000))
    finally:
        client.close()


def withdraw_capacity(redis_url: str, worker_name: str) -> None:
    client = redis.Redis.from_url(redis_url)
    try:
        client.delete(_CAPACITY_KEY_PREFIX + worker_name)
    finally:
        client.close()


def live_workers(redis_url: str) -> list[WorkerCapacity]:
    """What every running worker advertises (an expired advert is a stopped worker)."""
    client = redis.Redis.from_url(redis_url, socket_timeout=2)
    try:
        keys = list(client.scan_iter(match=_CAPACITY_KEY_PREFIX + "*", count=1000))
        values = client.mget(keys) if keys else []
    finally:
        client.close()
    return [_capacity(value) for value in values if value is not None]


def running_workers(redis_url: str | None) -> list[WorkerCapacity] | None:
    """What the running workers advertise; None when nobody can say (Redis not configured, or
    unreachable: logged), and then nothing that depends on them is checked."""
    if not redis_url:
        return None
    try:
        return live_workers(redis_url)
    except RedisError as exc:
        logger.warning("could not read the workers' adverts: %s", exc)
        return None


def _capacity(value: bytes | str) -> WorkerCapacity:
    advert = json.loads(value)
    if isinstance(advert, int):  # a worker from before adverts said more than the count
        return WorkerCapacity(devices=advert, accelerator="cpu")
    memory = advert.get("gpu_memory_gib")
    return WorkerCapacity(
        devices=int(advert["devices"]),
        accelerator=str(advert["accelerator"]),
        gpu_memory_gib=float(memory) if isinstance(memory, int | float) and memory > 0 else None,
        vllm=advert.get("vllm") is True,
        device_kind=_text(advert.get("device_kind")),
        generation_backend=_text(advert.get("generation_backend")),
    )


def _text(value: object) -> str | None:
    # Adverts of workers from before they said it carry nothing (or, garbled, not a string).
    return value if isinstance(value, str) and value else None
