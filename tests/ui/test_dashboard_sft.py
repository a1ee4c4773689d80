"""A supervised job's page: its loss curve (with the validation loss where it was measured)
and token accuracy, in place of the reward charts it has nothing to draw on."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Page, expect

from service.stack import LocalStack
from tests.integration.helpers import create_job, upload_jsonl, wait_for
from tests.ui.sign_in import sign_in

pytestmark = pytest.mark.integration


def test_a_supervised_job_shows_its_loss(
    stack: LocalStack, client: httpx.Client, api_key: str, page: Page
) -> None:
    rows = [{"prompt": f"Say {w}:", "completion": f" {w * 3}"} for w in "abcd"]
    dataset = upload_jsonl(client, rows)
    job_id = create_job(
        client,
        {
            "name": "warm-up",
            "method": "sft",
            "dataset_id": dataset,
            "validation_dataset_id": dataset,
            "hyperparameters": {"preset": "tiny-cpu", "train_steps": 4, "eval_every": 2},
        },
    )["id"]
    job = wait_for(client, job_id)
    assert job["status"] == "succeeded", job["failure_reason"]

    page.set_viewport_size({"width": 1280, "height": 1400})
    sign_in(page, stack, api_key)
    page.click(f"tr[data-job-id='{job_id}'] a")

    loss = page.locator("svg[data-chart=loss]")
    expect(loss.locator("path[data-series=loss]")).to_have_count(1)
    expect(loss.locator("circle[data-point-of=validation]")).to_have_count(2)  # steps 2, 4
    expect(loss).to_have_attribute("data-points", "6")  # 4 steps + 2 evaluations
    expect(page.locator("svg[data-chart=token-accuracy]")).to_have_attribute("data-points", "4")
    expect(page.locator("svg[data-chart=reward]")).to_have_count(0)
    expect(page.locator(".tile", has_text="Validation loss (step 4)")).to_have_count(1)
    expect(page.locator(".facts")).to_contain_text("supervised (SFT)")
