from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from sqlalchemy import RowMapping, Text, cast, func, select, tuple_
from sqlalchemy.orm import Session

from service.models import (
    Checkpoint,
    Completion,
    Evaluation,
    Job,
    JobConfigVersion,
    JobEvent,
    RewardErrorRecord,
    RewardFunctionVersion,
    RewardLog,
    Step,
)
from service.server_paths import hide_paths_in, hide_server_paths

FunctionRecord = TypeVar("FunctionRecord", RewardLog, RewardErrorRecord)


# Postgres NOTIFY channel the workers listen on for changes to their jobs.
JOB_CHANNEL = "rft_jobs"


# First key of the per-job advisory lock that orders event ids (the second is the job's hash).
EVENT_ORDER_LOCK_CLASS = 0x5246_5401


class JobRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    # jobs
    def add(self, job: Job) -> Job:
        self.session.add(job)
        self.session.flush()
        return job

    def get(self, tenant_id: str, job_id: str, *, for_update: bool = False) -> Job | None:
        statement = select(Job).where(Job.id == job_id, Job.tenant_id == tenant_id)
        if for_update:
            statement = statement.with_for_update()
        return self.session.scalar(statement)

    def get_any_tenant(self, job_id: str, *, for_update: bool = False) -> Job | None:
        """For workers, which act on a job id the API already checked."""
        statement = select(Job).where(Job.id == job_id)
        if for_update:
            statement = statement.with_for_update()
        return self.session.scalar(statement)

    def notify_changed(self, job_id: str) -> None:
        """Wake the job's worker (workers.job_watch): delivered when the transaction commits."""
        self.session.execute(select(func.pg_notify(JOB_CHANNEL, job_id)))

    def get_by_idempotency_key(self, tenant_id: str, key: str) -> Job | None:
        return self.session.scalar(
            select(Job).where(Job.tenant_id == tenant_id, Job.idempotency_key == key)
        )

    def list_jobs(
        self, tenant_id: str, *, limit: int, after: str | None, status: str | None
    ) -> list[Job]:
        statement = select(Job).where(Job.tenant_id == tenant_id)
        if status:
            statement = statement.where(Job.status == status)
        if after:
            anchor = self.get(tenant_id, after)
            if anchor is not None:
                statement = statement.where(
                    tuple_(Job.created_at, Job.id) < tuple_(anchor.created_at, anchor.id)
                )
        statement = statement.order_by(Job.created_at.desc(), Job.id.desc()).limit(limit)
        return list(self.session.scalars(statement))

    # reward configs
    def add_function_version(self, version: RewardFunctionVersion) -> None:
        self.session.add(version)

    def add_config_version(self, config: JobConfigVersion) -> None:
        self.session.add(config)

    def get_config_version(self, job_id: str, version: int) -> JobConfigVersion | None:
        return self.session.scalar(
            select(JobConfigVersion).where(
                JobConfigVersion.job_id == job_id, JobConfigVersion.version == version
            )
        )

    def list_config_versions(self, job_id: str) -> list[JobConfigVersion]:
        return list(
            self.session.scalars(
                select(JobConfigVersion)
                .where(JobConfigVersion.job_id == job_id)
                .order_by(JobConfigVersion.version)
            )
        )

    def function_sources(
        self, job_id: str, keys: Sequence[tuple[str, int]]
    ) -> dict[tuple[str, int], RewardFunctionVersion]:
        if not keys:
            return {}
        names = {name for name, _ in keys}
        rows = self.session.scalars(
            select(RewardFunctionVersion).where(
                RewardFunctionVersion.job_id == job_id, RewardFunctionVersion.name.in_(names)
            )
        )
        wanted = set(keys)
        return {(r.name, r.version): r for r in rows if (r.name, r.version) in wanted}

    def latest_function_versions(self, job_id: str) -> dict[str, RewardFunctionVersion]:
        latest: dict[str, RewardFunctionVersion] = {}
        rows = self.session.scalars(
            select(RewardFunctionVersion)
            .where(RewardFunctionVersion.job_id == job_id)
            .order_by(RewardFunctionVersion.version)
        )
        for row in rows:
            latest[row.name] = row
        return latest

    # records
    def list_steps(self, job_id: str, *, after_step: int, limit: int) -> Sequence[RowMapping]:
        """Plain rows (not ORM objects), reward_functions left as the JSON text Postgres holds:
        a long run's 1000 steps are read often (graphs, the event stream), and building ORM
        objects or decoding each row's jsonb cost more than the query itself."""
        columns = [c for c in Step.__table__.c if c.name != "reward_functions"]
        return (
            self.session.execute(
                select(*columns, cast(Step.reward_functions, Text).label("reward_functions"))
                .where(Step.job_id == job_id, Step.step > after_step)
                .order_by(Step.step)
                .limit(limit)
            )
            .mappings()
            .all()
        )

    def list_evaluations(self, job_id: str, *, after_step: int, limit: int) -> list[Evaluation]:
        return list(
            self.session.scalars(
                select(Evaluation)
                .where(Evaluation.job_id == job_id, Evaluation.step > after_step)
                .order_by(Evaluation.step)
                .limit(limit)
            )
        )

    def evaluation_rewards(self, job_id: str) -> dict[int, float | None]:
        """Each evaluated step's validation reward mean."""
        rows = self.session.execute(
            select(Evaluation.step, Evaluation.reward_mean).where(Evaluation.job_id == job_id)
        )
        return {step: reward for step, reward in rows}

    def list_completions(
        self, job_id: str, *, step: int | None, after: tuple[int, int] | None, limit: int
    ) -> list[Completion]:
        """In (step, id) order, after the (step, id) keyset cursor: the (job_id, step, id)
        index serves every page, with or without a step, however deep."""
        statement = select(Completion).where(Completion.job_id == job_id)
        if step is not None:
            statement = statement.where(Completion.step == step)
        if after is not None:
            statement = statement.where(tuple_(Completion.step, Completion.id) > after)
        statement = statement.order_by(Completion.step, Completion.id).limit(limit)
        return list(self.session.scalars(statement))

    def add_event(
        self,
        job_id: str,
        kind: str,
        message: str,
        *,
        step: int | None = None,
        data: dict[str, Any] | None = None,
    ) -> None:
        # Readers follow a job's events by id (`id > cursor`). Ids come from a sequence, so two
        # transactions adding events to one job could commit in the other order and a reader
        # could pass the later id before the earlier one is visible, skipping it for good. A
        # per-job lock held until commit makes each job's ids visible in id order.
        # Lock order: the job row first (KEY SHARE, what the event's foreign key takes anyway),
        # then the event lock. Taking the event lock first deadlocked against a transaction
        # that holds the row FOR UPDATE and then adds an event (a cancel just as the worker
        # recorded its first event: one of them failed with a 503).
        self.session.execute(
            select(Job.id).where(Job.id == job_id).with_for_update(read=True, key_share=True)
        )
        self.session.execute(
            select(func.pg_advisory_xact_lock(EVENT_ORDER_LOCK_CLASS, func.hashtext(job_id)))
        )
        self.session.add(
            JobEvent(
                job_id=job_id,
                kind=kind,
                message=hide_server_paths(message),
                step=step,
                data=hide_paths_in(data or {}),
            )
        )

    def list_events(self, job_id: str, *, after_id: int, limit: int) -> list[JobEvent]:
        return list(
            self.session.scalars(
                select(JobEvent)
                .where(JobEvent.job_id == job_id, JobEvent.id > after_id)
                .order_by(JobEvent.id)
                .limit(limit)
            )
        )

    def list_function_records(
        self,
        model: type[FunctionRecord],
        job_id: str,
        *,
        step: int | None,
        function: str | None,
        after_id: int,
        limit: int,
    ) -> list[FunctionRecord]:
        """Reward logs or reward errors of a job, by step and function, in id order."""
        statement = select(model).where(model.job_id == job_id, model.id > after_id)
        if step is not None:
            statement = statement.where(model.step == step)
        if function is not None:
            statement = statement.where(model.function_name == function)
        return list(self.session.scalars(statement.order_by(model.id).limit(limit)))

    def latest_checkpoint(self, job_id: str) -> Checkpoint | None:
        return self.session.scalar(
            select(Checkpoint)
            .where(Checkpoint.job_id == job_id)
            .order_by(Checkpoint.step.desc())
            .limit(1)
        )

    def list_checkpoints(self, job_id: str) -> list[Checkpoint]:
        return list(
            self.session.scalars(
                select(Checkpoint).where(Checkpoint.job_id == job_id).order_by(Checkpoint.step)
            )
        )

    def get_checkpoint(self, job_id: str, step: int) -> Checkpoint | None:
        return self.session.get(Checkpoint, (job_id, step))
