"""The whole service on one machine: Postgres and Redis (embedded unless URLs are given),
migrations, the API and training workers as child processes. `rft-server up` and the
integration tests both run it, so the tests exercise the same entry points as users."""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import httpx

from service.embedded import EmbeddedPostgres, EmbeddedRedis, free_port
from service.settings import Settings

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[1]


def run_migrations(database_url: str) -> None:
    from alembic import command
    from alembic.config import Config

    config = Config(str(REPO_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(REPO_ROOT / "migrations"))
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    command.upgrade(config, "head")


class LocalStack:
    def __init__(
        self,
        state_dir: Path,
        *,
        database_url: str | None = None,
        redis_url: str | None = None,
        api_port: int | None = None,
        workers: int = 1,
        extra_env: dict[str, str] | None = None,
        log_dir: Path | None = None,
        inference: bool = False,
        inference_url: str | None = None,
    ) -> None:
        self.state_dir = state_dir.resolve()
        self.database_url = database_url
        self.redis_url = redis_url
        self.api_port = api_port or free_port()
        self.worker_count = workers
        self.extra_env = extra_env or {}
        self.log_dir = (log_dir or self.state_dir / "logs").resolve()
        self._postgres: EmbeddedPostgres | None = None
        self._redis: EmbeddedRedis | None = None
        self.api: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes]] = []
        self._worker_serial = 0
        # The API always knows where the inference server is meant to be; the server itself
        # starts with the stack (`inference=True`, as `rft-server up` does) or later, on first
        # need (start_inference), since it loads torch and models that most tests never use.
        # A given inference_url is someone else's server: the stack then starts none.
        self.start_inference_with_stack = inference and inference_url is None
        self.inference_port = free_port()
        self.inference_url = inference_url or f"http://127.0.0.1:{self.inference_port}"
        self.inference_managed = inference_url is None
        self.inference: subprocess.Popen[bytes] | None = None
        # What the API sends the inference server and the server requires: the configured
        # token, else one made up for this stack (neither process has another to share).
        configured = Settings().inference_token
        self.inference_token = (
            configured.get_secret_value() if configured else secrets.token_urlsafe(32)
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def start(self) -> LocalStack:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            if not self.database_url:
                self._postgres = EmbeddedPostgres(self.state_dir / "postgres")
                self.database_url = self._postgres.start()
            if not self.redis_url:
                self._redis = EmbeddedRedis(self.state_dir / "redis")
                self.redis_url = self._redis.start()
            run_migrations(self.database_url)
            self.start_api()
            for _ in range(self.worker_count):
                self.start_worker()
            if self.start_inference_with_stack:
                self.start_inference()
        except BaseException:
            self.stop()
            raise
        return self

    def child_env(self) -> dict[str, str]:
        assert self.database_url and self.redis_url
        env = dict(os.environ)
        env.update(
            {
                "RFT_DATABASE_URL": self.database_url,
                "RFT_REDIS_URL": self.redis_url,
                "RFT_STATE_DIR": str(self.state_dir),
                "RFT_INFERENCE_URL": self.inference_url,
                "RFT_INFERENCE_TOKEN": self.inference_token,
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(self.extra_env)
        return env

    def _spawn(self, args: list[str], log_name: str) -> subprocess.Popen[bytes]:
        log = open(self.log_dir / log_name, "ab")  # noqa: SIM115 - the child owns it
        return subprocess.Popen(
            args,
            env=self.child_env(),
            cwd=REPO_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C reaches us; we stop the children in order
        )

    def start_api(self) -> None:
        self.api = self._spawn(
            [
                sys.executable, "-m", "uvicorn", "service.app:app",
                "--host", "127.0.0.1", "--port", str(self.api_port), "--log-level", "warning",
            ],
            "api.log",
        )  # fmt: skip
        self.wait_until_ready()

    def start_worker(self) -> subprocess.Popen[bytes]:
        self._worker_serial += 1
        name = f"worker{self._worker_serial}"
        worker = self._spawn(
            [
                sys.executable, "-m", "celery", "-A", "service.work_queue.celery_app", "worker",
                "--pool", "solo", "--concurrency", "1",
                "--hostname", f"{name}@%h", "--loglevel", "INFO", "--without-gossip",
                "--without-mingle",
            ],
            f"{name}.log",
        )  # fmt: skip
        self.workers.append(worker)
        return worker

    def start_inference(self, timeout_s: float = 180) -> None:
        """Start the inference server (once) and wait until it answers."""
        if not self.inference_managed:
            raise RuntimeError(f"the inference server at {self.inference_url} is not the stack's")
        if self.inference is not None and self.inference.poll() is None:
            return
        self.inference = self._spawn(
            [
                sys.executable, "-m", "server.cli", "inference",
                "--host", "127.0.0.1", "--port", str(self.inference_port),
            ],
            "inference.log",
        )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.inference.poll() is not None:
                raise RuntimeError(
                    f"the inference server exited; see {self.log_dir / 'inference.log'}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.inference_url}/healthz", timeout=1).status_code == 200:
                    return
            time.sleep(0.2)
        raise RuntimeError(f"the inference server was not ready within {timeout_s} s")

    # Fault injection (tests, chaos drills): the same servers the stack runs, broken on purpose.
    def kill_worker(self, worker: subprocess.Popen[bytes]) -> None:
        """SIGKILL a worker and everything it started, as a lost machine would."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.pid, 9)
        worker.wait()
        self.workers.remove(worker)

    def stop_postgres(self) -> None:
        if self._postgres is None:
            raise RuntimeError("only an embedded Postgres can be stopped by the stack")
        self._postgres.stop()

    def start_postgres(self) -> None:
        if self._postgres is None:
            raise RuntimeError("only an embedded Postgres can be started by the stack")
        self._postgres.start()

    def restart_redis(self) -> None:
        """Stop Redis and start it again on the same port, empty (no persistence)."""
        if self._redis is None:
            raise RuntimeError("only an embedded Redis can be restarted by the stack")
        self._redis.stop()
        self._redis.start()

    def wait_until_ready(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.api is not None and self.api.poll() is not None:
                raise RuntimeError(f"the API exited; see {self.log_dir / 'api.log'}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.base_url}/readyz", timeout=1).status_code == 200:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"the API was not ready within {timeout_s} s")

    def stop(self) -> None:
        for process in [*self.workers, self.inference, self.api]:
            if process is not None and process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, 15)
        for process in [*self.workers, self.inference, self.api]:
            if process is None:
                continue
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, 9)
                process.wait()
        self.workers.clear()
        self.inference = None
        self.api = None
        if self._redis is not None:
            self._redis.stop()
        if self._postgres is not None:
            self._postgres.stop()

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
