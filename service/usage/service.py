"""Cost while and after a job runs: the GPU-seconds it holds devices for, its ETA from its own
step times, and a tenant's usage by day or job. No HTTP, no commits."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from statistics import fmean

from sqlalchemy.orm import Session

from rft.models.usage import UsageRow
from service.errors import BadRequest
from service.models import GpuUsage, Job
from service.usage.repository import UsageRepository
from service.usage.schemas import Usage, UsageGrouping

# The ETA's step time: the mean of the job's last this-many steps (recent enough to follow a
# run that speeds up or slows down, enough to smooth one slow step).
ETA_WINDOW = 10
MAX_USAGE_DAYS = 366


def held_devices(job: Job) -> int:
    return job.num_devices * job.num_nodes


def start_holding(session: Session, job: Job, now: datetime) -> None:
    """A worker took the job: its devices count from ``now``."""
    job.held_since = now
    UsageRepository(session).open_stretch(job, held_devices(job), now)


def stop_holding(session: Session, job: Job, now: datetime) -> None:
    """The job left running/pausing: the stretch's device-seconds join the job's total."""
    if job.held_since is not None:
        held_s = max(0.0, (now - job.held_since).total_seconds())
        job.gpu_seconds = (job.gpu_seconds or 0.0) + held_s * held_devices(job)
    job.held_since = None
    UsageRepository(session).close_stretch(job.id, now)


def eta_seconds(session: Session, job: Job) -> float | None:
    """Steps left x the mean of the job's recent step times; None before a step is stored,
    and once the job has ended."""
    if job.status in ("succeeded", "failed", "cancelled"):
        return None
    train_steps = (job.hyperparameters or {}).get("train_steps")
    if not isinstance(train_steps, int):
        return None
    durations = UsageRepository(session).recent_step_seconds(
        job.id, up_to_step=job.steps_completed, limit=ETA_WINDOW
    )
    if not durations:
        return None
    return max(0, train_steps - job.steps_completed) * fmean(durations)


def usage(
    session: Session,
    tenant_id: str,
    *,
    start: datetime | None,
    end: datetime | None,
    group_by: UsageGrouping,
) -> Usage:
    now = datetime.now(UTC)
    try:
        end = _utc(end) if end is not None else now
        start = _utc(start) if start is not None else end - timedelta(days=30)
    except OverflowError:
        raise BadRequest("from and to must be times from year 1 on, in UTC") from None
    if start >= end:
        raise BadRequest(f"from ({start.isoformat()}) must be before to ({end.isoformat()})")
    if end - start > timedelta(days=MAX_USAGE_DAYS):
        raise BadRequest(f"from .. to spans more than {MAX_USAGE_DAYS} days: ask in parts")
    repository = UsageRepository(session)
    seconds: dict[object, float] = defaultdict(float)
    jobs: dict[object, set[str]] = defaultdict(set)
    for stretch in repository.stretches(tenant_id, start, end):
        for key, held_s in _split(stretch, start, end, now, by_day=group_by == "day"):
            seconds[key] += held_s * stretch.devices
            jobs[key].add(stretch.job_id)
    tokens = dict(repository.tokens(tenant_id, start, end, by_day=group_by == "day"))
    if group_by == "day":
        token_jobs = repository.jobs_with_steps_by_day(tenant_id, start, end)
        for day, job_ids in token_jobs.items():
            jobs[day].update(job_ids)
    else:
        for job_id in tokens:
            jobs[job_id].add(str(job_id))
    keys = sorted({*seconds, *tokens, *jobs}, key=str)
    rows = [
        UsageRow(
            day=key if isinstance(key, date) else None,
            job_id=None if isinstance(key, date) else str(key),
            gpu_seconds=seconds.get(key, 0.0),
            tokens=tokens.get(key, 0),
            jobs=len(jobs.get(key, ())),
        )
        for key in keys
    ]
    all_jobs = set().union(*jobs.values()) if jobs else set()
    return Usage(
        start=start,
        end=end,
        group_by=group_by,
        gpu_seconds=sum(row.gpu_seconds for row in rows),
        tokens=sum(row.tokens for row in rows),
        jobs=len(all_jobs),
        rows=rows,
    )


def _utc(moment: datetime) -> datetime:
    # A time without a zone is read as UTC.
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _split(
    stretch: GpuUsage, start: datetime, end: datetime, now: datetime, *, by_day: bool
) -> list[tuple[object, float]]:
    """The stretch's seconds inside [start, end): per UTC day, or all under its job."""
    begin = max(stretch.started_at.astimezone(UTC), start)
    finish = min((stretch.ended_at or now).astimezone(UTC), end)
    if finish <= begin:
        return []
    if not by_day:
        return [(stretch.job_id, (finish - begin).total_seconds())]
    parts: list[tuple[object, float]] = []
    cursor = begin
    while cursor < finish:
        midnight = datetime.combine(cursor.date() + timedelta(days=1), datetime.min.time(), UTC)
        upto = min(midnight, finish)
        parts.append((cursor.date(), (upto - cursor).total_seconds()))
        cursor = upto
    return parts
