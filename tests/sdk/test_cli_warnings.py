"""``rft jobs watch`` keeps a run's warnings in view under its table."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Console

from rft.cli.watch import job_view
from rft.models import Job, JobEvent

NOW = datetime(2026, 11, 23, tzinfo=UTC)


def job(**fields: object) -> Job:
    return Job.model_validate(
        {
            "id": "job_1",
            "name": None,
            "status": "succeeded",
            "failure_reason": None,
            "base_model": "rft-tiny",
            "dataset_id": "ds_1",
            "hyperparameters": {"train_steps": 3},
            "config_version": 1,
            "applied_config_version": 1,
            "steps_completed": 3,
            "allow_network": False,
            "created_at": NOW,
            "started_at": NOW,
            "finished_at": NOW,
            **fields,
        }
    )


def rendered(view: object) -> str:
    console = Console(width=200, record=True)
    console.print(view)
    return console.export_text()


def test_warnings_are_listed_under_the_table() -> None:
    warned = job(
        warnings=[
            {"kind": "no_signal", "step": 3, "message": "3 steps in a row with no signal"},
            {"kind": "no_signal_run", "step": 3, "message": "the run learned from nothing"},
        ]
    )
    text = rendered(job_view(warned, []))
    assert "warning (step 3): 3 steps in a row with no signal" in text
    assert "warning (step 3): the run learned from nothing" in text
    assert "warning" not in rendered(job_view(job(), []))


def test_the_latest_validation_result_is_shown_under_the_table() -> None:
    evaluation = JobEvent.model_validate(
        {
            "id": 7,
            "kind": "eval",
            "message": "validation reward 0.7500 at step 4 (6 samples)",
            "step": 4,
            "data": {"step": 4, "reward_mean": 0.75, "samples": 6},
            "created_at": NOW,
        }
    )
    text = rendered(job_view(job(), [], evaluation))
    assert "validation (step 4): reward 0.750 over 6 samples (rft jobs evals job_1)" in text
    assert "validation" not in rendered(job_view(job(), []))


def test_a_tripped_guard_is_listed_with_an_example_completion() -> None:
    guarded = job(
        warnings=[
            {
                "kind": "length_drift",
                "step": 7,
                "message": "completions drifted to the length limit",
                "guard": True,
                "numbers": {"length_mean": 16.0},
                "examples": [{"completion": "pad pad pad", "total": 1.0}],
                "paused_job": True,
            }
        ],
        guards={"pause_on": ["length_drift"], "patience": 3},
    )
    assert [t.kind for t in guarded.guard_trips] == ["length_drift"]
    assert guarded.guards.pause_on == ["length_drift"]
    text = rendered(job_view(guarded, []))
    assert "guard length_drift (step 7): completions drifted to the length limit" in text
    assert "e.g. 'pad pad pad'" in text
