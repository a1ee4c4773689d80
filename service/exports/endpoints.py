from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Path, Query, Response, status
from fastapi.responses import JSONResponse, StreamingResponse
from sqlalchemy.orm import Session

from service.artifacts.storage import artifact_store
from service.auth.dependencies import CurrentTenant
from service.db import SessionDep
from service.errors import error_responses
from service.exports import service
from service.exports.schemas import Export, ExportCreate, ExportDtype, ExportList
from service.parameters import CheckpointStep
from service.settings import get_settings

router = APIRouter(prefix="/v1/jobs/{job_id}", tags=["exports"])

ExportId = Annotated[str, Path(max_length=64, description="The export's id (exp_...).")]
MergedDtype = Annotated[
    ExportDtype, Query(description="The merged weights' dtype the export was asked for.")
]
# How long a client waiting for a merged archive sleeps between polls.
POLL_AFTER_S = 5
ARCHIVE_RESPONSES: dict[int | str, dict[str, object]] = {
    200: {"content": {"application/gzip": {}}, "description": "The merged model's archive."},
    202: {"model": Export, "description": "Still building: the export (Location: its URL)."},
    **error_responses(404, 409),
}


def _export_path(export: Export) -> str:
    return f"/v1/jobs/{export.job_id}/exports/{export.id}"


@router.post(
    "/exports",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=Export,
    responses=error_responses(400, 404, 409),
)
def create_export(
    session: SessionDep,
    tenant_id: CurrentTenant,
    job_id: str,
    payload: ExportCreate,
    response: Response,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> Export:
    """Build a merged model (the base model with the adapter merged in: safetensors, loads
    with ``AutoModelForCausalLM.from_pretrained``) or push the adapter or a merged model to a
    Hugging Face hub repository, in the background on a worker. Poll the export (Location) for
    its stage and progress. A merged archive already built or building for the same adapter
    and dtype is returned instead of a second one, as is the export of an earlier request with
    the same Idempotency-Key. 404: no such job or checkpoint; 409: the job has no final adapter
    yet (export a checkpoint)."""
    store = artifact_store(get_settings())
    created = service.create_export(
        session, store, tenant_id, job_id, payload, idempotency_key=idempotency_key
    )
    export = service.to_schema(created)
    response.headers["Location"] = _export_path(export)
    return export


@router.get("/exports", response_model=ExportList)
def list_exports(session: SessionDep, tenant_id: CurrentTenant, job_id: str) -> ExportList:
    """The job's exports, newest first."""
    exports = service.list_exports(session, tenant_id, job_id)
    return ExportList(data=[service.to_schema(export) for export in exports])


@router.get("/exports/{export_id}", response_model=Export, responses=error_responses(404))
def get_export(
    session: SessionDep, tenant_id: CurrentTenant, job_id: str, export_id: ExportId
) -> Export:
    return service.to_schema(service.get_export(session, tenant_id, job_id, export_id))


@router.delete(
    "/exports/{export_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses=error_responses(404, 409),
)
def delete_export(
    session: SessionDep, tenant_id: CurrentTenant, job_id: str, export_id: ExportId
) -> Response:
    """Delete an export that has ended, and its merged archive from the artifact store. 409
    while it is queued or running: builds cannot be cancelled, so wait for it to end. A hub
    push's repository is left as it is."""
    store = artifact_store(get_settings())
    service.delete_export(session, store, tenant_id, job_id, export_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/merged.tar.gz", response_class=StreamingResponse, responses=ARCHIVE_RESPONSES)
def download_merged(
    session: SessionDep, tenant_id: CurrentTenant, job_id: str, dtype: MergedDtype = "auto"
) -> Response:
    """The final adapter merged into the base model, as a .tar.gz of a Hugging Face model
    folder, once a merged export built it (POST .../exports). While one is building: 202 with
    the export (Location: its URL, Retry-After: when to look again). None built or building:
    409 saying how to start one (or why the last one failed)."""
    return _merged_response(session, tenant_id, job_id, None, dtype)


@router.get(
    "/checkpoints/{step}/merged.tar.gz",
    response_class=StreamingResponse,
    responses=ARCHIVE_RESPONSES,
)
def download_checkpoint_merged(
    session: SessionDep,
    tenant_id: CurrentTenant,
    job_id: str,
    step: CheckpointStep,
    dtype: MergedDtype = "auto",
) -> Response:
    """A checkpoint's adapter merged into the base model; see ``GET .../merged.tar.gz``."""
    return _merged_response(session, tenant_id, job_id, step, dtype)


def _merged_response(
    session: Session, tenant_id: str, job_id: str, step: int | None, dtype: str
) -> Response:
    store = artifact_store(get_settings())
    found = service.merged_archive(session, store, tenant_id, job_id, step, dtype)
    export = service.to_schema(found.export)
    if found.size_bytes is None or found.export.archive_uri is None:
        return JSONResponse(
            export.model_dump(mode="json"),
            status_code=status.HTTP_202_ACCEPTED,
            headers={"Location": _export_path(export), "Retry-After": str(POLL_AFTER_S)},
        )
    name = service.archive_name(export.job_id, step)
    headers = {
        "Content-Disposition": f'attachment; filename="{name}.tar.gz"',
        "Content-Length": str(found.size_bytes),
    }
    # Read from the store a piece at a time as the client takes it: a merged model is GBs.
    return StreamingResponse(
        store.read_file(found.export.archive_uri), media_type="application/gzip", headers=headers
    )
