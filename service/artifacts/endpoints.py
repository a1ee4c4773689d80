from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import FileResponse
from starlette.background import BackgroundTask

from service.artifacts import service
from service.artifacts.schemas import CheckpointList
from service.artifacts.storage import artifact_store
from service.auth.dependencies import CurrentTenant
from service.db import SessionDep
from service.parameters import CheckpointStep
from service.settings import get_settings

router = APIRouter(prefix="/v1/jobs/{job_id}", tags=["artifacts"])


def _archive_response(uri: str, name: str, base_model: str) -> FileResponse:
    archive = service.pack_adapter(artifact_store(get_settings()), uri, name, base_model)
    return FileResponse(
        archive,
        media_type="application/gzip",
        filename=f"{name}.tar.gz",
        background=BackgroundTask(archive.unlink, missing_ok=True),
    )


@router.get("/checkpoints", response_model=CheckpointList)
def list_checkpoints(session: SessionDep, tenant_id: CurrentTenant, job_id: str) -> CheckpointList:
    return service.list_checkpoints(session, tenant_id, job_id)


@router.get("/checkpoints/{step}/adapter.tar.gz", response_class=FileResponse)
def download_checkpoint(
    session: SessionDep, tenant_id: CurrentTenant, job_id: str, step: CheckpointStep
) -> FileResponse:
    """The checkpoint's LoRA adapter as a PEFT directory (load with PeftModel.from_pretrained)."""
    uri = service.checkpoint_uri(session, tenant_id, job_id, step)
    base_model = service.base_model_of(session, tenant_id, job_id)
    return _archive_response(uri, f"{job_id}-step-{step}", base_model)


@router.get("/adapter.tar.gz", response_class=FileResponse)
def download_adapter(session: SessionDep, tenant_id: CurrentTenant, job_id: str) -> FileResponse:
    """The final LoRA adapter of a finished job."""
    uri = service.final_adapter_uri(session, tenant_id, job_id)
    base_model = service.base_model_of(session, tenant_id, job_id)
    return _archive_response(uri, f"{job_id}-adapter", base_model)
