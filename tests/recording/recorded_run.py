"""A short GRPO run recorded into Postgres as the worker records one, without training: for
the tests of what reads a finished run (the job report). The rows go through the worker's own
writers (store_step, store_guard_trip), and the guard trip is what the guards find in the
recorded completions.

The run: six steps of a reward that counts the word 'yes'; its code changes at step 4 (config
v2). From step 4 the completions repeat the word (the reward is gamed) and the repetition
guard trips at step 6. One completion is hostile markup, for the pages that show it. The job
started from another job's checkpoint, one job continues from it, and it has one export.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from service.auth.repository import AuthRepository
from service.auth.service import hash_api_key
from service.db import session_scope
from service.jobs.guard_settings import GuardSettings
from service.models import (
    Export,
    Job,
    JobConfigVersion,
    RewardFunctionVersion,
    new_id,
)
from tests.held_jobs import stored_dataset
from workers.database_observer import store_guard_trip
from workers.guards import guard_trips
from workers.step_store import store_step
from workers.training.step_records import (
    CompletionRecord,
    EvalRecord,
    FunctionStepMetrics,
    StepRecord,
)

STEPS = 6
MAX_COMPLETION_LENGTH = 16
COUNTS_YES_V1 = (
    "def says_yes(prompt, completion, example):\n    return float('yes' in completion)\n"
)
COUNTS_YES_V2 = (
    "def says_yes(prompt, completion, example):\n"
    "    # pays for every 'yes'\n"
    "    return completion.split().count('yes') / 4\n"
)
HOSTILE = '<script>window.reportPwned = 1</script><img src=x onerror="window.reportPwned = 2">'
TOOL_ANSWER = "<b>the table says</b> yes"
# An agent's rollout as the worker records it: a tool call, its result, the final answer.
AGENT_ROLLOUT: list[dict[str, Any]] = [
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"name": "lookup", "arguments": {"key": "q"}}],
    },
    {"role": "tool", "name": "lookup", "content": TOOL_ANSWER, "duration_s": 0.02},
    {"role": "assistant", "content": " yes"},
]


@dataclass(frozen=True)
class RecordedRun:
    job_id: str
    parent_id: str
    child_id: str
    export_id: str


def _completions(step: int) -> list[CompletionRecord]:
    if step < 4:
        texts = [" yes", " no", " maybe yes", HOSTILE]
    else:  # gamed: the word over and over (never two alike: no group agreement)
        texts = [" yes" * (6 + i) for i in range(4)]
    scores = [texts[i].split().count("yes") / 4 for i in range(4)]
    # Before the gaming the first answer came from a tool, as an agent's rollout does.
    trajectories = [AGENT_ROLLOUT if step < 4 else None, None, None, None]
    return [
        CompletionRecord(
            prompt_index=i // 2,
            group_position=i % 2,
            dataset_index=i // 2,
            prompt=f"Say yes {i // 2}:",
            completion=text,
            scores={"says_yes": score},
            total=score,
            advantage=0.0,
            token_count=len(text.split()) + 1,
            trajectory=trajectories[i],
        )
        for i, (text, score) in enumerate(zip(texts, scores, strict=True))
    ]


def _record(step: int) -> StepRecord:
    completions = _completions(step)
    version = 1 if step < 4 else 2
    mean = sum(c.total or 0.0 for c in completions) / len(completions)
    metrics = FunctionStepMetrics("says_yes", version, 1.0, mean, 0.1, len(completions), 0)
    evaluation = None
    if step % 3 == 0:
        evaluation = EvalRecord(
            step=step,
            config_version=version,
            reward_mean=0.3 - 0.02 * step,
            reward_std=0.05,
            prompts=2,
            samples=4,
            duration_s=0.01,
            functions={"says_yes": metrics},
        )
    return StepRecord(
        step=step,
        config_version=version,
        reward_mean=mean,
        reward_std=0.1,
        loss=0.0,
        kl=0.01 * step,
        learning_rate=0.02,
        duration_s=0.07,
        functions={"says_yes": metrics},
        completions=completions,
        evaluation=evaluation,
    )


def recorded_run(api_key: str) -> RecordedRun:
    """The run above, for ``api_key``'s tenant."""
    with session_scope() as session:
        key = AuthRepository(session).get_active_key_by_hash(hash_api_key(api_key))
        assert key is not None, "unknown API key"
        dataset = stored_dataset(session, key.tenant_id, "recorded")

        def job(name: str, **fields: object) -> Job:
            row = Job(
                id=new_id("job"),
                tenant_id=key.tenant_id,
                dataset_id=dataset.id,
                name=name,
                base_model="rft-tiny",
                hyperparameters={"train_steps": STEPS},
                status="succeeded",
                finished_at=datetime.now(UTC),
                **fields,
            )
            session.add(row)
            session.flush()
            return row

        parent = job("stage 1")
        run = job(
            "stage 2 <b>bold</b>",
            parent_job_id=parent.id,
            parent_checkpoint_step=3,
            config_version=2,
        )
        child = job("stage 3", parent_job_id=run.id)
        for version, source in ((1, COUNTS_YES_V1), (2, COUNTS_YES_V2)):
            session.add(
                RewardFunctionVersion(
                    job_id=run.id, name="says_yes", version=version, source=source, form="sample"
                )
            )
            session.flush()
            session.add(
                JobConfigVersion(
                    job_id=run.id,
                    version=version,
                    reward_functions={"says_yes": {"version": version, "weight": float(version)}},
                )
            )
        export = Export(
            id=new_id("exp"),
            job_id=run.id,
            kind="merged",
            checkpoint_step=None,
            dtype="auto",
            status="succeeded",
            progress=1.0,
        )
        session.add(export)
        ids = RecordedRun(run.id, parent.id, child.id, export.id)

    records = [_record(step) for step in range(1, STEPS + 1)]
    for record in records:
        store_step(ids.job_id, record)
    trips = guard_trips(records, GuardSettings(), max_completion_length=MAX_COMPLETION_LENGTH)
    assert [(trip.kind, trip.step) for trip in trips] == [("repetition", 6)], trips
    for trip in trips:
        store_guard_trip(ids.job_id, trip, "recorder")
    return ids
