from __future__ import annotations

import os
import subprocess
import sys
import uuid

import httpx

from service.stack import LocalStack


def test_health_and_readiness(client: httpx.Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ready"}


def test_oversized_json_body_is_413(client: httpx.Client) -> None:
    body = b'{"reward_functions": {}, "padding": "' + b"x" * (11 * 1024 * 1024) + b'"}'
    response = client.post("/v1/jobs", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 413
    assert response.json()["error"] == "PayloadTooLarge"


def run_cli(stack: LocalStack, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, RFT_DATABASE_URL=stack.database_url or "")
    return subprocess.run(
        [sys.executable, "-m", "server.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_api_keys_are_created_and_revoked_from_the_cli(stack: LocalStack) -> None:
    created = run_cli(stack, "create-key", "--tenant", "cli-tenant", "--name", "laptop")
    assert created.returncode == 0, created.stderr
    fields = dict(line.split(": ", 1) for line in created.stdout.splitlines() if ": " in line)
    key, key_id = fields["api key"], fields["key id"]
    headers = {"Authorization": f"Bearer {key}"}
    assert httpx.get(f"{stack.base_url}/v1/jobs", headers=headers).status_code == 200

    revoked = run_cli(stack, "revoke-key", "--tenant", "cli-tenant", key_id)
    assert revoked.returncode == 0, revoked.stderr
    assert httpx.get(f"{stack.base_url}/v1/jobs", headers=headers).status_code == 401
    assert run_cli(stack, "revoke-key", "--tenant", "nobody", key_id).returncode == 2

    unknown = run_cli(stack, "revoke-key", "--tenant", "cli-tenant", "key_doesnotexist")
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert unknown.stderr == (
        "rft-server revoke-key: tenant 'cli-tenant' has no API key 'key_doesnotexist'\n"
    )


def test_migrating_a_new_database_prints_one_line(stack: LocalStack) -> None:
    """No alembic INFO lines (plugins, each revision) on a first run: only the summary."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    from service.db import to_sqlalchemy_url

    server_url = make_url(to_sqlalchemy_url(stack.database_url or ""))
    name = f"quiet_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
        fresh = server_url.set(database=name).render_as_string(hide_password=False)
        migrated = subprocess.run(
            [sys.executable, "-m", "server.cli", "migrate"],
            capture_output=True,
            text=True,
            env=dict(os.environ, RFT_DATABASE_URL=fresh),
            timeout=120,
            check=False,
        )
        assert migrated.returncode == 0, migrated.stderr
        assert (migrated.stdout, migrated.stderr) == ("migrations applied\n", "")
        migrated_engine = create_engine(fresh)
        with migrated_engine.connect() as connection:
            assert connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
        migrated_engine.dispose()
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
