"""The FastAPI application."""

from __future__ import annotations

import logging

from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from service.api_docs.endpoints import router as api_docs_router
from service.api_docs.openapi import install_error_responses
from service.artifacts.endpoints import router as artifacts_router
from service.base_models.endpoints import router as base_models_router
from service.datasets.endpoints import router as datasets_router
from service.db import get_engine
from service.errors import ServiceUnavailable, install_error_handlers
from service.events.endpoints import router as events_router
from service.exports.endpoints import router as exports_router
from service.inference.endpoints import router as inference_router
from service.job_configs.endpoints import router as job_configs_router
from service.jobs.endpoints import router as jobs_router
from service.observability import configure_logging, install_observability
from service.openai_compat.files.endpoints import router as openai_files_router
from service.openai_compat.fine_tuning.endpoints import router as openai_fine_tuning_router
from service.openai_compat.graders.endpoints import router as openai_graders_router
from service.reports.endpoints import router as reports_router
from service.request_input import RequestInputGuard
from service.reward_functions.endpoints import router as reward_functions_router
from service.settings import get_settings
from service.ui.endpoints import router as ui_router
from service.usage.endpoints import router as usage_router
from service.webhooks.endpoints import router as webhooks_router


def create_app() -> FastAPI:
    app = FastAPI(
        title="rft",
        version="0.1.0",
        description="Reinforcement fine-tuning (GRPO + LoRA) with live reward updates.",
        # Served by service.api_docs from our own origin, so they work offline.
        docs_url=None,
        redoc_url=None,
    )
    settings = get_settings()
    if not logging.getLogger().handlers:
        # Served by uvicorn directly (the embedded stack, Docker's command), not through
        # rft-server: without this our own warnings would reach the log bare or not at all.
        configure_logging(settings.log_format)
    install_error_handlers(app)
    install_observability(app, settings)
    # Added last, so it runs first: refused input never takes a slot of RequestGate's cap,
    # and a JSON body is read in full before its request takes one.
    app.add_middleware(
        RequestInputGuard,
        max_request_bytes=settings.max_request_bytes,
        max_upload_bytes=settings.max_upload_bytes,
    )
    install_error_responses(app)
    app.include_router(api_docs_router)
    app.include_router(datasets_router)
    app.include_router(jobs_router)
    app.include_router(usage_router)
    app.include_router(job_configs_router)
    app.include_router(reports_router)
    app.include_router(reward_functions_router)
    app.include_router(artifacts_router)
    app.include_router(exports_router)
    app.include_router(base_models_router)
    app.include_router(events_router)
    app.include_router(webhooks_router)
    app.include_router(inference_router)
    app.include_router(openai_graders_router)
    app.include_router(openai_files_router)
    app.include_router(openai_fine_tuning_router)
    app.include_router(ui_router)

    @app.get("/healthz", tags=["operations"])
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["operations"])
    def readyz() -> dict[str, str]:
        try:
            with get_engine().connect() as connection:
                connection.execute(text("SELECT 1"))
        except OperationalError as exc:
            raise ServiceUnavailable("database unreachable") from exc
        return {"status": "ready"}

    return app


app = create_app()
