"""What the dashboard's screenshot does to a job through the API while it trains."""

from __future__ import annotations

import time

import httpx

from tests.integration.helpers import all_pages


def pause_and_resume(client: httpx.Client, job_id: str) -> int:
    """Pause, wait for the worker's checkpoint, resume; returns the step it paused at."""
    paused = client.post(f"/v1/jobs/{job_id}/pause")
    assert paused.status_code == 200, paused.text
    assert paused.json()["status"] == "pausing"
    deadline = time.monotonic() + 120
    history = f"/v1/jobs/{job_id}/events/history"
    while not any(e["kind"] == "paused" for e in all_pages(client, history)):
        assert time.monotonic() < deadline, "the worker never confirmed the pause"
        time.sleep(0.2)
    paused_at = int(client.get(f"/v1/jobs/{job_id}").json()["steps_completed"])
    resumed = client.post(f"/v1/jobs/{job_id}/resume")
    assert resumed.status_code == 200, resumed.text
    return paused_at
