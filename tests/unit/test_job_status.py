from __future__ import annotations

import pytest

from service.errors import IllegalTransition
from service.jobs.status import ALLOWED_TRANSITIONS, JOB_STATES, JobStatus


def test_terminal_statuses_have_no_way_out() -> None:
    for status in JobStatus:
        assert status.is_terminal == (not ALLOWED_TRANSITIONS[status])


@pytest.mark.parametrize(
    ("current", "target", "allowed"),
    [
        (JobStatus.QUEUED, JobStatus.RUNNING, True),
        (JobStatus.QUEUED, JobStatus.CANCELLED, True),
        (JobStatus.RUNNING, JobStatus.SUCCEEDED, True),
        (JobStatus.RUNNING, JobStatus.PAUSING, True),
        (JobStatus.PAUSED, JobStatus.QUEUED, True),
        # Pausing: the worker is finishing its step and saving the checkpoint.
        (JobStatus.PAUSING, JobStatus.PAUSED, True),  # the worker let go
        (JobStatus.PAUSING, JobStatus.RUNNING, True),  # resume: the pause is called off
        (JobStatus.PAUSING, JobStatus.CANCELLED, True),
        (JobStatus.PAUSING, JobStatus.SUCCEEDED, True),  # its last step
        (JobStatus.PAUSING, JobStatus.FAILED, True),
        (JobStatus.PAUSING, JobStatus.QUEUED, False),  # the worker still holds it
        (JobStatus.PAUSING, JobStatus.PAUSING, False),
        (JobStatus.RUNNING, JobStatus.PAUSED, False),  # only through pausing
        (JobStatus.QUEUED, JobStatus.PAUSING, False),
        (JobStatus.PAUSED, JobStatus.RUNNING, False),  # resume queues it: a worker takes it
        (JobStatus.PAUSED, JobStatus.PAUSING, False),
        (JobStatus.PAUSED, JobStatus.CANCELLED, True),
        (JobStatus.QUEUED, JobStatus.SUCCEEDED, False),
        (JobStatus.SUCCEEDED, JobStatus.RUNNING, False),
        (JobStatus.CANCELLED, JobStatus.CANCELLED, False),
        (JobStatus.FAILED, JobStatus.QUEUED, False),
    ],
)
def test_transition_table(current: JobStatus, target: JobStatus, allowed: bool) -> None:
    assert JOB_STATES.allows(current, target) is allowed


def test_a_pausing_job_still_has_its_worker_and_a_paused_one_has_none() -> None:
    assert JobStatus.PAUSING.has_worker and JobStatus.RUNNING.has_worker
    assert not JobStatus.PAUSED.has_worker and not JobStatus.QUEUED.has_worker
    assert not JobStatus.PAUSING.is_terminal and not JobStatus.PAUSED.is_terminal


def test_illegal_transition_is_a_409_naming_both_states() -> None:
    with pytest.raises(IllegalTransition) as raised:
        JOB_STATES.ensure("job_1", JobStatus.SUCCEEDED, JobStatus.CANCELLED)
    assert raised.value.status_code == 409
    assert "succeeded" in raised.value.detail and "cancelled" in raised.value.detail


def test_the_sdk_knows_every_status_and_which_end_a_job() -> None:
    import rft

    assert {status.value for status in rft.JobStatus} == {status.value for status in JobStatus}
    for status in JobStatus:
        assert rft.JobStatus(status.value).is_terminal == status.is_terminal


def test_every_status_reads_as_one_of_openais() -> None:
    from typing import get_args

    from service.openai_compat.fine_tuning.schemas import FineTuningJobStatus
    from service.openai_compat.fine_tuning.service import openai_status

    assert {openai_status(status) for status in JobStatus} <= set(get_args(FineTuningJobStatus))
    # OpenAI has no "pausing": the job reads paused from the pause on.
    assert openai_status(JobStatus.PAUSING) == "paused"
    assert openai_status(JobStatus.PAUSED) == "paused"
    assert openai_status(JobStatus.RUNNING) == "running"
