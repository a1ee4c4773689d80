"""Exports: a job's adapter merged into its base model, or shipped to a Hugging Face hub.

The API has no torch: it records the export (queued) and a worker builds it
(workers.export), reporting its stage and progress on the row. A merged archive lands in the
artifact store and downloads from there, streamed. Asking again for a merged archive of the
same adapter and dtype returns the export that is building or built instead of a second one.
Deleting an export that has ended removes its archive from the store with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from rft.models.exports import HubPush
from service.artifacts.repository import CheckpointRepository
from service.artifacts.storage import ArtifactStore
from service.db import after_commit
from service.errors import BadRequest, Conflict, NotFound
from service.exports.ownership import REQUEST_TOKEN
from service.exports.repository import ExportRepository
from service.exports.schemas import Export as ExportOut
from service.exports.schemas import ExportCreate
from service.exports.status import ExportStatus
from service.jobs.service import get_job
from service.jobs.status import JobStatus
from service.models import Export, Job, new_id
from service.secrets import seal
from service.settings import get_settings
from service.work_queue.queue import enqueue_export

BUILDING = {ExportStatus.QUEUED, ExportStatus.RUNNING}


class AdapterNotReady(Conflict):
    """The job has no final adapter (yet): it is still training, or ended without one."""


class ExportNotBuilt(Conflict):
    """No merged archive of this adapter is built or building."""


class ExportStillBuilding(Conflict):
    """The export is queued or running: a worker may be writing its archive right now."""


def create_export(
    session: Session,
    store: ArtifactStore,
    tenant_id: str,
    job_id: str,
    request: ExportCreate,
    *,
    idempotency_key: str | None = None,
) -> Export:
    # The job's row lock serializes requests for one job: two at once reuse one export.
    job = get_job(session, tenant_id, job_id, for_update=True)
    repository = ExportRepository(session)
    if idempotency_key is not None:
        retried = repository.get_by_idempotency_key(job.id, idempotency_key)
        if retried is not None:
            return retried
    hub = request.hub
    secret = hub.token_secret if hub is not None else None
    if secret is not None and secret not in job.secret_names:
        raise BadRequest(
            f"job {job.id} has no secret named {secret!r} (its secrets: "
            f"{sorted(job.secret_names) or 'none'}); add it with a config update, or give the "
            "token itself as hub.token"
        )
    if request.kind == "merged" and (job.hyperparameters or {}).get("adapter") == "full":
        raise BadRequest(
            f"job {job.id} trained every weight (adapter 'full'): there is no adapter to merge, "
            f"its download is already the whole model (GET /v1/jobs/{job.id}/adapter.tar.gz), "
            "and a hub push of it takes kind 'adapter'"
        )
    adapter_uri(session, store, job, request.checkpoint_step)
    if hub is None:
        reused = _reusable_archive(session, store, job.id, request.checkpoint_step, request.dtype)
        if reused is not None:
            return reused
    export = Export(
        id=new_id("exp"),
        job_id=job.id,
        kind=request.kind,
        checkpoint_step=request.checkpoint_step,
        dtype=request.dtype,
        hub_repo=hub.repo_id if hub else None,
        hub_private=hub.private if hub else True,
        hub_token_secret=hub.token_secret if hub else None,
        hub_token_sealed=(
            seal({REQUEST_TOKEN: hub.token.get_secret_value()}, get_settings())
            if hub is not None and hub.token is not None
            else None
        ),
        status=ExportStatus.QUEUED.value,
        progress=0.0,
        attempts=0,
        idempotency_key=idempotency_key,
    )
    repository.insert(export)
    export_id = export.id
    after_commit(session, lambda: enqueue_export(export_id))
    return export


def adapter_uri(
    session: Session, store: ArtifactStore, job: Job, checkpoint_step: int | None
) -> str:
    """Where the adapter to export is: 404 for a checkpoint the job does not have, 409 while
    the job has no final adapter."""
    if checkpoint_step is not None:
        checkpoint = CheckpointRepository(session).get_checkpoint(job.id, checkpoint_step)
        if checkpoint is None:
            raise NotFound(f"job {job.id} has no checkpoint at step {checkpoint_step}")
        uri = checkpoint.path
    elif job.adapter_path is None:
        raise AdapterNotReady(
            f"job {job.id} has no final adapter: it is {job.status}"
            + ("" if JobStatus(job.status).is_terminal else " (it gets one when it succeeds)")
            + "; export one of its checkpoints instead (checkpoint_step, GET "
            f"/v1/jobs/{job.id}/checkpoints lists them)"
        )
    else:
        uri = job.adapter_path
    if not store.exists(uri):
        raise NotFound(f"the adapter of job {job.id} is no longer in the artifact store")
    return uri


def _reusable_archive(
    session: Session, store: ArtifactStore, job_id: str, checkpoint_step: int | None, dtype: str
) -> Export | None:
    """The newest merged archive of this adapter and dtype that is building, or built and
    still in the store."""
    wanted = BUILDING | {ExportStatus.SUCCEEDED}
    for export in ExportRepository(session).merged_archives(job_id, checkpoint_step, dtype, wanted):
        if export.status != ExportStatus.SUCCEEDED.value or _stored_size(store, export):
            return export
    return None


def _stored_size(store: ArtifactStore, export: Export) -> int | None:
    """The size of the export's archive in the store; None when it has none (any more)."""
    return None if export.archive_uri is None else store.file_size(export.archive_uri)


def get_export(
    session: Session, tenant_id: str, job_id: str, export_id: str, *, for_update: bool = False
) -> Export:
    job = get_job(session, tenant_id, job_id)
    export = ExportRepository(session).get(job.id, export_id, for_update=for_update)
    if export is None:
        raise NotFound(f"job {job.id} has no export {export_id!r}")
    return export


def delete_export(
    session: Session, store: ArtifactStore, tenant_id: str, job_id: str, export_id: str
) -> None:
    """The export's archive out of the store, then its row; 409 while it is queued or running
    (nothing cancels a build). A hub push's repository is not touched: it is the user's."""
    # Locked, so that of two deletes at once the second waits and then finds no export (404)
    # instead of answering as though it had deleted it too.
    export = get_export(session, tenant_id, job_id, export_id, for_update=True)
    if ExportStatus(export.status) in BUILDING:
        raise ExportStillBuilding(
            f"export {export.id} is {export.status}; an export can be deleted once it has ended "
            "(succeeded or failed), and a build cannot be cancelled: wait for it (GET "
            f"/v1/jobs/{export.job_id}/exports/{export.id}), then delete it"
        )
    # The archive goes first and the row in the same transaction after it: a store that
    # fails leaves both, to retry; a commit that fails after the archive went leaves a row
    # whose archive is missing, which downloads and reuse already treat as never built, and
    # which a second delete removes (a missing archive is no error).
    if export.archive_uri is not None:
        store.delete_file(export.archive_uri)
    ExportRepository(session).delete(export)


def list_exports(session: Session, tenant_id: str, job_id: str) -> list[Export]:
    job = get_job(session, tenant_id, job_id)
    return ExportRepository(session).list_for_job(job.id)


@dataclass(frozen=True)
class MergedArchive:
    export: Export
    # The stored archive's size when ``export.archive_uri`` downloads now; None: building.
    size_bytes: int | None


def merged_archive(
    session: Session,
    store: ArtifactStore,
    tenant_id: str,
    job_id: str,
    checkpoint_step: int | None,
    dtype: str,
) -> MergedArchive:
    """The merged archive to download, or the export still building it; 409 when none is
    built or building (it says how to start one, or why the last one failed)."""
    job = get_job(session, tenant_id, job_id)
    adapter_uri(session, store, job, checkpoint_step)
    exports = ExportRepository(session).merged_archives(
        job.id, checkpoint_step, dtype, BUILDING | {ExportStatus.SUCCEEDED, ExportStatus.FAILED}
    )
    for export in exports:
        size = _stored_size(store, export) if export.status == ExportStatus.SUCCEEDED else None
        if size is not None or ExportStatus(export.status) in BUILDING:
            return MergedArchive(export, size_bytes=size)
    which = "final adapter" if checkpoint_step is None else f"checkpoint at step {checkpoint_step}"
    start = (
        f"POST /v1/jobs/{job.id}/exports with "
        f'{{"kind": "merged", "checkpoint_step": {_json(checkpoint_step)}, "dtype": "{dtype}"}}'
    )
    failed = next((e for e in exports if e.status == ExportStatus.FAILED.value), None)
    if failed is not None:
        raise ExportNotBuilt(
            f"the last merged export of job {job.id}'s {which} ({failed.id}) failed: "
            f"{failed.failure_reason}; {start} tries again"
        )
    raise ExportNotBuilt(
        f"no merged archive of job {job.id}'s {which} (dtype {dtype}) has been built; {start} "
        "builds one"
    )


def _json(value: int | None) -> str:
    return "null" if value is None else str(value)


def merged_download_path(job_id: str, checkpoint_step: int | None, dtype: str) -> str:
    base = (
        f"/v1/jobs/{job_id}/merged.tar.gz"
        if checkpoint_step is None
        else f"/v1/jobs/{job_id}/checkpoints/{checkpoint_step}/merged.tar.gz"
    )
    return base if dtype == "auto" else f"{base}?dtype={dtype}"


def archive_name(job_id: str, checkpoint_step: int | None) -> str:
    """The archive's file name without .tar.gz, and the folder inside it."""
    if checkpoint_step is None:
        return f"{job_id}-merged"
    return f"{job_id}-step-{checkpoint_step}-merged"


def to_schema(export: Export) -> ExportOut:
    hub = (
        HubPush(
            repo_id=export.hub_repo,
            private=export.hub_private,
            token_secret=export.hub_token_secret,
            commit_url=export.hub_commit_url,
        )
        if export.hub_repo is not None
        else None
    )
    archive = export.kind == "merged" and export.hub_repo is None
    return ExportOut(
        id=export.id,
        job_id=export.job_id,
        kind=export.kind,  # type: ignore[arg-type]
        checkpoint_step=export.checkpoint_step,
        dtype=export.dtype,  # type: ignore[arg-type]
        hub=hub,
        status=ExportStatus(export.status),
        stage=export.stage,  # type: ignore[arg-type]
        progress=export.progress,
        failure_reason=export.failure_reason,
        size_bytes=export.size_bytes,
        download_path=(
            merged_download_path(export.job_id, export.checkpoint_step, export.dtype)
            if archive
            else None
        ),
        created_at=export.created_at,
        started_at=export.started_at,
        finished_at=export.finished_at,
    )
