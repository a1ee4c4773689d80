"""The job state machine, and the node state machine of a job over several machines: every
allowed transition is listed here and nowhere else.

Every phase a user can act on is a status they can see. ``pausing`` is the stretch between a
pause request and the worker letting go: the worker finishes its step and checkpoints. A
``resume`` in that stretch cancels the pause (back to ``running``: the worker trains on), a
``cancel`` stops the job as from ``running``.
"""

from __future__ import annotations

from enum import StrEnum

from service.leases import StateMachine


class JobStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    PAUSING = "pausing"
    PAUSED = "paused"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATUSES

    @property
    def has_worker(self) -> bool:
        """A worker holds the job (its lease): the statuses a lost worker is looked for in."""
        return self in OWNED_STATUSES


TERMINAL_STATUSES = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})
OWNED_STATUSES = frozenset({JobStatus.RUNNING, JobStatus.PAUSING})

ALLOWED_TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    JobStatus.QUEUED: frozenset({JobStatus.RUNNING, JobStatus.CANCELLED, JobStatus.FAILED}),
    JobStatus.RUNNING: frozenset(
        {
            JobStatus.SUCCEEDED,
            JobStatus.FAILED,
            JobStatus.CANCELLED,
            JobStatus.PAUSING,
            # A worker was lost: the job goes back to the queue and resumes from a checkpoint.
            JobStatus.QUEUED,
        }
    ),
    JobStatus.PAUSING: frozenset(
        {
            # The worker checkpointed and let go.
            JobStatus.PAUSED,
            # resume before the worker let go: the pause is called off.
            JobStatus.RUNNING,
            JobStatus.CANCELLED,
            # The run ended on its own (its last step) or failed while pausing.
            JobStatus.SUCCEEDED,
            JobStatus.FAILED,
        }
    ),
    JobStatus.PAUSED: frozenset({JobStatus.QUEUED, JobStatus.CANCELLED}),
    JobStatus.SUCCEEDED: frozenset(),
    JobStatus.FAILED: frozenset(),
    JobStatus.CANCELLED: frozenset(),
}


JOB_STATES = StateMachine("job", ALLOWED_TRANSITIONS)


class NodeState(StrEnum):
    """One machine's part of a job over several (a ``job_nodes`` row, workers.placement)."""

    WAITING = "waiting"  # joined the placement; waiting for the others
    LAUNCHED = "launched"  # every node joined; its launcher runs the job's ranks
    FINISHED = "finished"  # its ranks exited cleanly
    FAILED = "failed"  # its ranks failed (the row's detail says why)

    @property
    def is_settled(self) -> bool:
        """The node said how its processes ended."""
        return self in (NodeState.FINISHED, NodeState.FAILED)


NODE_TRANSITIONS: dict[NodeState, frozenset[NodeState]] = {
    NodeState.WAITING: frozenset({NodeState.LAUNCHED}),
    NodeState.LAUNCHED: frozenset({NodeState.FINISHED, NodeState.FAILED}),
    NodeState.FINISHED: frozenset(),
    NodeState.FAILED: frozenset(),
}


NODE_STATES = StateMachine("node", NODE_TRANSITIONS)
