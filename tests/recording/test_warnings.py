"""Warnings are stored once per kind and step (and function), even when a resumed run re-runs
the steps that raised them."""

from __future__ import annotations

from sqlalchemy import select

from service.db import session_scope
from service.models import Job, JobEvent
from workers.database_observer import store_warning
from workers.training_signals import FUNCTION_FLAT, NO_SIGNAL, TrainingWarning


def stored(job_id: str) -> tuple[list[dict[str, object]], list[str]]:
    with session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        events = session.scalars(
            select(JobEvent.message)
            .where(JobEvent.job_id == job_id, JobEvent.kind == "warning")
            .order_by(JobEvent.id)
        ).all()
        return list(job.warnings), list(events)


def test_a_warning_is_stored_once(job_id: str) -> None:
    first = TrainingWarning(NO_SIGNAL, 3, "no signal (run 1)", {"frac_reward_zero_std": 1.0})
    store_warning(job_id, first)
    # The same episode seen again after a resume: numbers may differ, the warning is the same.
    store_warning(job_id, TrainingWarning(NO_SIGNAL, 3, "no signal (re-run)", {}))
    flat_a = TrainingWarning(FUNCTION_FLAT, 3, "a is flat", {"function": "a"})
    flat_b = TrainingWarning(FUNCTION_FLAT, 3, "b is flat", {"function": "b"})
    store_warning(job_id, flat_a)
    store_warning(job_id, flat_b)
    store_warning(job_id, flat_a)
    store_warning(job_id, TrainingWarning(NO_SIGNAL, 9, "a later episode", {}))

    warnings, events = stored(job_id)
    assert [(w["kind"], w["step"], w.get("function")) for w in warnings] == [
        (NO_SIGNAL, 3, None),
        (FUNCTION_FLAT, 3, "a"),
        (FUNCTION_FLAT, 3, "b"),
        (NO_SIGNAL, 9, None),
    ]
    assert warnings[0] == {
        "kind": NO_SIGNAL,
        "step": 3,
        "message": "no signal (run 1)",
        "frac_reward_zero_std": 1.0,
    }
    assert events == ["no signal (run 1)", "a is flat", "b is flat", "a later episode"]
