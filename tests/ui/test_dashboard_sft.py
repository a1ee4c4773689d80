"""A supervised job's page: its loss curve (with the validation loss where it was measured)
and token accuracy, in place of the reward charts it has nothing to draw on. The run (4 steps,
evaluated at steps 2 and 4) is recorded as the worker records a supervised one
(tests/ui/recorded_jobs.py): no training; a real supervised run's record is
tests/integration/test_sft_jobs.py's."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from service.stack import LocalStack
from tests.ui.recorded_jobs import finished_job, record_steps, step_record
from tests.ui.sign_in import sign_in

pytestmark = pytest.mark.integration


def sft_metrics(step: int) -> dict[str, float]:
    """What TRL's SFTTrainer logs beside loss and learning rate (eval_* where it evaluated)."""
    metrics = {"grad_norm": 0.5, "mean_token_accuracy": 0.2 * step, "num_tokens": 40.0 * step}
    if step % 2 == 0:
        metrics |= {"eval_loss": 1.5 - 0.1 * step, "eval_mean_token_accuracy": 0.2 * step}
    return metrics


def test_a_supervised_job_shows_its_loss(stack: LocalStack, api_key: str, page: Page) -> None:
    job_id = finished_job(api_key, name="warm-up", method="sft")
    record_steps(
        job_id, [step_record(step, [], {}, metrics=sft_metrics(step)) for step in range(1, 5)]
    )
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
