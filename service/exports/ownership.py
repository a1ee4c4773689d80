"""Who builds an export, and every move made on an export a worker holds.

An export's lease (service.leases, as for jobs): a running export carries its worker's id
and a heartbeat, and each move reads the row FOR UPDATE, checks the claim, then moves the status
through service.exports.status. A hub token given with the request is erased as the export ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from service.artifacts.repository import CheckpointRepository
from service.db import after_commit
from service.exports.repository import ExportRepository
from service.exports.status import EXPORT_STATES, MAX_ATTEMPTS, ExportStatus
from service.jobs.repository import JobRepository
from service.leases import Claim, HeldBy, LeasePolicy, start_lease
from service.models import Export
from service.secrets import unseal
from service.server_paths import hide_server_paths
from service.settings import get_settings
from service.work_queue.queue import enqueue_export


def _load_for_update(session: Session, export_id: str) -> Export | None:
    return ExportRepository(session).get_any_job(export_id, for_update=True)


EXPORT_LEASE = LeasePolicy(
    load_for_update=_load_for_update, holding=frozenset({ExportStatus.RUNNING.value})
)

# The key of a token given with the request, in the export's sealed secrets.
REQUEST_TOKEN = "token"


@dataclass(frozen=True)
class ExportWork:
    """What the worker builds, read as it takes the export."""

    export_id: str
    job_id: str
    kind: str
    checkpoint_step: int | None
    dtype: str
    base_model: str  # what the job was given: a hub id, a path, rft-tiny
    adapter_uri: str | None  # None: the adapter is gone (a deleted checkpoint)
    hub_repo: str | None
    hub_private: bool
    hub_token_secret: str | None  # None: the token came with the request (hub_token reads it)


def take(session: Session, export_id: str, worker_id: str) -> ExportWork | None:
    """queued -> running, and the lease is ``worker_id``'s. None when the export should not
    run here: it is gone, or not queued (a duplicate or stale message)."""
    export = _load_for_update(session, export_id)
    if export is None or export.status != ExportStatus.QUEUED.value:
        return None
    job = JobRepository(session).get_any_tenant(export.job_id)
    if job is None:
        return None
    _move(export, ExportStatus.RUNNING)
    leased_at = start_lease(export, worker_id)
    export.started_at = export.started_at or leased_at
    export.attempts += 1
    export.stage = None
    export.progress = 0.0
    if export.checkpoint_step is None:
        adapter_uri = job.adapter_path
    else:
        checkpoint = CheckpointRepository(session).get_checkpoint(job.id, export.checkpoint_step)
        adapter_uri = checkpoint.path if checkpoint is not None else None
    return ExportWork(
        export_id=export.id,
        job_id=job.id,
        kind=export.kind,
        checkpoint_step=export.checkpoint_step,
        dtype=export.dtype,
        base_model=job.base_model,
        adapter_uri=adapter_uri,
        hub_repo=export.hub_repo,
        hub_private=export.hub_private,
        hub_token_secret=export.hub_token_secret,
    )


def hub_token(session: Session, export_id: str) -> str | None:
    """The token to push with, decrypted: None when there is none (no hub destination, or the
    named job secret is gone). Read apart from ``take``, so that a secrets key the worker does
    not share (SecretsKeyError) fails the export instead of leaving it queued."""
    export = ExportRepository(session).get_any_job(export_id)
    if export is None or export.hub_repo is None:
        return None
    settings = get_settings()
    if export.hub_token_secret is not None:
        job = JobRepository(session).get_any_tenant(export.job_id)
        # The job's secrets as they are now: a rotated token is the one used.
        sealed = job.secrets_sealed if job is not None else None
        return unseal(sealed, settings).get(export.hub_token_secret)
    return unseal(export.hub_token_sealed, settings).get(REQUEST_TOKEN)


def report(session: Session, export_id: str, claim: HeldBy, stage: str, progress: float) -> bool:
    """The export's stage and share done (its heartbeat too); whether the worker still holds
    it (False: the reaper gave it to another worker meanwhile)."""
    return ExportRepository(session).report(export_id, claim.worker_id, stage, progress)


def finish(
    session: Session,
    export_id: str,
    claim: HeldBy,
    *,
    archive_uri: str | None = None,
    size_bytes: int | None = None,
    hub_commit_url: str | None = None,
) -> bool:
    export = EXPORT_LEASE.hold(session, export_id, claim)
    if export is None:
        return False
    _move(export, ExportStatus.SUCCEEDED)
    export.progress = 1.0
    export.archive_uri = archive_uri
    export.size_bytes = size_bytes
    export.hub_commit_url = hub_commit_url
    return True


def fail(session: Session, export_id: str, claim: Claim, *, reason: str) -> bool:
    """The export failed; ``reason`` (server folders hidden) is what its reader sees."""
    export = EXPORT_LEASE.hold(session, export_id, claim)
    if export is None:
        return False
    _move(export, ExportStatus.FAILED)
    export.failure_reason = hide_server_paths(reason)
    return True


def requeue(session: Session, export_id: str, claim: Claim, *, why: str) -> bool:
    """Its worker was lost: queued again for another one, unless that happened
    ``MAX_ATTEMPTS`` times already (then failed, saying why). Whether it moved."""
    export = EXPORT_LEASE.hold(session, export_id, claim)
    if export is None:
        return False
    if export.attempts >= MAX_ATTEMPTS:
        _move(export, ExportStatus.FAILED)
        export.failure_reason = f"{why}, on each of {export.attempts} tries"
        return True
    _move(export, ExportStatus.QUEUED)
    export.stage = None
    export.progress = 0.0
    after_commit(session, lambda: enqueue_export(export_id))
    return True


def _move(export: Export, target: ExportStatus) -> None:
    EXPORT_STATES.ensure(export.id, ExportStatus(export.status), target)
    export.status = target.value
    if target != ExportStatus.RUNNING:
        export.worker_id = None
    if target.is_terminal:
        export.finished_at = datetime.now(UTC)
        export.stage = None
        export.hub_token_sealed = None  # the token was for this push only
