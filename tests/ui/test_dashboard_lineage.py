"""A job created with init_from links, on its page, to the job it started from. Both jobs are
rows as the API and the worker store them (tests/ui/recorded_jobs.py): no training."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from service.stack import LocalStack
from tests.ui.recorded_jobs import finished_job
from tests.ui.sign_in import sign_in

pytestmark = pytest.mark.integration

SHOUT = "def shout(prompt, completion, example):\n    return float(completion.isupper())\n"


def test_the_job_page_links_to_its_parent(stack: LocalStack, api_key: str, page: Page) -> None:
    parent = finished_job(api_key, name="stage 1", functions={"shout": SHOUT})
    child = finished_job(
        api_key,
        name="stage 2",
        functions={"shout": SHOUT},
        parent_job_id=parent,
        parent_checkpoint_step=1,
    )

    sign_in(page, stack, api_key)
    page.goto(f"{stack.base_url}/ui/#/jobs/{child}")
    lineage = page.locator("#job-parent")
    expect(lineage).to_have_text(f"{parent} (checkpoint 1)")
    lineage.locator("a").click()
    expect(page.locator("h1")).to_have_text("stage 1")
    expect(page.locator("#job-parent")).to_have_count(0)
