"""The dashboard shows a run's warnings prominently: a banner above the tabs, and highlighted
warning events in the feed; a tripped guard with its example completion and a chart marker."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Page, expect

from service.stack import LocalStack
from tests.integration.helpers import all_pages, create_job, upload_jsonl, wait_for
from tests.tiny import TINY_HYPERPARAMETERS
from tests.ui.sign_in import sign_in

pytestmark = pytest.mark.integration

CONSTANT = "def constant(prompt, completion, example):\n    return 0.0\n"
LENGTH = "def length(prompt, completion, example):\n    return len(completion) / 64\n"


def test_a_run_without_signal_shows_its_warnings(
    stack: LocalStack, client: httpx.Client, api_key: str, page: Page
) -> None:
    dataset_id = upload_jsonl(client, [{"prompt": f"Say {w}:"} for w in ("yes", "no", "maybe")])
    job_id = create_job(
        client,
        {
            "name": "no signal",
            "dataset_id": dataset_id,
            "reward_functions": {"constant": {"source": CONSTANT}},
            "hyperparameters": {
                **TINY_HYPERPARAMETERS,
                "train_steps": 3,
                "num_generations": 4,
                "warning_patience": 2,
            },
        },
    )["id"]
    job = wait_for(client, job_id)
    assert job["status"] == "succeeded", job["failure_reason"]
    kinds = [w["kind"] for w in job["warnings"]]
    assert "no_signal" in kinds and "no_signal_run" in kinds, kinds

    sign_in(page, stack, api_key)
    page.click(f"tr[data-job-id='{job_id}'] a")

    banner = page.locator("#job-warnings")
    expect(banner).to_be_visible()
    expect(banner.locator("li")).to_have_count(len(job["warnings"]))
    expect(banner).to_contain_text(f"{len(job['warnings'])} warnings")
    expect(banner.locator("li[data-warning-kind=no_signal_run]")).to_contain_text(
        "learned from (almost) nothing"
    )
    expect(banner.locator("li[data-warning-kind=no_signal]")).to_contain_text("step 2:")
    # Above the tabs, so it is seen whichever tab is open.
    banner_box, tabs_box = banner.bounding_box(), page.locator("nav.tabs").bounding_box()
    assert banner_box is not None and tabs_box is not None
    assert banner_box["y"] < tabs_box["y"]

    # The last step's share of groups without signal, beside the other step figures.
    tile = page.locator(".tile", has_text="Groups without signal")
    expect(tile.locator(".tile-value")).to_have_text("100 %")

    # The feed highlights the same warnings among the other events.
    events = all_pages(client, f"/v1/jobs/{job_id}/events/history")
    warning_events = [e for e in events if e["kind"] == "warning"]
    feed_warnings = page.locator("#event-feed > li[data-kind=warning]")
    expect(feed_warnings).to_have_count(len(warning_events))
    background = feed_warnings.first.evaluate("node => getComputedStyle(node).backgroundColor")
    assert background not in ("rgba(0, 0, 0, 0)", "transparent"), background


def test_a_tripped_guard_is_in_the_banner_with_its_evidence_and_marked_on_the_charts(
    stack: LocalStack, client: httpx.Client, api_key: str, page: Page
) -> None:
    dataset_id = upload_jsonl(client, [{"prompt": f"Say {w}:"} for w in ("yes", "no", "maybe")])
    job_id = create_job(
        client,
        {
            "dataset_id": dataset_id,
            "reward_functions": {"length": {"source": LENGTH}},
            "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 2, "num_generations": 4},
            # Trips at step 2 of any run whose entropy moved (tests/integration/test_guards.py).
            "guards": {"entropy_factor": 1.000001, "early_steps": 1, "patience": 1},
        },
    )["id"]
    job = wait_for(client, job_id)
    assert job["status"] == "succeeded", job["failure_reason"]
    assert [(w["kind"], w["step"]) for w in job["warnings"] if w.get("guard")] == [
        ("entropy_shift", 2)
    ]

    sign_in(page, stack, api_key)
    page.goto(f"{stack.base_url}/ui/#/jobs/{job_id}")
    entry = page.locator("#job-warnings li[data-warning-kind=entropy_shift]")
    expect(entry).to_contain_text("step 2: token entropy")
    expect(entry.locator(".guard-example")).to_contain_text("e.g. ")
    marker = page.locator("svg[data-chart=reward] [data-marker-kind=guard]")
    expect(marker).to_have_count(1)
    assert marker.get_attribute("data-marker-step") == "2"
    expect(page.locator("#event-feed > li[data-kind=guard_tripped]")).to_have_count(1)
