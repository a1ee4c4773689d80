"""The job report's document: what the page embeds as JSON and draws (service/reports/page.py).

Each part is the schema the API already answers with elsewhere (the job, its steps, evaluations,
config versions, events, completions, exports), so the page reads the same fields as the
dashboard and the SDK.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from service.exports.schemas import Export
from service.job_configs.schemas import JobConfig
from service.jobs.schemas import Completion, Evaluation, Job, JobEvent

# At most this many steps' best and worst completions: a report stays a page, not a dump.
MAX_REPORT_STEPS = 10
# Completions shown per chosen step, at each end of the reward ranking.
RANKED_COMPLETIONS = 3


class LengthPoint(BaseModel):
    step: int
    mean_tokens: float = Field(description="The step's mean completion length in tokens.")


class StepCompletions(BaseModel):
    """A chosen step's completions with the highest and the lowest total reward."""

    step: int
    best: list[Completion]
    worst: list[Completion]


class LineageJob(BaseModel):
    id: str
    name: str | None = Field(None, description="null when the job is gone.")
    status: str | None = Field(None, description="null when the job is gone.")
    checkpoint_step: int | None = Field(
        None, description="The checkpoint the child started from; null: the final adapter."
    )


class Lineage(BaseModel):
    parent: LineageJob | None
    children: list[LineageJob]


class JobReport(BaseModel):
    generated_at: datetime
    job: Job
    # Items of GET /v1/jobs/{id}/steps, as that endpoint writes them.
    steps: list[dict[str, Any]]
    completion_lengths: list[LengthPoint]
    evaluations: list[Evaluation]
    config_versions: list[JobConfig]
    # What the charts mark: config changes applied, pauses, resumes, guard trips.
    events: list[JobEvent]
    completions: list[StepCompletions]
    lineage: Lineage
    exports: list[Export]
