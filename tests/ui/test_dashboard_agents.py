"""The dashboard reads an agent job: its rollouts as conversations (tool calls folded, errors
marked) and the tool graphs. The job is real and idle; its steps and completions are an agent
run's, served by the browser's router, so the test needs no training."""

from __future__ import annotations

import json

import httpx
import pytest
from playwright.sync_api import Page, Route, expect

from service.stack import LocalStack
from tests.integration.helpers import create_job, upload_jsonl
from tests.sdk.agent_records import COMPLETION, STEP
from tests.tiny import TINY_HYPERPARAMETERS
from tests.ui.sign_in import sign_in

pytestmark = pytest.mark.integration

SCORE = "def score(prompt, completion, example):\n    return 1.0\n"


def event_stream(job: dict[str, object]) -> str:
    """The job's event stream as an agent run of two steps would send it, then its end."""
    blocks = [("job", "j", job)]
    blocks += [("step", f"s{n}", {**STEP, "step": n}) for n in (1, 2)]
    blocks.append(("end", "e", {}))
    return "".join(
        f"event: {kind}\nid: {cursor}\ndata: {json.dumps(data)}\n\n"
        for kind, cursor, data in blocks
    )


def test_an_agent_rollout_reads_as_a_conversation(
    stack: LocalStack, client: httpx.Client, api_key: str, page: Page
) -> None:
    dataset_id = upload_jsonl(client, [{"prompt": f"What is {n} x 7?"} for n in range(4)])
    job_id = create_job(
        client,
        {
            "dataset_id": dataset_id,
            "reward_functions": {"score": {"source": SCORE}},
            "hyperparameters": TINY_HYPERPARAMETERS,
        },
    )["id"]
    job = client.post(f"/v1/jobs/{job_id}/cancel").json()  # never occupies the test worker

    def events(route: Route) -> None:
        route.fulfill(
            status=200, headers={"Content-Type": "text/event-stream"}, body=event_stream(job)
        )

    def completions(route: Route) -> None:
        route.fulfill(json={"data": [COMPLETION], "has_more": False, "next_cursor": None})

    page.route(f"**/v1/jobs/{job_id}/events", events)
    page.route(f"**/v1/jobs/{job_id}/completions**", completions)
    sign_in(page, stack, api_key)
    page.click(f"tr[data-job-id='{job_id}'] a")

    # The tool graphs: calls and turns per rollout, and each tool's error rate.
    expect(page.locator("svg[data-chart=agent-turns]")).to_have_attribute("data-points", "4")
    tool_errors = page.locator("figure", has=page.locator("svg[data-chart=tool-errors]"))
    expect(tool_errors.locator(".legend-item")).to_have_text(["fetch_length", "multiply"])
    expect(page.locator(".tile", has_text="Rollouts cut off")).to_contain_text("25 %")

    page.click("[data-tab=completions]")
    fold = page.locator("#completion-groups details[data-trajectory]")
    expect(fold.locator(":scope > summary")).to_have_text(
        "3 turns · 2 tool calls · 1 error · cut off"
    )
    expect(fold).to_have_class("trajectory-fold has-errors")
    fold.locator(":scope > summary").click()
    calls = fold.locator("details.tool-call")
    expect(calls).to_have_count(2)
    # Folded: the call on the summary, its result inside; the failed one marked by its kind.
    expect(calls.nth(0).locator("summary")).to_contain_text("→ multiply(a=6, b=7)")
    expect(calls.nth(0).locator(".tool-result")).to_be_hidden()
    calls.nth(0).locator("summary").click()
    expect(calls.nth(0).locator(".tool-result")).to_have_text("42")
    expect(calls.nth(1)).to_have_attribute("data-error-kind", "timeout")
    expect(calls.nth(1).locator("summary")).to_contain_text("✕ timeout")
    expect(fold.locator("[data-truncated]")).to_be_visible()
