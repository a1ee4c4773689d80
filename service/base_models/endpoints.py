from __future__ import annotations

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse

from service.auth.dependencies import CurrentTenant
from service.base_models.download import base_model_archive
from service.errors import error_responses
from service.settings import get_settings

router = APIRouter(prefix="/v1/models", tags=["base models"])


@router.get("/{name}/download", response_class=FileResponse, responses=error_responses(404, 503))
async def download_base_model(tenant_id: CurrentTenant, name: str) -> FileResponse:
    """The built-in ``rft-tiny`` model as a .tar.gz of its folder (config, weights, tokenizer).

    Unpack it and load with ``from_pretrained``; from the folder that holds ``rft-tiny/``, an
    adapter of a job on rft-tiny loads with ``AutoPeftModelForCausalLM.from_pretrained``.
    """
    # The first request builds the model (seconds of CPU): off the event loop.
    archive = await run_in_threadpool(base_model_archive, name, get_settings())
    return FileResponse(archive, media_type="application/gzip", filename=f"{name}.tar.gz")
