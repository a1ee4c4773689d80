"""Exports in any state, written straight into a stack's database beside an archive file:
building real ones takes a worker training a job and then merging it
(tests/integration/test_exports.py), minutes that a test of the rows' API does not need."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import create_engine, update
from sqlalchemy.orm import Session

from service.db import to_sqlalchemy_url
from service.exports.status import ExportStatus
from service.models import Export, Job, new_id
from service.stack import LocalStack

BUILDING = (ExportStatus.QUEUED.value, ExportStatus.RUNNING.value)


class ExportRows:
    """Exports of one job, whose artifacts are files under ``folder`` (the stack's local
    artifact store takes any path). ``close`` ends the ones left building."""

    def __init__(self, stack: LocalStack, job_id: str, folder: Path) -> None:
        self.job_id = job_id
        self.folder = folder
        self._engine = create_engine(to_sqlalchemy_url(stack.database_url or ""))

    @contextlib.contextmanager
    def _session(self) -> Iterator[Session]:
        with Session(self._engine) as session, session.begin():
            yield session

    def give_adapter(self) -> Path:
        """A final adapter for the job, so that its merged download is looked up (a job
        without one is 409 AdapterNotReady before any export is)."""
        adapter = self.folder / "adapter"
        adapter.mkdir(parents=True, exist_ok=True)
        with self._session() as session:
            session.execute(
                update(Job).where(Job.id == self.job_id).values(adapter_path=str(adapter))
            )
        return adapter

    def add(
        self, status: ExportStatus, *, archive: bytes | None = None, hub_repo: str | None = None
    ) -> tuple[str, Path | None]:
        """A merged export in ``status``: its id, and its archive file when ``archive``."""
        export_id = new_id("exp")
        path = None
        if archive is not None:
            path = self.folder / f"{export_id}.tar.gz"
            path.write_bytes(archive)
        now = datetime.now(UTC)
        running = status == ExportStatus.RUNNING
        reason = "the merge ran out of memory" if status == ExportStatus.FAILED else None
        with self._session() as session:
            session.add(
                Export(
                    id=export_id,
                    job_id=self.job_id,
                    kind="merged",
                    dtype="auto",
                    hub_repo=hub_repo,
                    status=status.value,
                    progress=1.0 if status == ExportStatus.SUCCEEDED else 0.0,
                    attempts=0 if status == ExportStatus.QUEUED else 1,
                    failure_reason=reason,
                    archive_uri=None if path is None else str(path),
                    size_bytes=None if archive is None else len(archive),
                    # A fresh lease: the reaper must not hand this one to the session's worker.
                    worker_id="test-worker" if running else None,
                    heartbeat_at=now if running else None,
                    started_at=None if status == ExportStatus.QUEUED else now,
                    finished_at=now if status.is_terminal else None,
                )
            )
        return export_id, path

    def status(self, export_id: str) -> str | None:
        """The export's status in the database; None when its row is gone."""
        with self._session() as session:
            export = session.get(Export, export_id)
            return None if export is None else export.status

    def close(self) -> None:
        # No worker was ever asked to build these, but the reaper re-sends queued exports
        # and requeues silent running ones: left building, one would reach the session's
        # worker and occupy it with a merge of an adapter that is not there.
        with self._session() as session:
            session.execute(
                update(Export)
                .where(Export.job_id == self.job_id, Export.status.in_(BUILDING))
                .values(status=ExportStatus.FAILED.value, worker_id=None)
            )
        self._engine.dispose()
