"""Every SQL statement on what a run records: steps, completions, evaluations, reward errors
and logs. The API reads them here; the worker writes them here (workers.step_store turns a
training step into rows)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import RowMapping, Text, cast, delete, func, or_, select, tuple_, update
from sqlalchemy.dialects.postgresql import insert as pg_insert

from service.bulk import copy_lines
from service.keyset import after_key
from service.models import (
    Completion,
    Evaluation,
    Job,
    JobConfigVersion,
    RewardErrorRecord,
    RewardLog,
    Step,
)
from service.repository import Repository

FunctionRecord = TypeVar("FunctionRecord", RewardLog, RewardErrorRecord)

# The columns of the COPY lines replace_step takes (service.bulk formats them).
COMPLETION_COLUMNS = [
    "job_id",
    "step",
    "config_version",
    "prompt_index",
    "group_position",
    "dataset_index",
    "prompt",
    "completion",
    "scores",
    "total",
    "advantage",
    "token_count",
    "trajectory",
]
ERROR_COLUMNS = [
    "job_id",
    "step",
    "function_name",
    "function_version",
    "kind",
    "message",
    "traceback",
    "sample_index",
]
LOG_COLUMNS = ["job_id", "step", "function_name", "function_version", "output", "truncated"]


class StepRepository(Repository):
    def list_steps(self, job_id: str, *, after_step: int, limit: int) -> Sequence[RowMapping]:
        """Plain rows (not ORM objects), their JSON columns (reward_functions, ...) left as
        the JSON text Postgres holds: a long run's 1000 steps are read often (graphs, the
        event stream), and building ORM objects or decoding each row's jsonb cost more than
        the query itself."""
        as_text = ("reward_functions", "agent_metrics", "metrics", "async_generation")
        columns = [c for c in Step.__table__.c if c.name not in as_text]
        return (
            self.session.execute(
                select(
                    *columns,
                    *(cast(Step.__table__.c[name], Text).label(name) for name in as_text),
                )
                .where(Step.job_id == job_id, Step.step > after_step)
                .order_by(Step.step)
                .limit(limit)
            )
            .mappings()
            .all()
        )

    def list_evaluations(self, job_id: str, *, after_step: int, limit: int) -> list[Evaluation]:
        statement = select(Evaluation).where(Evaluation.job_id == job_id)
        page = after_key(statement, Evaluation.step, after_step, limit)
        return list(self.session.scalars(page))

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

    def completion_lengths(self, job_id: str) -> list[tuple[int, float]]:
        """Each stored step's mean completion length in tokens, in step order."""
        rows = self.session.execute(
            select(Completion.step, func.avg(Completion.token_count))
            .where(Completion.job_id == job_id)
            .group_by(Completion.step)
            .order_by(Completion.step)
        )
        return [(step, float(mean)) for step, mean in rows]

    def ranked_completions(
        self, job_id: str, step: int, *, limit: int, best: bool
    ) -> list[Completion]:
        """A step's highest (``best``) or lowest total rewards; unscored ones (null) last."""
        total = Completion.total.desc() if best else Completion.total.asc()
        return list(
            self.session.scalars(
                select(Completion)
                .where(Completion.job_id == job_id, Completion.step == step)
                .order_by(total.nulls_last(), Completion.id)
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
        statement = select(model).where(model.job_id == job_id)
        if step is not None:
            statement = statement.where(model.step == step)
        if function is not None:
            statement = statement.where(model.function_name == function)
        return list(self.session.scalars(after_key(statement, model.id, after_id, limit)))

    # the worker's writes
    def replace_step(
        self,
        job_id: str,
        step: int,
        values: dict[str, Any],
        *,
        completions: list[str],
        errors: list[str],
        logs: list[str],
    ) -> None:
        """Store one step, replacing whatever an earlier attempt stored for it (a write
        retried after a lost connection, a step re-run after a resume).

        Three statements whatever the step's size (the deletes and the step row in one, a COPY
        of the completions; plus a COPY each for reward errors and logs when there are any):
        time goes to streaming rows, not to round trips. ``completions``, ``errors`` and
        ``logs`` are COPY lines in COMPLETION_COLUMNS, ERROR_COLUMNS and LOG_COLUMNS.
        """
        # Deletes run as CTEs of the step upsert: one statement instead of four.
        deletes = [
            delete(Completion)
            .where(Completion.job_id == job_id, Completion.step == step)
            .cte("d_completions"),
            delete(RewardErrorRecord)
            .where(RewardErrorRecord.job_id == job_id, RewardErrorRecord.step == step)
            .cte("d_errors"),
            delete(RewardLog)
            .where(RewardLog.job_id == job_id, RewardLog.step == step)
            .cte("d_logs"),
        ]
        row = {**values, "created_at": datetime.now(UTC)}
        self.session.execute(
            pg_insert(Step)
            .values(job_id=job_id, step=step, **row)
            .on_conflict_do_update(index_elements=[Step.job_id, Step.step], set_=row)
            .add_cte(*deletes)
        )
        raw = self.session.connection().connection.driver_connection
        with raw.cursor() as cursor:  # type: ignore[union-attr]
            copy_lines(cursor, "completions", COMPLETION_COLUMNS, completions)
            copy_lines(cursor, "reward_errors", ERROR_COLUMNS, errors)
            copy_lines(cursor, "reward_logs", LOG_COLUMNS, logs)

    def replace_evaluation(self, job_id: str, step: int, values: dict[str, Any]) -> None:
        row = {**values, "created_at": datetime.now(UTC)}
        self.session.execute(
            pg_insert(Evaluation)
            .values(job_id=job_id, step=step, **row)
            .on_conflict_do_update(index_elements=[Evaluation.job_id, Evaluation.step], set_=row)
        )

    def advance(self, job_id: str, step: int, config_version: int) -> bool:
        """The job row follows its stored steps; the first step scored by a config version
        marks where it applied. Whether this step is where ``config_version`` applied."""
        applied = (
            update(JobConfigVersion)
            .where(
                JobConfigVersion.job_id == job_id,
                JobConfigVersion.version == config_version,
                or_(
                    JobConfigVersion.applied_at_step.is_(None),
                    JobConfigVersion.applied_at_step > step,
                ),
            )
            .values(applied_at_step=step)
            .returning(JobConfigVersion.version)
            .cte("applied")
        )
        applied_version = select(applied.c.version).scalar_subquery()
        newly_applied = self.session.scalar(
            update(Job)
            .where(Job.id == job_id)
            .values(
                steps_completed=step,
                heartbeat_at=datetime.now(UTC),
                applied_config_version=func.coalesce(applied_version, Job.applied_config_version),
            )
            .returning(applied_version)
        )
        return newly_applied is not None

    def zero_std_fractions(self, job_id: str) -> list[tuple[int, float | None]]:
        """Each stored step's share of groups whose rewards did not vary, in step order."""
        rows = self.session.execute(
            select(Step.step, Step.frac_reward_zero_std)
            .where(Step.job_id == job_id)
            .order_by(Step.step)
        )
        return [(row[0], row[1]) for row in rows]
