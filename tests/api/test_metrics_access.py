"""/metrics counts every tenant's jobs and requests: only a scraper holding the metrics token
reads it, and with no token configured it is off."""

from __future__ import annotations

import httpx
import pytest

from service.stack import LocalStack
from tests.api.conftest import IDLE_METRICS_TOKEN
from tests.conftest import new_tenant_key


@pytest.fixture(scope="module")
def api_with_metrics_token(idle_stack: LocalStack) -> LocalStack:
    """The API tests' idle stack, started with RFT_METRICS_TOKEN."""
    return idle_stack


def test_metrics_are_off_without_a_token(client: httpx.Client) -> None:
    client.get("/v1/jobs")
    # Not even for a tenant's API key: its tenant must not see the others' counts.
    for headers in ({}, {"Authorization": client.headers["Authorization"]}):
        response = httpx.get(f"{client.base_url}/metrics", headers=headers)
        assert response.status_code == 403, response.text
        assert "RFT_METRICS_TOKEN" in response.json()["detail"]
        assert "rft_jobs" not in response.text


def test_a_scraper_with_the_token_reads_everything(api_with_metrics_token: LocalStack) -> None:
    base = api_with_metrics_token.base_url
    api_key = new_tenant_key(api_with_metrics_token)
    httpx.get(f"{base}/v1/jobs", headers={"Authorization": f"Bearer {api_key}"})
    for refused in ({}, {"Authorization": f"Bearer {api_key}"}, {"Authorization": "Bearer x"}):
        response = httpx.get(f"{base}/metrics", headers=refused)
        assert response.status_code == 401, response.text
        assert "rft_jobs" not in response.text
    # What Prometheus sends with `authorization: {credentials: <token>}`.
    metrics = httpx.get(
        f"{base}/metrics", headers={"Authorization": f"Bearer {IDLE_METRICS_TOKEN}"}
    )
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
    assert 'rft_http_request_duration_seconds_count{method="GET",route="/v1/jobs"' in metrics.text
    assert "rft_queue_depth" in metrics.text
    assert "# TYPE rft_jobs gauge" in metrics.text
