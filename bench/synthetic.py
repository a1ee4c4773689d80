"""Synthetic data for the benchmarks: a Postgres to write into, a job row, realistic step records.

Shared by bench_recording.py and bench_reads.py so both measure the same shapes of data.
"""

from __future__ import annotations

import os
import random
import string
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sandbox.api import FunctionResult, RewardError, RewardErrorKind
from service.auth.service import KEY_PREFIX, ensure_api_key
from service.db import get_engine, get_sessionmaker, session_scope
from service.embedded import EmbeddedPostgres
from service.models import Dataset, Job, JobConfigVersion, new_id
from service.settings import get_settings
from service.stack import run_migrations
from workers.training.step_records import CompletionRecord, FunctionStepMetrics, StepRecord

FUNCTION_NAMES = ("letter_fraction", "brevity", "format")


@contextmanager
def embedded_postgres() -> Iterator[str]:
    """A fresh migrated Postgres, exported as RFT_DATABASE_URL for service.db."""
    state_dir = Path(tempfile.mkdtemp(prefix="rft-bench-"))
    postgres = EmbeddedPostgres(state_dir / "postgres")
    url = postgres.start()
    try:
        run_migrations(url)
        use_database(url)
        yield url
    finally:
        get_engine().dispose()
        postgres.stop()


def use_database(url: str) -> None:
    """Point service.db (this process's sessions) at ``url``."""
    os.environ["RFT_DATABASE_URL"] = url
    get_settings.cache_clear()
    get_engine.cache_clear()
    get_sessionmaker.cache_clear()


def create_tenant_key() -> tuple[str, str]:
    """A new tenant with an API key: (tenant id, key)."""
    key = KEY_PREFIX + uuid.uuid4().hex
    with session_scope() as session:
        tenant_id = ensure_api_key(session, f"bench-{uuid.uuid4().hex[:8]}", key)
    return tenant_id, key


def create_running_job(tenant_id: str, *, worker_id: str | None = None) -> str:
    """A job row as a worker sees it while training (status running, its lease taken)."""
    job_id = new_id("job")
    with session_scope() as session:
        dataset = Dataset(
            id=new_id("ds"),
            tenant_id=tenant_id,
            name="bench",
            file_format="jsonl",
            row_count=64,
            columns=["prompt"],
            prompt_kind="text",
            size_bytes=0,
            sha256="0" * 64,
        )
        session.add(dataset)
        session.flush()
        session.add(
            Job(
                id=job_id,
                tenant_id=tenant_id,
                dataset_id=dataset.id,
                base_model="rft-tiny",
                hyperparameters={},
                status="running",
                worker_id=worker_id,
            )
        )
        session.flush()
        session.add(
            JobConfigVersion(
                job_id=job_id,
                version=1,
                reward_functions={
                    name: {"version": 1, "weight": 1.0} for name in FUNCTION_NAMES[:2]
                },
            )
        )
    return job_id


def _text(rng: random.Random, length: int) -> str:
    return "".join(rng.choices(string.ascii_lowercase + "      ", k=length))


def make_step_record(
    step: int,
    *,
    completions: int,
    functions: int = 2,
    num_generations: int = 8,
    errors: int = 0,
    seed: int = 0,
) -> StepRecord:
    """A step as the tiny model's training reports it: ~100-character texts, 2-3 scores each."""
    rng = random.Random(seed * 1_000_003 + step)
    names = FUNCTION_NAMES[:functions]
    prompts = [f"Write a sentence about {_text(rng, 20)}:" for _ in range(64)]
    records = []
    for i in range(completions):
        scores: dict[str, float | None] = {name: rng.random() for name in names}
        records.append(
            CompletionRecord(
                prompt_index=i // num_generations,
                group_position=i % num_generations,
                dataset_index=rng.randrange(64),
                prompt=prompts[(i // num_generations) % 64],
                completion=_text(rng, rng.randint(80, 120)),
                scores=scores,
                total=sum(s for s in scores.values() if s is not None),
                advantage=rng.gauss(0, 1),
                token_count=rng.randint(10, 40),
            )
        )
    results = {
        name: FunctionResult(
            name=name,
            version=1,
            scores=[c.scores[name] for c in records],
            errors=[
                RewardError(
                    kind=RewardErrorKind.EXCEPTION,
                    message="ValueError: bad sample",
                    traceback="Traceback (most recent call last):\n  ...\nValueError: bad sample",
                    sample_index=k,
                )
                for k in range(errors)
            ],
            logs=f"step {step}: scored {completions} samples\n",
        )
        for name in names
    }
    return StepRecord(
        step=step,
        config_version=1,
        reward_mean=0.5,
        reward_std=0.1,
        loss=0.01,
        kl=0.0,
        learning_rate=0.02,
        duration_s=0.07,
        functions={
            name: FunctionStepMetrics(
                name=name,
                version=1,
                weight=1.0,
                mean=0.5,
                std=0.1,
                scored=completions,
                errors=errors,
            )
            for name in names
        },
        completions=records,
        function_results=results,
    )
