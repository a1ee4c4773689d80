"""The dashboard in a real browser, against the real stack: following a job while it trains,
and drawing a finished run recorded as the worker records one (tests/ui/recorded_jobs.py)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from service.stack import LocalStack
from tests.conftest import new_tenant_key
from tests.integration.helpers import all_pages, create_job, upload_jsonl, wait_until
from tests.tiny import TINY_HYPERPARAMETERS
from tests.ui.recorded_jobs import (
    add_config_version,
    checkpoint_event,
    completion,
    finished_job,
    pause_and_resume_events,
    record_steps,
    step_record,
)
from tests.ui.sign_in import sign_in
from workers.training.step_records import StepRecord

pytestmark = pytest.mark.integration

LENGTH_SCORE = (
    "def length_score(prompt, completion, example):\n"
    "    print(f'scored {len(completion)} characters')\n"
    "    return len(completion) / 64\n"
)


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
        headers={"If-Match": "*"},
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
    # Cost: what it was expected to cost (whatever the workers had said by its creation), and
    # the device time it used.
    expect(page.locator("#job-estimate")).to_have_count(1)
    expect(page.locator("#job-gpu-seconds")).to_contain_text("GPU-seconds")

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
        # The slot fills after its fetch: wait for one of the completions with that total.
        candidates = "|".join(str(c["id"]) for c in stored.values() if c["total"] == expected_total)
        expect(shown).to_have_attribute("data-completion-id", re.compile(f"^({candidates})$"))
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


# Six functions, names short and long: the completions table must stay readable with them.
SIX_FUNCTIONS = {
    "letter_fraction": "return completion.count('a') / max(1, len(completion))",
    "brevity": "return max(0.0, 1.0 - len(completion) / 32)",
    "vowel_share": "return sum(c in 'aeiou' for c in completion) / max(1, len(completion))",
    "no_digits": "return float(not any(c.isdigit() for c in completion))",
    "ends_with_a_period_or_exclamation": "return float(completion.rstrip().endswith(('.', '!')))",
    "distinct_characters": "return len(set(completion)) / max(1, len(completion))",
}
TRAIN_STEPS = 40


def function_source(name: str, body: str) -> str:
    return f"def {name}(prompt, completion, example):\n    {body}\n"


def boxes_overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return (
        a["x"] < b["x"] + b["width"]
        and b["x"] < a["x"] + a["width"]
        and a["y"] < b["y"] + b["height"]
        and b["y"] < a["y"] + a["height"]
    )


def ema(values: list[float], weight: float) -> list[float]:
    """The dashboard's smoothing: TensorBoard's debiased exponential moving average."""
    average, smoothed = 0.0, []
    for count, value in enumerate(values, start=1):
        average = average * weight + (1 - weight) * value
        smoothed.append(average / (1 - weight**count))
    return smoothed


def hover_step(page: Page, chart: str, step: int, last_step: int) -> dict[str, float]:
    """Move the mouse over ``step`` of ``chart``; the tooltip's row for the series ``chart``."""
    svg = page.locator(f"svg[data-chart={chart}]")
    svg.scroll_into_view_if_needed()
    box = svg.bounding_box()
    assert box is not None
    # lineChart's geometry: viewBox 760 wide, the plot from x=56 to x=744, steps 1..last_step.
    x_view = 56 + (step - 1) / (last_step - 1) * 688
    page.mouse.move(box["x"] + x_view / 760 * box["width"], box["y"] + box["height"] / 2)
    expect(page.locator(f"[data-tooltip={chart}] strong")).to_have_text(f"step {step}")
    row = page.locator(f"[data-tooltip={chart}] [data-series={chart}]")
    return {
        "value": float(row.get_attribute("data-value") or "nan"),
        "smoothed": float(row.get_attribute("data-smoothed") or "nan"),
    }


def element_boxes(scope: Locator, selector: str) -> list[dict[str, float]]:
    found = scope.locator(selector)
    boxes = [found.nth(i).bounding_box() for i in range(found.count())]
    assert boxes and all(box is not None for box in boxes)
    return [box for box in boxes if box is not None]


# The recorded run of the six functions: v2 (brevity's new code, at weight 0.5) applies at
# step 3, v3 (no_digits at weight 2) at step 4, neighbouring markers; a pause after step 8.
V2_AT, V3_AT, PAUSED_AT = 3, 4, 8
STRICTER_BREVITY = "return max(0.0, 1.0 - len(completion) / 16)"


def scored(name: str, body: str, text: str) -> float:
    namespace: dict[str, Any] = {}
    exec(function_source(name, body), namespace)
    return float(namespace[name](None, text, {}))


def six_function_step(step: int) -> StepRecord:
    config_version = 1 if step < V2_AT else 2 if step < V3_AT else 3
    bodies = dict(SIX_FUNCTIONS)
    if config_version > 1:
        bodies["brevity"] = STRICTER_BREVITY
    weights = {
        "brevity": 0.5 if config_version > 1 else 1.0,
        "no_digits": 2.0 if step >= V3_AT else 1.0,
    }
    versions = {
        name: (2 if name == "brevity" and config_version > 1 else 1, weights.get(name, 1.0))
        for name in SIX_FUNCTIONS
    }
    # Completions that vary with the step, so the reward (and its smoothing) moves.
    texts = [f"{'a' * (1 + (step * 7 + i) % 11)} step {step} answer {i}." for i in range(8)]
    completions = [
        completion(i, text, {name: scored(name, body, text) for name, body in bodies.items()})
        for i, text in enumerate(texts)
    ]
    return step_record(step, completions, versions, config_version=config_version)


def recorded_six_function_run(api_key: str) -> str:
    """The run, recorded as the worker records one (tests/ui/recorded_jobs.py): its config
    versions, steps, a checkpoint at every step, the pause and the resume."""
    job_id = finished_job(
        api_key,
        name="six functions",
        functions={name: function_source(name, body) for name, body in SIX_FUNCTIONS.items()},
        train_steps=TRAIN_STEPS,
    )
    stricter = function_source("brevity", STRICTER_BREVITY)
    v2 = {name: (1, 1.0, None) for name in SIX_FUNCTIONS} | {"brevity": (2, 0.5, stricter)}
    add_config_version(job_id, 2, v2)
    add_config_version(job_id, 3, v2 | {"brevity": (2, 0.5, None), "no_digits": (1, 2.0, None)})
    for step in range(1, TRAIN_STEPS + 1):
        record_steps(job_id, [six_function_step(step)])
        checkpoint_event(job_id, step)
        if step == PAUSED_AT:
            pause_and_resume_events(job_id, step)
    return job_id


def test_markers_smoothing_events_and_a_six_function_table(
    stack: LocalStack, client: httpx.Client, api_key: str, page: Page
) -> None:
    """What a finished run's page draws: markers, smoothing, the event feed, a table of six
    functions and the config's diff. A recorded run (no training): a real run's page, live,
    is test_dashboard_follows_a_running_job's."""
    job_id = recorded_six_function_run(api_key)
    paused_at = PAUSED_AT
    steps = recorded_steps(client, job_id)
    events = all_pages(client, f"/v1/jobs/{job_id}/events/history")
    assert len(steps) == TRAIN_STEPS

    sign_in(page, stack, api_key)
    page.goto(f"{stack.base_url}/ui/#/jobs/{job_id}")
    expect(page.locator("#stream-state")).to_have_attribute("data-stream", "ended")
    expect(page.locator(f"svg[data-chart=reward][data-points='{TRAIN_STEPS}']")).to_have_count(1)

    # Pause and resume are marked where they happened, on every chart.
    reward_chart = page.locator("svg[data-chart=reward]")
    for kind in ("pause", "resume"):
        marker = reward_chart.locator(f"[data-marker-kind={kind}]")
        expect(marker).to_have_count(1)
        assert marker.get_attribute("data-marker-step") == str(paused_at)
    expect(page.locator("svg[data-chart=functions] [data-marker-kind=pause]")).to_have_count(1)
    # Config v2 and v3 applied at neighbouring steps: no two labels overlap (nor do the pause
    # and resume labels, drawn at the same step).
    expect(reward_chart.locator("[data-marker-kind=config]")).to_have_count(2)
    expect(reward_chart.locator(".marker text")).to_have_count(4)
    labels = element_boxes(reward_chart, ".marker text")
    for i, first in enumerate(labels):
        for second in labels[i + 1 :]:
            assert not boxes_overlap(first, second), labels

    # Checkpoints (one per step) are collapsed into runs; the pause stays in view.
    checkpoint_events = [e for e in events if e["kind"] == "checkpoint"]
    assert len(checkpoint_events) >= TRAIN_STEPS
    feed = page.locator("#event-feed > li")
    shown_kinds = [feed.nth(i).get_attribute("data-kind") for i in range(feed.count())]
    assert "paused" in shown_kinds and "resumed" in shown_kinds, shown_kinds
    assert shown_kinds.count("checkpoint") < len(checkpoint_events) / 2, shown_kinds
    run = page.locator("#event-feed > li[data-kind=checkpoint][data-count]").first
    count = int(run.get_attribute("data-count") or 0)
    assert count >= 2
    expect(run.locator("summary")).to_contain_text(f"{count} checkpoints saved (steps ")
    run.locator("summary").click()
    expect(run.locator(".feed-detail li")).to_have_count(count)

    # Hover: the tooltip shows the stored value of the step under the mouse.
    rewards = [float(step["reward_mean"]) for step in steps]
    hovered = hover_step(page, "reward", 5, TRAIN_STEPS)
    assert hovered["value"] == rewards[4] == hovered["smoothed"]
    raw_path = reward_chart.locator("[data-series=reward]").get_attribute("d")

    # Smoothing: the line becomes the moving average, the raw values stay as a faint line.
    page.check("#smooth-toggle")
    expect(page.locator("svg[data-chart=reward][data-smoothing='0.6']")).to_have_count(1)
    reward_chart = page.locator("svg[data-chart=reward]")
    expect(reward_chart.locator("[data-raw-series=reward]")).to_have_attribute("d", raw_path or "")
    assert reward_chart.locator("[data-series=reward]").get_attribute("d") != raw_path
    hovered = hover_step(page, "reward", 5, TRAIN_STEPS)
    assert hovered["value"] == rewards[4]
    assert hovered["smoothed"] == pytest.approx(ema(rewards, 0.6)[4], abs=1e-12)
    page.uncheck("#smooth-toggle")
    expect(page.locator("svg[data-chart=reward] [data-raw-series]")).to_have_count(0)

    # Completions with six functions: every cell inside its card, the text column wide.
    page.click("[data-tab=completions]")
    page.fill("#completions-step", "1")
    page.click("#show-step")
    expect(page.locator("#completions-status")).to_contain_text("completions at step 1")
    card = page.locator(".group").first
    table = card.locator("table.many-scores[data-functions='6']")
    expect(table).to_be_visible()
    card_box = card.bounding_box()
    assert card_box is not None
    for box in element_boxes(card, "h3, pre, table, th, td, button"):
        assert box["x"] >= card_box["x"] - 0.5, box
        assert box["x"] + box["width"] <= card_box["x"] + card_box["width"] + 0.5, box
    assert card.locator(".table-scroll").evaluate("node => node.scrollWidth <= node.clientWidth")
    table_width = element_boxes(card, "table")[0]["width"]
    assert element_boxes(card, "td.completion-cell")[0]["width"] > 0.4 * table_width
    first_row_scores = element_boxes(card.locator("tbody tr").first, "td.score")
    assert len(first_row_scores) == 6 and all(box["width"] < 70 for box in first_row_scores)

    # Config: what changed comes first, the unchanged functions are folded away.
    page.click("[data-tab=config]")
    page.select_option("#diff-from", "1")
    page.select_option("#diff-to", "2")
    changes = page.locator("#config-changes li")
    expect(changes).to_have_count(1)
    expect(changes.first).to_contain_text("brevity: new code")
    expect(changes.first).to_contain_text("weight 1 → 0.5")
    expect(page.locator("#config-diff > .diff")).to_have_count(1)
    expect(page.locator("#config-diff > .diff")).to_have_attribute("data-function", "brevity")
    expect(page.locator("#config-diff details.unchanged-functions .diff")).to_have_count(5)
    page.select_option("#diff-from", "2")
    page.select_option("#diff-to", "3")
    expect(changes).to_have_text(["no_digits: weight 1 → 2"])
    expect(page.locator("#config-diff > .diff")).to_have_count(0)
