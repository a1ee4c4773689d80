"""Regenerate docs/dashboard.png: a demo-like job with a pause and a mid-run reward change,
screenshotted.

    python -m tests.ui.take_screenshot

Starts its own stack (embedded Postgres and Redis, the API, one worker) and stops it after.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

from service.demo.follow import DEMO_DIR, demo_job_request
from service.stack import LocalStack
from tests.conftest import new_tenant_key
from tests.integration.helpers import wait_for, wait_until
from tests.ui.conftest import CHROMIUM, CHROMIUM_ARGS
from tests.ui.job_actions import pause_and_resume

OUTPUT = Path(__file__).resolve().parents[2] / "docs" / "dashboard.png"
TRAIN_STEPS = 60
# The mid-run change: brevity gets stricter (a new version) and weighs more.
STRICTER_BREVITY = (
    "def brevity(prompt, completion, example):\n"
    "    print(f'{len(completion)} characters')\n"
    "    return max(0.0, 1.0 - len(completion) / 32)\n"
)


def run_demo_job(client: httpx.Client) -> str:
    with open(DEMO_DIR / "dataset.jsonl", "rb") as handle:
        dataset = client.post("/v1/datasets", files={"file": ("demo.jsonl", handle)}).json()
    job = client.post("/v1/jobs", json=demo_job_request(dataset["id"], train_steps=TRAIN_STEPS))
    job_id = str(job.json()["id"])
    wait_until(client, job_id, lambda j: j["steps_completed"] >= TRAIN_STEPS // 4)
    pause_and_resume(client, job_id)
    wait_until(client, job_id, lambda j: j["steps_completed"] >= TRAIN_STEPS // 2)
    config = client.get(f"/v1/jobs/{job_id}/config").json()["reward_functions"]
    client.put(
        f"/v1/jobs/{job_id}/config",
        json={
            "reward_functions": {
                "letter_fraction": {"source": config["letter_fraction"]["source"], "weight": 1.0},
                "brevity": {"source": STRICTER_BREVITY, "weight": 0.2},
            }
        },
        headers={"If-Match": "*"},
    ).raise_for_status()
    wait_for(client, job_id)
    return job_id


def main() -> None:
    state_dir = Path(tempfile.mkdtemp(prefix="rft-screenshot-"))
    with LocalStack(state_dir, workers=1) as stack:
        # new_tenant_key writes through service.db, which reads these.
        os.environ["RFT_DATABASE_URL"] = stack.database_url or ""
        os.environ["RFT_STATE_DIR"] = str(state_dir)
        key = new_tenant_key(stack)
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=stack.base_url, headers=headers, timeout=60) as client:
            job_id = run_demo_job(client)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1240, "height": 900}, device_scale_factor=1)
            page.goto(f"{stack.base_url}/ui/")
            page.evaluate("key => localStorage.setItem('rft.apiKey', key)", key)
            page.goto(f"{stack.base_url}/ui/#/jobs/{job_id}")
            page.wait_for_selector("#stream-state[data-stream=ended]")
            page.wait_for_selector(f"svg[data-chart=reward][data-points='{TRAIN_STEPS}']")
            OUTPUT.parent.mkdir(exist_ok=True)
            page.screenshot(path=str(OUTPUT), full_page=True)
            browser.close()
    print(f"wrote {OUTPUT}")


if __name__ == "__main__":
    main()
