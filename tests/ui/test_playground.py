"""The dashboard's playground tab in a real browser: base model and adapter (or two
checkpoints) side by side on one prompt, each answer scored by the job's reward functions."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Page, expect

from service.stack import LocalStack
from tests.integration.helpers import create_job, upload_jsonl, wait_for
from tests.tiny import TINY_HYPERPARAMETERS
from tests.ui.sign_in import sign_in

pytestmark = pytest.mark.integration

A_SHARE = (
    "def a_share(prompt, completion, example):\n"
    "    return completion.count('a') / max(len(completion), 1)\n"
)
LENGTH = "def length(prompt, completion, example):\n    return float(len(completion))\n"
PROMPT = "Write about cats:"


def generate(page: Page, left: str, right: str) -> tuple[str, str]:
    page.select_option("#playground-left", left)
    page.select_option("#playground-right", right)
    page.click("#playground-run")
    for side in ("left", "right"):
        expect(page.locator(f"#playground-{side}-result")).to_have_attribute(
            "data-state", "done", timeout=180_000
        )
    return (
        page.locator("[data-answer=left]").inner_text(),
        page.locator("[data-answer=right]").inner_text(),
    )


def test_playground_compares_base_and_adapter_and_scores_both(
    stack: LocalStack, client: httpx.Client, api_key: str, page: Page
) -> None:
    rows = [{"prompt": [{"role": "user", "content": f"Write about {t}:"}]} for t in "abcdefgh"]
    job = create_job(
        client,
        {
            "dataset_id": upload_jsonl(client, rows),
            "reward_functions": {
                "a_share": {"source": A_SHARE},
                "length": {"source": LENGTH, "weight": 0.01},
            },
            "hyperparameters": {
                **TINY_HYPERPARAMETERS,
                "learning_rate": 5e-2,
                "train_steps": 6,
                "checkpoint_every": 3,
            },
        },
    )
    finished = wait_for(client, job["id"], timeout_s=900)
    assert finished["status"] == "succeeded", finished["failure_reason"]
    stack.start_inference()
    job_id = job["id"]

    sign_in(page, stack, api_key)
    page.goto(f"{stack.base_url}/ui/#/jobs/{job_id}/playground")
    expect(page.locator("#playground-right option")).to_have_count(4)  # base, final, 2 ckpts
    page.fill("#playground-prompt", PROMPT)

    base, tuned = generate(page, "rft-tiny", job_id)
    assert base != tuned
    # The same answers as the API gives (greedy decoding), each scored by each function and
    # the weighted total as in training.
    for side, model, shown in (("left", "rft-tiny", base), ("right", job_id, tuned)):
        reply = client.post(
            "/v1/chat/completions",
            json={
                "model": model,
                "messages": [{"role": "user", "content": PROMPT}],
                "temperature": 0,
                "max_tokens": 64,
            },
            timeout=300,
        ).json()
        answer = reply["choices"][0]["message"]["content"]
        assert answer.strip() == shown.strip()
        slot = page.locator(f"#playground-{side}-result")
        length = float(slot.locator("[data-score=length]").inner_text())
        share = float(slot.locator("[data-score=a_share]").inner_text())
        total = float(slot.locator("[data-score=total]").inner_text())
        assert length == len(answer)
        assert share == pytest.approx(answer.count("a") / max(len(answer), 1), abs=1e-4)
        assert total == pytest.approx(share + 0.01 * length, abs=1e-3)

    # Two checkpoints side by side.
    generate(page, f"{job_id}:checkpoint-3", f"{job_id}:checkpoint-6")
    assert page.locator("#playground-left-result .strong").first.inner_text() == (
        f"{job_id}:checkpoint-3"
    )
