"""Follow a job by polling Postgres and turn what changed into Server-Sent Events.

Each poll opens a short-lived session in a worker thread and closes it before sleeping, so a
thousand idle dashboards hold no database connections. Polling (rather than LISTEN/NOTIFY)
keeps the workers unchanged: they already commit every step, and the database stays the one
source of truth.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import RowMapping
from starlette.concurrency import run_in_threadpool

from service.auth.service import Caller, key_is_active
from service.db import session_scope
from service.events.repository import EventRepository
from service.events.schemas import HEARTBEAT, ServerSentEvent, StreamCursor
from service.jobs.heartbeats import HeartbeatSilence
from service.jobs.schemas import Job, JobEvent
from service.jobs.service import get_job
from service.jobs.status import JobStatus
from service.jobs.step_json import step_json
from service.jobs.step_repository import StepRepository
from service.settings import get_settings
from service.usage import service as usage

POLL_INTERVAL_S = 0.5
HEARTBEAT_INTERVAL_S = 15.0
# How often an open stream re-checks its API key (one primary-key read, folded into a poll):
# a revoked key stops reading within this time.
KEY_CHECK_INTERVAL_S = 5.0
PAGE_SIZE = 500


@dataclass
class JobSnapshot:
    """One poll's reads: the job row, then what was recorded after the cursor."""

    job: Job
    steps: Sequence[RowMapping]  # list_steps rows: written as GET /steps writes them
    events: list[JobEvent]
    caught_up: bool
    # The worker holding the job's lease (None once it let go) and its last heartbeat.
    worker_id: str | None
    heartbeat_at: datetime | None


class KeyRevoked(Exception):
    """The stream's API key was revoked while it was open."""


def read_snapshot(
    tenant_id: str, job_id: str, cursor: StreamCursor, *, check_key_id: str | None = None
) -> JobSnapshot:
    """Blocking: call from a worker thread. Raises NotFound for another tenant's job, and
    KeyRevoked when ``check_key_id`` names a key that is no longer active."""
    with session_scope() as session:
        if check_key_id is not None and not key_is_active(session, check_key_id):
            raise KeyRevoked(check_key_id)
        # The job is read first: every step and event it counts is then visible to the reads
        # below, so a terminal job whose reads come back short has nothing left to send.
        row = get_job(session, tenant_id, job_id)
        job = Job.model_validate(row).model_copy(
            update={"eta_seconds": usage.eta_seconds(session, row)}
        )
        steps = StepRepository(session).list_steps(
            job_id, after_step=cursor.last_step, limit=PAGE_SIZE
        )
        events = EventRepository(session).list_events(
            job_id, after_id=cursor.last_event_id, limit=PAGE_SIZE
        )
        return JobSnapshot(
            job=job,
            steps=steps,
            events=[JobEvent.model_validate(event) for event in events],
            caught_up=len(steps) < PAGE_SIZE and len(events) < PAGE_SIZE,
            worker_id=row.worker_id,
            heartbeat_at=row.heartbeat_at,
        )


@dataclass
class JobFollower:
    """The per-connection state of one stream: cursor, what the client knows, when to stop."""

    tenant_id: str
    job_id: str
    cursor: StreamCursor
    lease_s: float
    last_job_state: tuple[object, ...] | None = None
    ended: bool = False
    silence: HeartbeatSilence = field(default_factory=HeartbeatSilence)

    def messages(self, snapshot: JobSnapshot) -> list[ServerSentEvent]:
        """The messages a snapshot adds, in the order things happened; advances the cursor."""
        timeline: list[tuple[datetime, RowMapping | JobEvent]] = [
            *((step["created_at"], step) for step in snapshot.steps),
            *((event.created_at, event) for event in snapshot.events),
        ]
        # Stable sort: a step and the events it caused share a transaction and timestamp.
        timeline.sort(key=lambda entry: entry[0])
        messages: list[ServerSentEvent] = []
        for _, record in timeline:
            if not isinstance(record, JobEvent):
                self.cursor = StreamCursor(record["step"], self.cursor.last_event_id)
                messages.append(ServerSentEvent("step", step_json(record), self.cursor))
            else:
                last_step = self.cursor.last_step
                if record.kind == "resumed":
                    # Steps after the checkpoint are re-run and their records replaced: send
                    # them again as they come (clients replace a step they already have).
                    last_step = min(last_step, int(record.data.get("checkpoint_step", last_step)))
                self.cursor = StreamCursor(last_step, record.id)
                messages.append(ServerSentEvent(record.kind, record.model_dump_json(), self.cursor))

        job = snapshot.job
        terminal = JobStatus(job.status).is_terminal
        finished = terminal and snapshot.caught_up and not self._worker_attached(snapshot)
        state = (job.status, job.steps_completed, job.config_version, job.applied_config_version)
        if state != self.last_job_state or finished:
            # Job state is a snapshot, not a log entry: it is sent on every (re)connect, and
            # once more right before `end`, so the last `job` a client sees is the final one.
            self.last_job_state = state
            messages.append(ServerSentEvent("job", job.model_dump_json(), self.cursor))

        if finished:
            self.ended = True
            end = {"status": job.status, "steps_completed": job.steps_completed}
            messages.append(ServerSentEvent("end", json.dumps(end), self.cursor))
        return messages

    def _worker_attached(self, snapshot: JobSnapshot) -> bool:
        """A worker still holds the lease: after a cancel it records the step it was computing
        and its checkpoint, and only then lets go. One whose heartbeat stood still for the
        lease time is dead and holds nothing back."""
        if snapshot.worker_id is None:
            return False
        silent_s = self.silence.silent_for(self.job_id, snapshot.heartbeat_at, time.monotonic())
        return silent_s < self.lease_s


async def open_job_stream(
    caller: Caller,
    job_id: str,
    cursor: StreamCursor,
    *,
    poll_interval_s: float = POLL_INTERVAL_S,
    heartbeat_interval_s: float = HEARTBEAT_INTERVAL_S,
    key_check_interval_s: float = KEY_CHECK_INTERVAL_S,
) -> AsyncIterator[str]:
    """Check access now (so a foreign job is a plain 404), then return the stream's body."""
    tenant_id = caller.tenant_id
    follower = JobFollower(tenant_id, job_id, cursor, lease_s=get_settings().worker_lease_s)
    first = await run_in_threadpool(read_snapshot, tenant_id, job_id, cursor)
    return _follow(
        follower, first, caller.key_id, poll_interval_s, heartbeat_interval_s, key_check_interval_s
    )


async def _follow(
    follower: JobFollower,
    snapshot: JobSnapshot,
    key_id: str,
    poll_interval_s: float,
    heartbeat_interval_s: float,
    key_check_interval_s: float,
) -> AsyncIterator[str]:
    last_sent = key_checked = time.monotonic()
    while True:
        messages = follower.messages(snapshot)
        if messages:
            yield "".join(message.encode() for message in messages)
            last_sent = time.monotonic()
        elif time.monotonic() - last_sent >= heartbeat_interval_s:
            # A comment line: keeps proxies and load balancers from closing an idle stream.
            yield HEARTBEAT
            last_sent = time.monotonic()
        if follower.ended:
            return
        if snapshot.caught_up:
            await asyncio.sleep(poll_interval_s)
        # else: a full page came back, so replay the rest at once.
        check_key = time.monotonic() - key_checked >= key_check_interval_s
        try:
            snapshot = await run_in_threadpool(
                functools.partial(
                    read_snapshot,
                    follower.tenant_id,
                    follower.job_id,
                    follower.cursor,
                    check_key_id=key_id if check_key else None,
                )
            )
        except KeyRevoked:
            # No id: the client's cursor stays where it was. A client that reconnects with
            # the same key gets the 401 every other request gets.
            detail = {"error": "Unauthorized", "detail": "the API key was revoked"}
            yield ServerSentEvent("error", json.dumps(detail)).encode()
            return
        if check_key:
            key_checked = time.monotonic()
