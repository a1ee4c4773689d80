"""Which webhook events there are, when a job change raises them, and what their bodies say.

Our own events are named after the job's statuses (``job.<status>``) plus
``job.created`` and ``job.guard_tripped``. The fine-tuning ones carry the names and the body
OpenAI's webhooks use (``fine_tuning.job.succeeded``, ...: the ``openai`` package's
``FineTuningJob*WebhookEvent`` types), so a receiver written for OpenAI's fine-tuning
webhooks takes ours unchanged: ``{"id", "type", "created_at", "object": "event",
"data": {"id": <job id>}}``.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from service.jobs.status import JobStatus
from service.models import new_id

JOB_CREATED = "job.created"
JOB_RUNNING = "job.running"
JOB_PAUSED = "job.paused"
JOB_SUCCEEDED = "job.succeeded"
JOB_FAILED = "job.failed"
JOB_CANCELLED = "job.cancelled"
JOB_GUARD_TRIPPED = "job.guard_tripped"
FINE_TUNING_SUCCEEDED = "fine_tuning.job.succeeded"
FINE_TUNING_FAILED = "fine_tuning.job.failed"
FINE_TUNING_CANCELLED = "fine_tuning.job.cancelled"
# Sent by POST /v1/webhooks/{id}/test to that endpoint alone, whatever it subscribed to.
WEBHOOK_TEST = "webhook.test"

OUR_EVENT_TYPES = (
    JOB_CREATED,
    JOB_RUNNING,
    JOB_PAUSED,
    JOB_SUCCEEDED,
    JOB_FAILED,
    JOB_CANCELLED,
    JOB_GUARD_TRIPPED,
)
OPENAI_EVENT_TYPES = (FINE_TUNING_SUCCEEDED, FINE_TUNING_FAILED, FINE_TUNING_CANCELLED)
EVENT_TYPES = (*OUR_EVENT_TYPES, *OPENAI_EVENT_TYPES)

# The events a move into a status raises. queued (a lost worker's job going back) and
# pausing (a pause asked for, the worker still on its step) raise none: paused follows.
STATUS_EVENTS: dict[JobStatus, tuple[str, ...]] = {
    JobStatus.RUNNING: (JOB_RUNNING,),
    JobStatus.PAUSED: (JOB_PAUSED,),
    JobStatus.SUCCEEDED: (JOB_SUCCEEDED, FINE_TUNING_SUCCEEDED),
    JobStatus.FAILED: (JOB_FAILED, FINE_TUNING_FAILED),
    JobStatus.CANCELLED: (JOB_CANCELLED, FINE_TUNING_CANCELLED),
}


def unknown_event_types(names: list[str]) -> list[str]:
    return sorted(set(names) - set(EVENT_TYPES))


def event_body(
    event_type: str, created_at: datetime, data: dict[str, Any], *, event_id: str | None = None
) -> tuple[str, str]:
    """(the event's id, its JSON body). OpenAI's fine-tuning events carry only the job's id
    in ``data``, as OpenAI sends them; ours add what the change says (status, reason...)."""
    event_id = event_id or new_id("evt")
    if event_type in OPENAI_EVENT_TYPES:
        data = {"id": data["id"]}
    body = {
        "id": event_id,
        "type": event_type,
        "created_at": int(created_at.timestamp()),
        "object": "event",
        "data": data,
    }
    return event_id, json.dumps(body, separators=(",", ":"), sort_keys=True)
