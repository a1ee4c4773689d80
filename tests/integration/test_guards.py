"""A guard named in guards.pause_on pauses a real job, with its evidence, and resume works as
after any pause (the guard then warns but pauses the job no more)."""

from __future__ import annotations

import httpx
import pytest

from rft.models import Job as SdkJob
from tests.integration.helpers import all_pages, create_job, upload_jsonl, wait_for, wait_until
from tests.tiny import TINY_HYPERPARAMETERS

pytestmark = pytest.mark.integration

LETTER_A = (
    "def letter_a(prompt, completion, example):\n"
    "    return completion.count('a') / max(1, len(completion))\n"
)
# The pause wiring, not a rule, is under test here (tests/unit/test_guards.py has the rules):
# entropy_shift with a factor just above 1 trips at the second step of any run whose entropy
# moved at all, so the job pauses there.
GUARDS = {
    "pause_on": ["entropy_shift"],
    "entropy_factor": 1.000001,
    "early_steps": 1,
    "patience": 1,
}


def test_a_pause_on_guard_pauses_the_job_with_its_evidence_and_resume_goes_on(
    client: httpx.Client,
) -> None:
    dataset_id = upload_jsonl(client, [{"prompt": f"Say {w}:"} for w in ("yes", "no", "maybe")])
    job = create_job(
        client,
        {
            "dataset_id": dataset_id,
            "reward_functions": {"letter_a": {"source": LETTER_A}},
            "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 4, "num_generations": 4},
            "guards": GUARDS,
        },
    )
    # Stored as given, every other threshold its default.
    assert job["guards"]["pause_on"] == ["entropy_shift"]
    assert job["guards"]["repetition_share"] == 0.5 and job["guards"]["patience"] == 1

    paused = wait_until(client, job["id"], lambda j: j["status"] == "paused")
    trips = SdkJob.model_validate(paused).guard_trips
    assert [(t.kind, t.step, t.paused_job) for t in trips] == [("entropy_shift", 2, True)]
    assert set(trips[0].numbers) >= {"entropy", "early_entropy", "direction"}
    assert 2 <= len(trips[0].examples) <= 3 and "completion" in trips[0].examples[0]

    events = all_pages(client, f"/v1/jobs/{job['id']}/events/history")
    tripped = [e for e in events if e["kind"] == "guard_tripped"]
    assert len(tripped) == 1 and tripped[0]["step"] == 2
    assert tripped[0]["data"]["paused_job"] is True
    assert "pausing (guards.pause_on)" in tripped[0]["message"]
    # Paused as a user's pause is: after the step that tripped, from its checkpoint.
    assert [e["step"] for e in events if e["kind"] == "paused"] == [2]
    assert [e["data"]["status"] for e in events if e["kind"] == "status"][-2:] == [
        "pausing",
        "paused",
    ]

    resumed = client.post(f"/v1/jobs/{job['id']}/resume")
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["status"] == "queued"
    # A guard pauses a job once: after the resume it may warn again, and the run goes on.
    done = wait_for(client, job["id"])
    assert done["status"] == "succeeded", done
    assert all(not w["paused_job"] for w in done["warnings"] if w.get("guard") and w["step"] > 2)
