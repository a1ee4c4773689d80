"""The dashboard draws a job's validation results beside its training curves: a validation
line on the reward chart, a per-function validation chart, and the last result as a tile. The
run (3 steps, evaluated at steps 2 and 3) is recorded as the worker records one
(tests/ui/recorded_jobs.py): no training; a real run's evaluations are
tests/integration/test_validation.py's."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from service.stack import LocalStack
from tests.ui.recorded_jobs import (
    completion,
    finished_job,
    function_metrics,
    record_steps,
    step_record,
)
from tests.ui.sign_in import sign_in
from workers.training.step_records import EvalRecord

pytestmark = pytest.mark.integration

ROW_VALUE = "def row_value(prompt, completion, example):\n    return float(example['value'])\n"
VERSIONS = {"row_value": (1, 1.0)}


def evaluation(step: int) -> EvalRecord:
    """Two validation rows whose value is 2: every sample scores 2."""
    samples = [completion(i, f"spelled {i}", {"row_value": 2.0}) for i in range(2)]
    return EvalRecord(
        step=step,
        config_version=1,
        reward_mean=2.0,
        reward_std=0.0,
        prompts=2,
        samples=2,
        duration_s=0.05,
        functions=function_metrics(samples, VERSIONS),
    )


def test_the_eval_curve_is_drawn_beside_the_training_curves(
    stack: LocalStack, api_key: str, page: Page
) -> None:
    job_id = finished_job(api_key, name="with validation", functions={"row_value": ROW_VALUE})
    record_steps(
        job_id,
        [
            step_record(
                step,
                [completion(i, f"said {i}", {"row_value": 0.0}) for i in range(4)],
                VERSIONS,
                evaluation=evaluation(step) if step >= 2 else None,
            )
            for step in (1, 2, 3)
        ],
    )

    page.set_viewport_size({"width": 1280, "height": 1400})  # both charts and the tiles
    sign_in(page, stack, api_key)
    page.click(f"tr[data-job-id='{job_id}'] a")

    # On the reward chart: the training line, and the validation line with a dot per eval.
    reward = page.locator("svg[data-chart=reward]")
    expect(reward.locator("path[data-series=reward]")).to_have_count(1)
    expect(reward.locator("path[data-series=validation]")).to_have_count(1)
    expect(reward.locator("circle[data-point-of=validation]")).to_have_count(2)
    expect(reward).to_have_attribute("data-points", "5")  # 3 steps + 2 evaluations
    legend = page.locator("figure", has=reward).locator(".legend-item")
    expect(legend).to_have_text(["reward", "validation"])
    # Drawn through both evaluations (steps 2 and 3): a move and a line.
    path = reward.locator("path[data-series=validation]").get_attribute("d") or ""
    assert path.count("M") == 1 and path.count("L") == 1, path

    # Its own chart, per function, and the last result as a tile.
    chart = page.locator("svg[data-chart=validation]")
    expect(chart.locator("circle[data-point-of=row_value]")).to_have_count(2)
    expect(page.locator("figure", has=chart).locator(".legend-item")).to_have_text(
        ["total", "row_value"]
    )
    tile = page.locator(".tile", has_text="Validation reward (step 3)")
    expect(tile.locator(".tile-value")).to_have_text(
        "2"
    )  # formatNumber writes whole numbers plainly
    # The feed lists the evaluations as events.
    expect(page.locator("#event-feed > li[data-kind=eval]")).to_have_count(2)
