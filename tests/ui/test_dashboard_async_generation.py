"""The dashboard graphs an async-generation job's staleness against its bound, and the
importance-sampling ratios. The job is real and idle; its steps are served by the browser's
router, so the test needs no training."""

from __future__ import annotations

import json

import httpx
import pytest
from playwright.sync_api import Page, Route, expect

from service.stack import LocalStack
from tests.integration.helpers import create_job, upload_jsonl
from tests.tiny import TINY_HYPERPARAMETERS
from tests.ui.sign_in import sign_in

pytestmark = pytest.mark.integration

SCORE = "def score(prompt, completion, example):\n    return 1.0\n"


def step(number: int) -> dict[str, object]:
    staleness = min(number - 1, 2)
    return {
        "step": number,
        "config_version": 1,
        "reward_mean": 0.5,
        "reward_std": 0.1,
        "loss": 0.01,
        "kl": 0.0,
        "learning_rate": 2e-2,
        "duration_s": 1.0,
        "reward_functions": {},
        "async_generation": {
            "max_staleness": 2,
            "policy_version": number - 1,
            "rollout_policy_versions": [number - 1 - staleness],
            "staleness_max": staleness,
            "staleness_mean": float(staleness),
            "sampling_config_versions": [1],
            "importance_sampling_ratio": {"min": 0.5, "mean": 1.0, "max": 3.0},
        },
        "created_at": "2026-11-28T00:00:00Z",
    }


def test_staleness_and_importance_ratios_are_graphed(
    stack: LocalStack, client: httpx.Client, api_key: str, page: Page
) -> None:
    dataset_id = upload_jsonl(client, [{"prompt": f"p{n}"} for n in range(4)])
    job_id = create_job(
        client,
        {
            "dataset_id": dataset_id,
            "reward_functions": {"score": {"source": SCORE}},
            "hyperparameters": TINY_HYPERPARAMETERS,
        },
    )["id"]
    job = client.post(f"/v1/jobs/{job_id}/cancel").json()  # never occupies the test worker
    blocks = [("job", "j", job)] + [("step", f"s{n}", step(n)) for n in (1, 2, 3, 4)]
    body = "".join(
        f"event: {kind}\nid: {cursor}\ndata: {json.dumps(data)}\n\n"
        for kind, cursor, data in [*blocks, ("end", "e", {})]
    )

    def events(route: Route) -> None:
        route.fulfill(status=200, headers={"Content-Type": "text/event-stream"}, body=body)

    page.route(f"**/v1/jobs/{job_id}/events", events)
    sign_in(page, stack, api_key)
    page.click(f"tr[data-job-id='{job_id}'] a")
    expect(page.locator("svg[data-chart=staleness]")).to_have_attribute("data-points", "8")
    ratios = page.locator("figure", has=page.locator("svg[data-chart=is-ratio]"))
    expect(ratios.locator(".legend-item")).to_have_text(["min", "mean", "max"])
