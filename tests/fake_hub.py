"""A stand-in for the Hugging Face hub, the true outside edge: the model-info endpoint the API
asks at job creation, and the calls huggingface_hub's ``create_repo`` and ``upload_folder``
make for a push (create the repository, validate the model card, ask each file's upload mode,
commit). Every file is answered "regular" at preupload, so it arrives inline in the commit
(the hub's LFS and Xet transfers are huggingface_hub's business, not ours)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL_INFO_PREFIX = "/api/models/"
REPO_ACTION = re.compile(r"^/api/models/([^/]+/[^/]+)/(preupload|commit)/([^/?]+)")


@dataclass
class FakeRepo:
    private: bool
    files: dict[str, bytes] = field(default_factory=dict)
    commits: list[str] = field(default_factory=list)  # their messages, oldest first


@dataclass
class FakeHub:
    """The hub's state: ``models`` exist for model-info; pushes need ``token``."""

    endpoint: str = ""
    models: set[str] = field(default_factory=set)
    token: str | None = None
    repos: dict[str, FakeRepo] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


@contextlib.contextmanager
def fake_hub(models: set[str]) -> Iterator[str]:
    """Serve ``GET /api/models/<id>`` for ``models`` (404 RepoNotFound for others) on a free
    port; yields the endpoint URL, for HF_ENDPOINT or RFT_HUB_ENDPOINT."""
    with writable_fake_hub(models=models) as hub:
        yield hub.endpoint


@contextlib.contextmanager
def writable_fake_hub(
    *, token: str | None = None, models: set[str] | None = None
) -> Iterator[FakeHub]:
    """The fake hub, taking pushes authorized by ``token`` (Bearer); any other token is a 401,
    as the hub answers it. Yields its state, ``endpoint`` set."""
    hub = FakeHub(models=set(models or ()), token=token)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            repo_id = self.path.split("?")[0].removeprefix(MODEL_INFO_PREFIX)
            if self.path.split("?")[0] == "/api/whoami-v2":
                if self._authorized():
                    self._reply(200, {"type": "user", "name": "rft-test"})
                return
            if self._bad_token():
                return
            with hub.lock:
                known = repo_id in hub.models or repo_id in hub.repos
            if not self.path.startswith(MODEL_INFO_PREFIX) or not known:
                self._reply(
                    404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"}
                )
                return
            self._reply(200, {"id": repo_id, "modelId": repo_id, "sha": "0" * 40, "private": False})

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            path = self.path.split("?")[0]
            if path == "/api/validate-yaml":
                self._reply(200, {"errors": [], "warnings": []})
                return
            if not self._authorized():
                return
            if path == "/api/repos/create":
                self._create(json.loads(body))
                return
            action = REPO_ACTION.match(path)
            with hub.lock:
                repo = hub.repos.get(action.group(1)) if action else None
            if action is None or repo is None:
                self._reply(
                    404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"}
                )
            elif action.group(2) == "preupload":
                files = json.loads(body)["files"]
                modes = [
                    {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                    for f in files
                ]
                self._reply(200, {"files": modes})
            else:
                self._commit(action.group(1), repo, body)

        def _create(self, request: dict[str, object]) -> None:
            repo_id = f"{request['organization']}/{request['name']}"
            with hub.lock:
                exists = repo_id in hub.repos
                if not exists:
                    private = request.get("visibility", "public") == "private"
                    hub.repos[repo_id] = FakeRepo(private=bool(request.get("private", private)))
            url = f"{hub.endpoint}/{repo_id}"
            if exists:  # the hub names the repository in its 409 too
                self._reply(409, {"error": "You already created this model repo", "url": url})
            else:
                self._reply(200, {"url": url})

        def _commit(self, repo_id: str, repo: FakeRepo, body: bytes) -> None:
            lines = [json.loads(line) for line in body.splitlines() if line.strip()]
            files: dict[str, bytes] = {}
            message = ""
            for line in lines:
                if line["key"] == "header":
                    message = line["value"]["summary"]
                elif line["key"] == "file":
                    value = line["value"]
                    files[value["path"]] = base64.b64decode(value["content"])
                else:  # lfsFile, deletions: preupload never asks for them
                    self._reply(400, {"error": f"the fake hub takes no {line['key']}"})
                    return
            oid = hashlib.sha1(body).hexdigest()
            with hub.lock:
                repo.files.update(files)
                repo.commits.append(message)
            self._reply(
                200, {"commitUrl": f"{hub.endpoint}/{repo_id}/commit/{oid}", "commitOid": oid}
            )

        def _given_token(self) -> str | None:
            header = self.headers.get("Authorization") or ""
            return header.removeprefix("Bearer ") if header.startswith("Bearer ") else None

        def _bad_token(self) -> bool:
            """A token that is not the hub's: 401, whatever the call."""
            given = self._given_token()
            if given is not None and given != hub.token:
                self._reply(401, {"error": "Invalid credentials in Authorization header"})
                return True
            return False

        def _authorized(self) -> bool:
            if self._bad_token():
                return False
            if self._given_token() is None:
                self._reply(401, {"error": "You must be authenticated to write"})
                return False
            return True

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
    hub.endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()
