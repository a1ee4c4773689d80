"""A base model's config.json as the API reads it for the GPU-memory check: from a local
directory, or from the hub (a stand-in serving the hub's file URLs)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from service.base_models.model_config import read_model_files
from service.settings import Settings
from tests.unit.test_memory_plan import QWEN25_7B

INDEX = {"metadata": {"total_size": 15_231_233_024}, "weight_map": {}}


@contextlib.contextmanager
def hub_serving(files: dict[str, dict[str, object]]) -> Iterator[str]:
    """``GET /<repo>/resolve/main/<file>`` for ``files`` (keyed by that path), 404 else."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = files.get(self.path)
            content = json.dumps(body).encode() if body is not None else b"{}"
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_local_model_directory(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(QWEN25_7B))
    files = read_model_files(str(tmp_path), Settings())
    assert files is not None and files.config == QWEN25_7B and files.checkpoint_bytes is None
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(INDEX))
    files = read_model_files(str(tmp_path), Settings())
    assert files is not None and files.checkpoint_bytes == 15_231_233_024
    # Not on the API host, or not readable: not checked.
    assert read_model_files(str(tmp_path / "elsewhere"), Settings()) is None
    (tmp_path / "config.json").write_text("not json")
    assert read_model_files(str(tmp_path), Settings()) is None


def test_a_hub_model_unless_the_hub_is_not_to_be_asked() -> None:
    served = {
        "/org/qwen/resolve/main/config.json": QWEN25_7B,
        "/org/qwen/resolve/main/model.safetensors.index.json": INDEX,
        "/org/single/resolve/main/config.json": QWEN25_7B,
    }
    with hub_serving(served) as endpoint:
        settings = Settings(hub_endpoint=endpoint)
        files = read_model_files("org/qwen", settings)
        assert files is not None and files.config == QWEN25_7B
        assert files.checkpoint_bytes == 15_231_233_024
        single = read_model_files("org/single", settings)
        assert single is not None and single.checkpoint_bytes is None
        assert read_model_files("org/missing", settings) is None
        assert (
            read_model_files("org/qwen", Settings(hub_endpoint=endpoint, hub_check="off")) is None
        )
    assert read_model_files("rft-tiny", Settings()) is None
