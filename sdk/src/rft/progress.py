"""The progress display of ``jobs.wait(progress=True)``: a Rich bar when Rich is installed (the
``cli`` extra), otherwise one plain line rewritten in place on stderr."""

from __future__ import annotations

import sys
from typing import Any, Protocol

from rft.models import Job


class JobProgress(Protocol):
    def show(self, job: Job) -> None: ...

    def close(self) -> None: ...


def describe(job: Job) -> str:
    return f"{job.id} {job.status.value}: step {job.steps_completed}/{job.train_steps}"


class PlainJobProgress:
    def __init__(self) -> None:
        self._width = 0

    def show(self, job: Job) -> None:
        line = describe(job)
        # Pad over the previous line's tail: it may have been longer.
        sys.stderr.write("\r" + line.ljust(self._width))
        sys.stderr.flush()
        self._width = len(line)

    def close(self) -> None:
        sys.stderr.write("\n")
        sys.stderr.flush()


class RichJobProgress:
    def __init__(self) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        self._progress = Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            transient=False,
        )
        self._task: Any = None
        self._progress.start()

    def show(self, job: Job) -> None:
        description = f"{job.id} {job.status.value}"
        if self._task is None:
            self._task = self._progress.add_task(description, total=job.train_steps or None)
        self._progress.update(self._task, description=description, completed=job.steps_completed)

    def close(self) -> None:
        self._progress.stop()


def job_progress() -> JobProgress:
    try:
        return RichJobProgress()
    except ImportError:
        return PlainJobProgress()
