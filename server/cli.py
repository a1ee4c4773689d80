"""`rft-server`: run the service (embedded or against given servers), migrate, manage keys."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from service.errors import NotFound, RFTError
from service.observability import configure_logging
from service.settings import Settings, get_settings

DEMO_DIR = Path(__file__).resolve().parent / "demo"
DEV_TENANT = "default"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rft-server", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    up = commands.add_parser("up", help="run Postgres, Redis, the API and a worker on this machine")
    up.add_argument("--demo", action="store_true", help="submit the demo job and follow it")
    up.add_argument("--port", type=int, default=None, help="API port (default: RFT_API_PORT)")
    up.add_argument("--workers", type=int, default=1)
    up.add_argument(
        "--exit-after-demo", action="store_true", help="stop everything once the demo job ends"
    )

    commands.add_parser("migrate", help="apply database migrations (RFT_DATABASE_URL)")
    api = commands.add_parser("api", help="serve the HTTP API (RFT_DATABASE_URL, RFT_REDIS_URL)")
    api.add_argument("--host", default=None)
    api.add_argument("--port", type=int, default=None)
    api.add_argument(
        "--workers", type=int, default=1, help="uvicorn processes (more serve more reads)"
    )
    api.add_argument("--access-log", action="store_true", help="log every request")
    worker = commands.add_parser("worker", help="run one training worker (one per GPU)")
    worker.add_argument(
        "--exports-only",
        action="store_true",
        help="take only exports (merged models, hub pushes), no training jobs",
    )
    inference = commands.add_parser(
        "inference", help="serve generations for /v1/chat/completions (RFT_INFERENCE_URL)"
    )
    inference.add_argument("--host", default=None, help="default: RFT_INFERENCE_HOST")
    inference.add_argument("--port", type=int, default=None, help="default: RFT_INFERENCE_PORT")

    create_key = commands.add_parser("create-key", help="issue an API key for a tenant")
    create_key.add_argument("--tenant", required=True)
    create_key.add_argument("--name", default="")
    revoke_key = commands.add_parser("revoke-key", help="revoke an API key by its id")
    revoke_key.add_argument("--tenant", required=True)
    revoke_key.add_argument("key_id")

    args = parser.parse_args(argv)
    configure_logging(get_settings().log_format)
    try:
        return int(COMMANDS[args.command](args) or 0)
    except RFTError as error:
        # What the API would answer as a 4xx is the operator's mistake: one line, no traceback.
        print(f"rft-server {args.command}: {error.detail}", file=sys.stderr)
        return 1


def _up(args: argparse.Namespace) -> int:
    from service.stack import LocalStack

    settings = get_settings()
    stack = LocalStack(
        settings.state_dir,
        database_url=settings.database_url,
        redis_url=settings.redis_url,
        api_port=args.port or settings.api_port,
        workers=args.workers,
        inference=True,
        inference_url=settings.inference_url,
    )
    # SIGTERM (docker stop, kill) takes the same orderly path as Ctrl-C.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    print("starting the stack (embedded servers where no URL is configured)...", flush=True)
    with stack:
        key = _dev_api_key(stack.database_url or "", settings.state_dir)
        print(f"\nrft is up: {stack.base_url}  (API docs: {stack.base_url}/docs)")
        print(f"dashboard: {stack.base_url}/ui/  (sign in with the key below)")
        print(f"development API key (tenant {DEV_TENANT!r}): {key}")
        print(f"chat with models: {stack.base_url}/v1/chat/completions (RFT_INFERENCE_URL)")
        print(f"logs: {stack.log_dir}\n", flush=True)
        try:
            if args.demo:
                from service.demo.follow import run_demo

                ok = run_demo(stack.base_url, key)
                if args.exit_after_demo:
                    return 0 if ok else 1
            print("press Ctrl-C to stop", flush=True)
            while True:
                time.sleep(1)
                if stack.api is not None and stack.api.poll() is not None:
                    print("the API exited; stopping", file=sys.stderr)
                    return 1
        except KeyboardInterrupt:
            print("\nstopping...", flush=True)
    return 0


def _dev_api_key(database_url: str, state_dir: Path) -> str:
    """A development key kept in the state folder, so it survives restarts of `up`."""
    from service.auth.service import KEY_PREFIX, ensure_api_key
    from service.db import session_scope

    os.environ["RFT_DATABASE_URL"] = database_url
    get_settings.cache_clear()
    key_file = state_dir / "dev_api_key"
    configured = get_settings().bootstrap_api_key
    if configured is not None:
        key = configured.get_secret_value()
    elif key_file.exists():
        key = key_file.read_text().strip()
    else:
        import secrets

        key = KEY_PREFIX + secrets.token_urlsafe(32)
        key_file.parent.mkdir(parents=True, exist_ok=True)
        key_file.touch(mode=0o600)
        key_file.write_text(key)
    with session_scope() as session:
        ensure_api_key(session, DEV_TENANT, key)
    return key


def _migrate(_: argparse.Namespace) -> int:
    from service.stack import run_migrations

    run_migrations(get_settings().require_database_url())
    print("migrations applied")
    return 0


def _api(args: argparse.Namespace) -> int:
    import uvicorn

    settings = get_settings()
    settings.require_database_url()
    uvicorn.run(
        "service.app:app",
        host=args.host or settings.api_host,
        port=args.port or settings.api_port,
        workers=args.workers,
        # Request metrics live at /metrics; a log line per request costs ~1 ms at scale.
        access_log=args.access_log,
    )
    return 0


def _worker(args: argparse.Namespace) -> int:
    settings = get_settings()
    settings.require_database_url()
    settings.require_redis_url()
    from service.work_queue.celery_app import EXPORTS_QUEUE, celery_app

    if args.exports_only:
        # No GPU checks: a merge runs on the CPU (and on no job's devices).
        celery_app.worker_main(
            ["worker", "--pool", "solo", "--concurrency", "1", "--queues", EXPORTS_QUEUE,
             "--loglevel", "INFO", "--without-gossip", "--without-mingle"]
        )  # fmt: skip
        return 0
    from workers.training.cuda import probe_cuda

    cuda = probe_cuda()
    problem = cuda.problem()
    if problem is not None:
        # GPUs it cannot use: its jobs would train on CPU without saying so.
        print(problem, file=sys.stderr)
        return 2
    gpus = cuda.usable_gpus
    if gpus and settings.resolved_worker_devices > gpus:
        # It would take jobs it cannot hold (their ranks would share or miss GPUs).
        print(
            f"RFT_WORKER_DEVICES={settings.resolved_worker_devices}, but this worker sees "
            f"{gpus} GPU(s) (CUDA_VISIBLE_DEVICES): give it at most {gpus}",
            file=sys.stderr,
        )
        return 2
    _keep_vllm_cache(settings)
    celery_app.worker_main(
        ["worker", "--pool", "solo", "--concurrency", "1",
         "--loglevel", "INFO", "--without-gossip", "--without-mingle"]
    )  # fmt: skip
    return 0


def _keep_vllm_cache(settings: Settings) -> None:
    """vLLM compiles each model for its shapes (tens of seconds at 8B, every job's engine):
    unless the operator chose a place, keep its cache under the state folder, so the next job
    (and the next worker process) loads the compiled artifacts instead of compiling again."""
    os.environ.setdefault("VLLM_CACHE_ROOT", str(settings.state_dir.resolve() / "vllm-cache"))


def _inference(args: argparse.Namespace) -> int:
    _keep_vllm_cache(get_settings())
    from workers.inference.server import serve

    serve(host=args.host, port=args.port)
    return 0


def _create_key(args: argparse.Namespace) -> int:
    from service.auth.service import get_or_create_tenant, issue_api_key
    from service.db import session_scope

    with session_scope() as session:
        tenant = get_or_create_tenant(session, args.tenant)
        issued = issue_api_key(session, tenant, name=args.name)
    print(f"tenant: {args.tenant} ({issued.tenant_id})\nkey id: {issued.id}\napi key: {issued.key}")
    print("the key is shown only now; store it safely")
    return 0


def _revoke_key(args: argparse.Namespace) -> int:
    from service.auth.repository import AuthRepository
    from service.auth.service import revoke_api_key
    from service.db import session_scope

    with session_scope() as session:
        tenant = AuthRepository(session).get_tenant_by_name(args.tenant)
        if tenant is None:
            print(f"no tenant named {args.tenant!r}", file=sys.stderr)
            return 2
        try:
            revoke_api_key(session, tenant.id, args.key_id)
        except NotFound:
            raise NotFound(f"tenant {args.tenant!r} has no API key {args.key_id!r}") from None
    print(f"revoked {args.key_id}")
    return 0


COMMANDS = {
    "up": _up,
    "migrate": _migrate,
    "api": _api,
    "worker": _worker,
    "inference": _inference,
    "create-key": _create_key,
    "revoke-key": _revoke_key,
}

if __name__ == "__main__":
    sys.exit(main())
