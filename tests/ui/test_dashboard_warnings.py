"""The dashboard shows a run's warnings prominently: a banner above the tabs, and highlighted
warning events in the feed; a tripped guard with its example completion and a chart marker.

The runs are recorded as the worker records one, without training: the warnings are what the
worker's own monitors find in the recorded steps, stored by its writers (tests/ui/
recorded_jobs.py, tests/recording/recorded_run.py). That a real run raises them is
tests/integration/test_training_warnings.py's and tests/integration/test_guards.py's."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Page, expect

from service.jobs.hyperparameters import Hyperparameters
from service.stack import LocalStack
from tests.integration.helpers import all_pages
from tests.recording.recorded_run import recorded_run
from tests.tiny import TINY_HYPERPARAMETERS
from tests.ui.recorded_jobs import completion, finished_job, step_record
from tests.ui.sign_in import sign_in
from workers.database_observer import store_warning
from workers.step_store import store_step
from workers.training_job import signal_settings
from workers.training_signals import SignalMonitor, frac_reward_zero_std, no_signal_run_warning

pytestmark = pytest.mark.integration

CONSTANT = "def constant(prompt, completion, example):\n    return 0.0\n"


def test_a_run_without_signal_shows_its_warnings(
    stack: LocalStack, client: httpx.Client, api_key: str, page: Page
) -> None:
    """Three steps of a constant reward: every group flat, so the worker's signal monitor
    warns (patience 2) and the run's verdict says it learned from nothing."""
    job_id = finished_job(api_key, name="no signal", functions={"constant": CONSTANT})
    hyperparameters = Hyperparameters(**{**TINY_HYPERPARAMETERS, "warning_patience": 2})
    settings = signal_settings(hyperparameters)
    monitor = SignalMonitor(settings, max_completion_length=hyperparameters.max_completion_length)
    fractions = []
    for step in (1, 2, 3):
        completions = [completion(i, f"said {i} at {step}", {"constant": 0.0}) for i in range(6)]
        record = step_record(step, completions, {"constant": (1, 1.0)})
        store_step(job_id, record)
        for warning in monitor.observe_step(record):
            store_warning(job_id, warning)
        fractions.append(frac_reward_zero_std(record.completions))
    verdict = no_signal_run_warning(fractions, 3, settings)
    assert verdict is not None
    store_warning(job_id, verdict)
    job = client.get(f"/v1/jobs/{job_id}").json()
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
    stack: LocalStack, api_key: str, page: Page
) -> None:
    # A gamed run whose repetition guard trips at step 6 (tests/recording/recorded_run.py).
    run = recorded_run(api_key)

    sign_in(page, stack, api_key)
    page.goto(f"{stack.base_url}/ui/#/jobs/{run.job_id}")
    entry = page.locator("#job-warnings li[data-warning-kind=repetition]")
    expect(entry).to_contain_text("step 6: ")
    expect(entry.locator(".guard-example")).to_contain_text("e.g. ")
    marker = page.locator("svg[data-chart=reward] [data-marker-kind=guard]")
    expect(marker).to_have_count(1)
    assert marker.get_attribute("data-marker-step") == "6"
    expect(page.locator("#event-feed > li[data-kind=guard_tripped]")).to_have_count(1)
