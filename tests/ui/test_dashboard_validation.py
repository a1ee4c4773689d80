"""The dashboard draws a job's validation results beside its training curves: a validation
line on the reward chart, a per-function validation chart, and the last result as a tile."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Page, expect

from service.stack import LocalStack
from tests.integration.helpers import create_job, upload_jsonl, wait_for
from tests.tiny import TINY_HYPERPARAMETERS
from tests.ui.sign_in import sign_in

pytestmark = pytest.mark.integration

ROW_VALUE = "def row_value(prompt, completion, example):\n    return float(example['value'])\n"


def test_the_eval_curve_is_drawn_beside_the_training_curves(
    stack: LocalStack, client: httpx.Client, api_key: str, page: Page
) -> None:
    training = upload_jsonl(client, [{"prompt": f"Say {w}:", "value": 0} for w in "abc"])
    validation = upload_jsonl(client, [{"prompt": f"Spell {w}:", "value": 2} for w in "xy"])
    job_id = create_job(
        client,
        {
            "name": "with validation",
            "dataset_id": training,
            "validation_dataset_id": validation,
            "reward_functions": {"row_value": {"source": ROW_VALUE}},
            "hyperparameters": {
                **TINY_HYPERPARAMETERS,
                "train_steps": 3,
                "num_generations": 4,
                "eval_every": 2,
            },
        },
    )["id"]
    job = wait_for(client, job_id)
    assert job["status"] == "succeeded", job["failure_reason"]
    evals = client.get(f"/v1/jobs/{job_id}/evals").json()["data"]
    assert [(e["step"], e["reward_mean"]) for e in evals] == [(2, 2.0), (3, 2.0)]

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
