"""The inference server (`rft-server inference`): generation for the API's chat endpoints.

Why a process of its own: the API has no torch (and must stay light and quick to restart),
and a training worker's memory belongs to its job. This process holds base models and LoRA
adapters in memory across requests (workers.inference.pool) and answers one internal route,
``POST /v1/generate``, with plain generations (whole, or streamed as NDJSON lines); the API
resolves model names and tenants and speaks OpenAI's format. It has no database and no tenants:
each generation needs RFT_INFERENCE_TOKEN, which only the API holds, and it binds 127.0.0.1
unless RFT_INFERENCE_HOST says otherwise (docs/security.md).

Generation uses vLLM's multi-LoRA serving where vLLM runs (RFT_GENERATION_BACKEND, decided as
for training jobs), transformers + PEFT otherwise; ``/healthz`` says which (``backend``).
"""

from __future__ import annotations

import hmac
import itertools
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import Depends, FastAPI, Header, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import SecretStr

from service.inference.protocol import GenerationRequest, GenerationResult, StreamLine
from service.settings import get_settings
from workers.inference.pool import InferenceInputError, ModelPool

logger = logging.getLogger(__name__)


def create_app(pool: ModelPool | None = None, token: SecretStr | None = None) -> FastAPI:
    """The server; ``token`` (default RFT_INFERENCE_TOKEN) is required on every generation."""
    expected = (token or get_settings().inference_token or SecretStr("")).get_secret_value()
    if not expected:
        raise RuntimeError(
            "RFT_INFERENCE_TOKEN is not set: the inference server has no tenants of its own, so "
            "it answers only the API, which sends this token (set the same value on both)"
        )

    def require_token(authorization: Annotated[str | None, Header()] = None) -> None:
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode(), expected.encode()
        ):
            raise HTTPException(status_code=401, detail="the inference server answers only the API")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.pool = pool or ModelPool(get_settings())
        yield
        if pool is None:  # ours: vLLM engines are processes of their own, stopped with us
            app.state.pool.close()

    app = FastAPI(title="rft inference", lifespan=lifespan, docs_url=None, redoc_url=None)

    @app.exception_handler(InferenceInputError)
    async def _input_error(_: Request, exc: InferenceInputError) -> JSONResponse:
        return JSONResponse(status_code=400, content={"error": "BadRequest", "detail": str(exc)})

    @app.exception_handler(OSError)
    async def _load_error(_: Request, exc: OSError) -> JSONResponse:
        # transformers raises OSError for a model it cannot find or download.
        return JSONResponse(
            status_code=400, content={"error": "ModelNotLoadable", "detail": str(exc)}
        )

    @app.get("/healthz")
    def healthz(request: Request) -> dict[str, str]:
        model_pool: ModelPool = request.app.state.pool
        return {"status": "ok", "backend": model_pool.backend}

    @app.post(
        "/v1/generate", response_model=GenerationResult, dependencies=[Depends(require_token)]
    )
    async def generate(body: GenerationRequest, request: Request) -> Response:
        model_pool: ModelPool = request.app.state.pool
        if not body.stream:
            result = await run_in_threadpool(model_pool.generate, body)
            return JSONResponse(result.model_dump(mode="json"))
        pieces = model_pool.stream(body)
        # The first piece is taken before answering: a model that cannot load is a 400,
        # not a broken 200 stream.
        first = await run_in_threadpool(next, pieces)
        return StreamingResponse(
            _ndjson(itertools.chain([first], pieces)), media_type="application/x-ndjson"
        )

    return app


def _ndjson(pieces: Iterator[str | GenerationResult]) -> Iterator[bytes]:
    for piece in pieces:
        line = (
            StreamLine(result=piece)
            if isinstance(piece, GenerationResult)
            else StreamLine(delta=piece)
        )
        yield line.model_dump_json(exclude_none=True).encode() + b"\n"


def serve(host: str | None = None, port: int | None = None) -> None:
    import uvicorn

    settings = get_settings()
    uvicorn.run(
        create_app(),
        host=host or settings.inference_host,
        port=port or settings.inference_port,
        access_log=False,
    )
