"""A real job whose reward never varies: the zero-signal warning through the API and the SDK."""

from __future__ import annotations

import httpx
import pytest

from rft.models import Job as SdkJob
from rft.models import Step as SdkStep
from tests.integration.helpers import all_pages, create_job, upload_jsonl, wait_for
from tests.tiny import TINY_HYPERPARAMETERS
from tests.ui.event_stream import messages_until

pytestmark = pytest.mark.integration

CONSTANT = "def constant(prompt, completion, example):\n    return 0.0\n"
TRAIN_STEPS = 3


def constant_reward_job(client: httpx.Client, **hyperparameters: object) -> dict[str, object]:
    dataset_id = upload_jsonl(client, [{"prompt": f"Say {w}:"} for w in ("yes", "no", "maybe")])
    return create_job(
        client,
        {
            "dataset_id": dataset_id,
            "reward_functions": {"constant": {"source": CONSTANT}},
            "hyperparameters": {
                **TINY_HYPERPARAMETERS,
                "train_steps": TRAIN_STEPS,
                "num_generations": 4,
                "warning_patience": TRAIN_STEPS,
                **hyperparameters,
            },
        },
    )


def test_a_run_that_learned_from_nothing_says_so(client: httpx.Client) -> None:
    job = wait_for(client, str(constant_reward_job(client)["id"]))
    assert job["status"] == "succeeded", job["failure_reason"]

    steps = client.get(f"/v1/jobs/{job['id']}/steps").json()["data"]
    assert [s["frac_reward_zero_std"] for s in steps] == [1.0] * TRAIN_STEPS
    assert SdkStep.model_validate(steps[0]).frac_reward_zero_std == 1.0

    # One warning for the episode (at the patience-th step, not every step), then the verdict.
    warnings = SdkJob.model_validate(job).warnings
    no_signal = [w for w in warnings if w["kind"] in ("no_signal", "no_signal_run")]
    assert [(w["kind"], w["step"]) for w in no_signal] == [
        ("no_signal", TRAIN_STEPS),
        ("no_signal_run", TRAIN_STEPS),
    ], warnings
    assert no_signal[1]["frac_reward_zero_std"] == 1.0
    assert "learned from (almost) nothing" in no_signal[1]["message"]

    events = all_pages(client, f"/v1/jobs/{job['id']}/events/history")
    warning_events = [e for e in events if e["kind"] == "warning"]
    assert [e["data"]["kind"] for e in warning_events] == [w["kind"] for w in warnings]
    assert [e["message"] for e in warning_events] == [w["message"] for w in warnings]

    # The event stream's step items carry the share too, and its warnings come as events.
    with client.stream(
        "GET", f"/v1/jobs/{job['id']}/events", timeout=httpx.Timeout(60, read=30)
    ) as response:
        messages = messages_until(response, lambda m: m.event == "end")
    streamed_steps = [m.json for m in messages if m.event == "step"]
    assert [s["frac_reward_zero_std"] for s in streamed_steps] == [1.0] * TRAIN_STEPS
    streamed_warnings = [m.json for m in messages if m.event == "warning"]
    assert [e["data"]["kind"] for e in streamed_warnings] == [w["kind"] for w in warnings]


def test_fail_on_no_signal_fails_the_job_with_the_reason(client: httpx.Client) -> None:
    job = wait_for(client, str(constant_reward_job(client, fail_on_no_signal=True)["id"]))
    assert job["status"] == "failed"
    assert job["failure_reason"].startswith("fail_on_no_signal: the run learned from")
    assert "no_signal_run" in [w["kind"] for w in job["warnings"]]
    # A failed job ships no adapter.
    assert client.get(f"/v1/jobs/{job['id']}/adapter.tar.gz").status_code >= 400
