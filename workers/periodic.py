"""Background threads beside a worker's work: ``BackgroundThread``, a daemon thread that a with
block starts, and stops and waits for at its end; ``PeriodicThread``, one that does a piece of
work every interval, logging a failure and trying again at the next (the lease's heartbeat and
reaper, the webhook dispatcher)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Self


class BackgroundThread:
    """Runs ``run`` on a daemon thread named ``name``, from ``start`` or the start of a with
    block. The end of the block sets ``stopped`` (which ``run`` watches) and waits for the
    thread 5 s at most: one stuck in a call is left to end with the process."""

    def __init__(self, name: str, run: Callable[[], None]) -> None:
        self.stopped = threading.Event()
        self._thread = threading.Thread(target=run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self._thread.join(timeout=5)


class PeriodicThread(BackgroundThread):
    """Calls ``work`` every ``interval_s`` seconds, the first time one interval after the start,
    until ``stopped`` is set. An exception of a ``retried`` type goes to ``on_failure`` (called
    in the except clause, so ``logger.exception`` logs its traceback) and the next interval
    tries again; any other ends the thread."""

    def __init__(
        self,
        name: str,
        interval_s: float,
        work: Callable[[], object],
        on_failure: Callable[[Exception], None],
        *,
        retried: type[Exception] | tuple[type[Exception], ...] = Exception,
    ) -> None:
        super().__init__(name, self._run)
        self.interval_s = interval_s
        self._work = work
        self._on_failure = on_failure
        self._retried = retried

    def _run(self) -> None:
        while not self.stopped.wait(self.interval_s):
            try:
                self._work()
            except self._retried as exc:
                self._on_failure(exc)
