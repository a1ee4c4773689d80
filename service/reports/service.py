"""A job's report: everything a run left behind, read through the domains' own repositories
into one document (schemas.JobReport) that page.py turns into a self-contained HTML page.

No HTTP here, and nothing written: a report is a read of what the API serves elsewhere.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from service.errors import BadRequest
from service.events.repository import EventRepository
from service.exports.repository import ExportRepository
from service.exports.service import to_schema as export_schema
from service.job_configs.service import list_config_versions
from service.jobs.repository import JobRepository
from service.jobs.schemas import Completion, Evaluation, Job, JobEvent
from service.jobs.service import get_job
from service.jobs.step_json import step_json
from service.jobs.step_repository import StepRepository
from service.models import Job as JobRow
from service.reports.schemas import (
    MAX_REPORT_STEPS,
    RANKED_COMPLETIONS,
    JobReport,
    LengthPoint,
    Lineage,
    LineageJob,
    StepCompletions,
)

# The events the charts mark (as the dashboard's charts do).
MARKED_EVENTS = ("config_applied", "paused", "resumed", "guard_tripped")
# A job has at most train_steps steps; this only bounds one read.
MAX_STEPS_READ = 1_000_000


def build_report(
    session: Session, tenant_id: str, job_id: str, *, steps: Sequence[int] | None = None
) -> JobReport:
    """The job's report; ``steps``: whose best and worst completions to show (default: the
    first and the last step recorded). 404 for another tenant's job, 400 for a step that
    was not recorded."""
    job = get_job(session, tenant_id, job_id)
    step_repository = StepRepository(session)
    step_rows = step_repository.list_steps(job.id, after_step=0, limit=MAX_STEPS_READ)
    recorded = [int(row["step"]) for row in step_rows]
    chosen = _chosen_steps(recorded, steps)
    return JobReport(
        generated_at=datetime.now(UTC),
        job=Job.model_validate(job),
        steps=[json.loads(step_json(row)) for row in step_rows],
        completion_lengths=[
            LengthPoint(step=step, mean_tokens=mean)
            for step, mean in step_repository.completion_lengths(job.id)
        ],
        evaluations=[
            Evaluation.model_validate(row)
            for row in step_repository.list_evaluations(job.id, after_step=0, limit=MAX_STEPS_READ)
        ],
        config_versions=list_config_versions(session, tenant_id, job.id),
        events=[
            JobEvent.model_validate(event)
            for event in EventRepository(session).list_events_of_kinds(job.id, MARKED_EVENTS)
        ],
        completions=[
            StepCompletions(
                step=step,
                best=_completions(step_repository, job.id, step, best=True),
                worst=_completions(step_repository, job.id, step, best=False),
            )
            for step in chosen
        ],
        lineage=_lineage(session, tenant_id, job),
        exports=[export_schema(row) for row in ExportRepository(session).list_for_job(job.id)],
    )


def _chosen_steps(recorded: list[int], asked: Sequence[int] | None) -> list[int]:
    if not asked:
        return sorted({recorded[0], recorded[-1]}) if recorded else []
    chosen = sorted(set(asked))
    if len(chosen) > MAX_REPORT_STEPS:
        raise BadRequest(
            f"steps: at most {MAX_REPORT_STEPS} steps' completions fit a report, got {len(chosen)}"
        )
    known = set(recorded)
    missing = [step for step in chosen if step not in known]
    if missing:
        have = f"steps 1 to {recorded[-1]}" if recorded else "no steps yet"
        raise BadRequest(
            f"steps: the job recorded no step {', '.join(map(str, missing))} (it has {have})"
        )
    return chosen


def _completions(
    repository: StepRepository, job_id: str, step: int, *, best: bool
) -> list[Completion]:
    # An agent's completions carry their rollouts (turns, tool calls and results), which the
    # page shows folded under the final answer.
    return [
        Completion.model_validate(row)
        for row in repository.ranked_completions(job_id, step, limit=RANKED_COMPLETIONS, best=best)
    ]


def _lineage(session: Session, tenant_id: str, job: JobRow) -> Lineage:
    jobs = JobRepository(session)
    parent = None
    if job.parent_job_id is not None:
        # The lineage outlives the parent's row: a deleted parent is still named.
        row = jobs.get(tenant_id, job.parent_job_id)
        parent = LineageJob(
            id=job.parent_job_id,
            name=row.name if row else None,
            status=row.status if row else None,
            checkpoint_step=job.parent_checkpoint_step,
        )
    children = [
        LineageJob(
            id=child.id,
            name=child.name,
            status=child.status,
            checkpoint_step=child.parent_checkpoint_step,
        )
        for child in jobs.list_children(tenant_id, job.id)
    ]
    return Lineage(parent=parent, children=children)
