"""The session stack's worker advertises itself once it is ready, which the stack does not wait
for: tests that read the adverts (the cost estimates) wait for them first."""

from __future__ import annotations

import time

from service.stack import LocalStack
from service.work_queue.queue import WorkerCapacity, live_workers

# How long a worker may take to start (imports, its spare training process): a bound on a
# condition awaited, not a margin on a duration.
WORKER_START_S = 120.0


def wait_for_advert(stack: LocalStack) -> list[WorkerCapacity]:
    """The running workers' adverts, once at least one says its device kind."""
    assert stack.redis_url
    deadline = time.monotonic() + WORKER_START_S
    while True:
        workers = [w for w in live_workers(stack.redis_url) if w.device_kind is not None]
        if workers or time.monotonic() > deadline:
            assert workers, "no worker advertised its device kind"
            return workers
        time.sleep(0.2)
