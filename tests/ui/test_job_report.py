"""The job report, saved to a file, opened in Chromium with the network off: every part is
drawn from what the page holds (a recorded run: tests/recording/recorded_run.py), user text
stays text, and nothing is fetched."""

from __future__ import annotations

from pathlib import Path

import httpx
from playwright.sync_api import Browser, expect

from service.stack import LocalStack
from tests.recording.recorded_run import HOSTILE, STEPS, TOOL_ANSWER, recorded_run


def test_the_saved_report_opens_offline_with_every_part(
    stack: LocalStack, client: httpx.Client, api_key: str, browser: Browser, tmp_path: Path
) -> None:
    run = recorded_run(api_key)
    saved = tmp_path / "report.html"
    response = client.get(f"/v1/jobs/{run.job_id}/report.html")
    assert response.status_code == 200, response.text
    saved.write_text(response.text, encoding="utf-8")

    context = browser.new_context(viewport={"width": 1280, "height": 900}, offline=True)
    context.set_default_timeout(20_000)
    fetched: list[str] = []
    context.on("request", lambda request: fetched.append(request.url))
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(saved.as_uri())
    expect(page.locator("body[data-rendered=true]")).to_have_count(1)

    # The curves: reward, per function (one line per version), validation, length, KL.
    for chart, points in [("reward", STEPS + 2), ("functions", STEPS), ("validation", 4),
                          ("length", STEPS), ("kl", STEPS)]:  # fmt: skip
        expect(page.locator(f"svg[data-chart={chart}]")).to_have_attribute(
            "data-points", str(points)
        )
    functions = page.locator("svg[data-chart=functions]")
    expect(functions.locator("[data-series]")).to_have_count(2)  # says_yes_v1, says_yes_v2
    guard_marker = page.locator("svg[data-chart=reward] [data-marker-kind=guard]")
    assert guard_marker.get_attribute("data-marker-step") == "6"

    # The config history, v1 -> v2 as a diff of the code and the weight.
    diff = page.locator(".config-diff[data-from='1'][data-to='2']")
    expect(diff).to_contain_text("applied at step 4")
    expect(diff.locator(".changes")).to_contain_text("weight 1 → 2")
    expect(diff.locator(".diff-body .add")).to_contain_text(["completion.split().count('yes')"])

    # The guard trip with its evidence, also in the banner.
    trip = page.locator("#guards .guard-trip[data-guard=repetition]")
    expect(trip).to_contain_text("step 6: repetition")
    expect(trip.locator(".completion-text").first).to_contain_text("yes yes yes")
    expect(page.locator("#job-warnings li[data-warning-kind=repetition]")).to_be_visible()

    # Best and worst completions of the first and last step; markup in one shows as text.
    for step in (1, STEPS):
        chosen = page.locator(f".step-completions[data-step='{step}']")
        expect(chosen.locator(".best .ranked-completion")).to_have_count(3)
        expect(chosen.locator(".worst .ranked-completion")).to_have_count(3)
    expect(page.locator(".completion-text", has_text=HOSTILE).first).to_be_visible()
    # An agent's completion shows its rollout, folded: the tool call and what it answered.
    rollout = page.locator(".step-completions[data-step='1'] .best [data-trajectory]")
    expect(rollout).to_have_count(1)
    expect(rollout.locator("summary").first).to_have_text("2 turns · 1 tool call")
    rollout.locator("summary").first.click()
    call = rollout.locator(".tool-call[data-tool=lookup]")
    expect(call.locator("summary")).to_contain_text('lookup(key="q")')
    call.locator("summary").click()
    expect(call.locator(".tool-result")).to_have_text(TOOL_ANSWER)
    assert page.evaluate("window.reportPwned") is None
    expect(page.locator("h1")).to_have_text("stage 2 <b>bold</b>")

    # Lineage and exports.
    expect(page.locator("#lineage-parent")).to_contain_text(f"{run.parent_id} “stage 1”")
    expect(page.locator("#lineage-parent")).to_contain_text("(checkpoint 3)")
    expect(page.locator("#lineage-children")).to_contain_text(run.child_id)
    expect(page.locator(f"#exports tr[data-export-id='{run.export_id}']")).to_contain_text("merged")

    assert errors == []
    assert [url for url in fetched if not url.startswith("file://")] == []
    page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
    assert (tmp_path / "report.png").stat().st_size > 10_000
    context.close()
