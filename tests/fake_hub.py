"""A stand-in for the Hugging Face hub's model-info endpoint, the one hub call the API makes."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL_INFO_PREFIX = "/api/models/"


@contextlib.contextmanager
def fake_hub(models: set[str]) -> Iterator[str]:
    """Serve ``GET /api/models/<id>`` for ``models`` (404 RepoNotFound for others) on a free
    port; yields the endpoint URL, for HF_ENDPOINT or RFT_HUB_ENDPOINT."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            repo_id = self.path.split("?")[0].removeprefix(MODEL_INFO_PREFIX)
            if not self.path.startswith(MODEL_INFO_PREFIX) or repo_id not in models:
                self._reply(
                    404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"}
                )
                return
            self._reply(200, {"id": repo_id, "modelId": repo_id, "sha": "0" * 40, "private": False})

        def _reply(
            self, status: int, body: dict[str, object], headers: dict[str, str] | None = None
        ) -> None:
            content = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(content)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(content)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
