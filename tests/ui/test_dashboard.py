"""The dashboard in a real browser, against the real stack, while a job trains."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from service.stack import LocalStack
from tests.conftest import new_tenant_key
from tests.integration.helpers import all_pages, create_job, upload_jsonl, wait_until
from tests.tiny import TINY_HYPERPARAMETERS

pytestmark = pytest.mark.integration

LENGTH_SCORE = (
    "def length_score(prompt, completion, example):\n"
    "    print(f'scored {len(completion)} characters')\n"
    "    return len(completion) / 64\n"
)


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    # A fresh context per test: its own localStorage, so no key leaks between tests.
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(20_000)
    opened = context.new_page()
    yield opened
    context.close()


def sign_in(page: Page, stack: LocalStack, key: str) -> None:
    page.goto(f"{stack.base_url}/ui/")
    page.fill("#api-key", key)
    page.click("#sign-in button[type=submit]")
    expect(page.locator("#jobs")).to_be_visible()


def chart_points(page: Page, chart: str) -> int:
    return int(page.get_attribute(f"svg[data-chart={chart}]", "data-points") or -1)


def eventually(condition: Callable[[], bool], *, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def recorded_steps(client: httpx.Client, job_id: str) -> list[dict[str, Any]]:
    return list(client.get(f"/v1/jobs/{job_id}/steps").json()["data"])


def test_dashboard_follows_a_running_job(
    stack: LocalStack, client: httpx.Client, api_key: str, page: Page, browser: Browser
) -> None:
    dataset_id = upload_jsonl(client, [{"prompt": f"Say {w}:"} for w in "abcdefgh"])
    job_id = create_job(
        client,
        {
            "name": "dashboard test",
            "dataset_id": dataset_id,
            "reward_functions": {"length_score": {"source": LENGTH_SCORE}},
            "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 300, "num_generations": 4},
        },
    )["id"]
    wait_until(client, job_id, lambda job: job["steps_completed"] >= 2)

    sign_in(page, stack, api_key)
    page.click(f"tr[data-job-id='{job_id}'] a")
    expect(page.locator("#stream-state")).to_have_attribute("data-stream", "live")

    # Live: the chart catches up with what the API had recorded, and is never ahead of it
    # (steps keep coming, so an exact match is checked once the job has ended, below).
    recorded_now = len(recorded_steps(client, job_id))
    eventually(lambda: chart_points(page, "reward") >= recorded_now)
    seen_live = chart_points(page, "reward")
    assert seen_live <= len(recorded_steps(client, job_id))
    eventually(lambda: chart_points(page, "reward") > seen_live)  # and it moves on its own

    # A config change: a second curve for length_score_v2 and a marker where it applied.
    update = client.put(
        f"/v1/jobs/{job_id}/config",
        json={"reward_functions": {"length_score": {"source": LENGTH_SCORE + "# v2\n"}}},
    )
    assert update.status_code == 200, update.text
    applied = wait_until(client, job_id, lambda job: job["applied_config_version"] == 2)
    switch_step = client.get(f"/v1/jobs/{job_id}/config/versions").json()[1]["applied_at_step"]
    expect(page.locator("svg[data-chart=functions] [data-series=length_score_v2]")).to_have_count(1)
    expect(
        page.locator(f"svg[data-chart=reward] [data-marker-step='{switch_step}']")
    ).to_have_count(1)
    assert applied["steps_completed"] >= switch_step

    assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    # The stream ends once the worker's last step is in; then everything must match.
    expect(page.locator("#stream-state")).to_have_attribute("data-stream", "ended", timeout=30_000)
    final_steps = recorded_steps(client, job_id)
    assert client.get(f"/v1/jobs/{job_id}").json()["steps_completed"] == len(final_steps)
    assert chart_points(page, "reward") == len(final_steps)
    functions_points = sum(len(step["reward_functions"]) for step in final_steps)
    assert chart_points(page, "functions") == functions_points
    expect(page.locator(".facts [data-status=cancelled]")).to_have_count(1)

    # Completions: best and worst of step 1 side by side, with exactly the stored numbers.
    page.click("[data-tab=completions]")
    page.fill("#completions-step", "1")
    page.click("#show-step")
    page.click("#best-of-step")
    page.click("#worst-of-step")
    stored = {c["id"]: c for c in all_pages(client, f"/v1/jobs/{job_id}/completions", step=1)}
    totals = [c["total"] for c in stored.values()]
    for slot, expected_total in (("a", max(totals)), ("b", min(totals))):
        shown = page.locator(f"#compare [data-slot={slot}]")
        completion = stored[int(shown.get_attribute("data-completion-id") or 0)]
        assert completion["total"] == expected_total
        score = shown.locator("[data-score=length_score]")
        assert (
            float(score.get_attribute("data-value") or "nan")
            == completion["scores"]["length_score"]
        )
        for field in ("total", "advantage"):
            value = shown.locator(f"[data-field={field}]").get_attribute("data-value")
            assert float(value or "nan") == completion[field]
        expect(shown.locator(".completion")).to_have_text(completion["completion"])

    # Reward logs: the function's print output, filtered by step and function.
    page.click("[data-tab=logs]")
    page.fill("#reward-logs-step", "1")
    page.select_option("#reward-logs-function", "length_score")
    page.click("form:has(#reward-logs-step) button[type=submit]")
    expect(page.locator("#reward-logs [data-log-id]")).to_have_count(1)
    expect(page.locator("#reward-logs pre")).to_contain_text("scored ")

    # Config: the history and a line diff between v1 and v2.
    page.click("[data-tab=config]")
    expect(page.locator("#config-versions tbody tr")).to_have_count(2)
    expect(page.locator("#config-diff .add")).to_have_text(["+ # v2"])

    # Another tenant sees no jobs, and neither the job page nor its stream.
    other_key = new_tenant_key(stack)
    other_context = browser.new_context()
    try:
        other = other_context.new_page()
        sign_in(other, stack, other_key)
        expect(other.locator("#jobs tbody tr")).to_have_count(0)
        expect(other.get_by_text("No jobs yet")).to_be_visible()
        other.goto(f"{stack.base_url}/ui/#/jobs/{job_id}")
        expect(other.locator("#stream-state")).to_have_attribute("data-stream", "unavailable")
    finally:
        other_context.close()
    other_stream = httpx.get(
        f"{stack.base_url}/v1/jobs/{job_id}/events",
        headers={"Authorization": f"Bearer {other_key}"},
    )
    assert other_stream.status_code == 404


def test_sign_out_forgets_the_key(stack: LocalStack, api_key: str, page: Page) -> None:
    sign_in(page, stack, api_key)
    page.click("#sign-out")
    expect(page.locator("#sign-in")).to_be_visible()
    assert page.evaluate("localStorage.getItem('rft.apiKey')") is None
    page.fill("#api-key", "rft_not-a-key")
    page.click("#sign-in button[type=submit]")
    expect(page.locator("#sign-in-error")).to_have_text("That key was refused.")
