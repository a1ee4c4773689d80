from __future__ import annotations

import os
import subprocess
import sys

import httpx

from service.stack import LocalStack


def test_health_readiness_and_metrics(client: httpx.Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ready"}
    client.get("/v1/jobs")
    metrics = client.get("/metrics").text
    assert 'rft_http_request_duration_seconds_count{method="GET",route="/v1/jobs"' in metrics
    assert "rft_queue_depth" in metrics
    assert "rft_jobs{" in metrics or "# TYPE rft_jobs gauge" in metrics


def test_oversized_json_body_is_413(client: httpx.Client) -> None:
    body = b'{"reward_functions": {}, "padding": "' + b"x" * (11 * 1024 * 1024) + b'"}'
    response = client.post("/v1/jobs", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 413
    assert response.json()["error"] == "PayloadTooLarge"


def run_cli(stack: LocalStack, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, RFT_DATABASE_URL=stack.database_url or "")
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
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
