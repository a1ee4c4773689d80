"""A server whose sandbox cannot start (bubblewrap missing, no sandbox uid) answers 503 naming
what is missing, not a bare 500: seen on a GPU image without bubblewrap, where creating a job
failed with "Internal Server Error"."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.testclient import TestClient

from sandbox.isolation import SandboxUnavailableError
from service.errors import install_error_handlers


def test_a_sandbox_that_cannot_start_is_a_503_naming_the_cause() -> None:
    app = FastAPI()
    install_error_handlers(app)

    @app.post("/needs-the-sandbox")
    def needs_the_sandbox() -> None:
        raise SandboxUnavailableError("bubblewrap is not installed: install it")

    response = TestClient(app).post("/needs-the-sandbox")
    assert response.status_code == 503
    body = response.json()
    assert body["error"] == "SandboxUnavailable"
    assert "bubblewrap is not installed" in body["detail"]
    assert "sandbox that runs user code" in body["detail"]
