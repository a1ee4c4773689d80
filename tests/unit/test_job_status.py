from __future__ import annotations

import pytest

from service.errors import IllegalTransition
from service.jobs.status import ALLOWED_TRANSITIONS, JobStatus, can_transition, ensure_transition


def test_terminal_statuses_have_no_way_out() -> None:
    for status in JobStatus:
        assert status.is_terminal == (not ALLOWED_TRANSITIONS[status])


@pytest.mark.parametrize(
    ("current", "target", "allowed"),
    [
        (JobStatus.QUEUED, JobStatus.RUNNING, True),
        (JobStatus.QUEUED, JobStatus.CANCELLED, True),
        (JobStatus.RUNNING, JobStatus.SUCCEEDED, True),
        (JobStatus.RUNNING, JobStatus.PAUSED, True),
        (JobStatus.PAUSED, JobStatus.QUEUED, True),
        (JobStatus.QUEUED, JobStatus.SUCCEEDED, False),
        (JobStatus.SUCCEEDED, JobStatus.RUNNING, False),
        (JobStatus.CANCELLED, JobStatus.CANCELLED, False),
        (JobStatus.FAILED, JobStatus.QUEUED, False),
    ],
)
def test_transition_table(current: JobStatus, target: JobStatus, allowed: bool) -> None:
    assert can_transition(current, target) is allowed


def test_illegal_transition_is_a_409_naming_both_states() -> None:
    with pytest.raises(IllegalTransition) as raised:
        ensure_transition("job_1", JobStatus.SUCCEEDED, JobStatus.CANCELLED)
    assert raised.value.status_code == 409
    assert "succeeded" in raised.value.detail and "cancelled" in raised.value.detail
