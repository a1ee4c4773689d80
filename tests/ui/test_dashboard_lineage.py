"""A job created with init_from links, on its page, to the job it started from."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Page, expect

from service.stack import LocalStack
from tests.integration.helpers import create_job, upload_jsonl, wait_for
from tests.tiny import TINY_HYPERPARAMETERS
from tests.ui.sign_in import sign_in

pytestmark = pytest.mark.integration

SHOUT = "def shout(prompt, completion, example):\n    return float(completion.isupper())\n"


def test_the_job_page_links_to_its_parent(
    stack: LocalStack, client: httpx.Client, api_key: str, page: Page
) -> None:
    dataset_id = upload_jsonl(client, [{"prompt": f"Say {w}:"} for w in "abcd"])
    body = {
        "dataset_id": dataset_id,
        "reward_functions": {"shout": {"source": SHOUT}},
        "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 1, "num_generations": 4},
    }
    parent = create_job(client, {**body, "name": "stage 1"})["id"]
    assert wait_for(client, parent)["status"] == "succeeded"
    child = create_job(client, {**body, "name": "stage 2", "init_from": f"{parent}:checkpoint-1"})
    client.post(f"/v1/jobs/{child['id']}/cancel")  # its page is all this test needs

    sign_in(page, stack, api_key)
    page.goto(f"{stack.base_url}/ui/#/jobs/{child['id']}")
    lineage = page.locator("#job-parent")
    expect(lineage).to_have_text(f"{parent} (checkpoint 1)")
    lineage.locator("a").click()
    expect(page.locator("h1")).to_have_text("stage 1")
    expect(page.locator("#job-parent")).to_have_count(0)
