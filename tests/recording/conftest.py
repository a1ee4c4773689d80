from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy.orm import Session

from service.auth.service import get_or_create_tenant
from service.db import get_engine, session_scope
from service.models import Job, JobConfigVersion, new_id
from service.stack import LocalStack
from tests.held_jobs import stored_dataset


@pytest.fixture
def session() -> Iterator[Session]:
    """A transaction rolled back at the end; after-commit actions (queue messages) never run,
    so the session's worker never sees its jobs, and what it measured never reaches others."""
    with Session(get_engine()) as session:
        yield session
        session.rollback()


@pytest.fixture
def job_id(stack: LocalStack) -> str:
    """A running job of a tenant of its own, as the worker sees it mid-training."""
    with session_scope() as session:
        tenant = get_or_create_tenant(session, f"recording-{uuid.uuid4().hex[:12]}")
        dataset = stored_dataset(session, tenant.id, "recording")
        job = Job(
            id=new_id("job"),
            tenant_id=tenant.id,
            dataset_id=dataset.id,
            base_model="rft-tiny",
            hyperparameters={},
            status="running",
        )
        session.add(job)
        session.flush()
        for version in (1, 2):
            session.add(
                JobConfigVersion(
                    job_id=job.id, version=version, reward_functions={"f": {"version": 1}}
                )
            )
        return job.id
